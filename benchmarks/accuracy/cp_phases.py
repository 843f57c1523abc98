"""Where the predicted time of the context-parallel rows goes: per row, the measured and
predicted iteration, the predicted seconds per event kind and stream of the first GPU, and one
attention layer's kernels on a rank split into GEMMs, the attention core, memory-bound kernels
and the copies and merges Transformer Engine's context parallelism adds
(:mod:`sim.parallel.context_kernels`), times the layers and micro-batches a GPU runs.

Rows: every row with ``cp > 1`` of the measured sources (``measured/simumax_b200.csv``,
``measured/megatron_bridge_blackwell.csv``), or the rows ``--rows`` names whatever their
``cp`` (the same breakdown for any row, e.g. a deep pipeline's), read and predicted as
``bench_measured_data.py`` does (:mod:`sim.runs`). Prints figures only; nothing is fitted.

Run: ``PIPESIM_SHARED_DATA=../shared/data python benchmarks/accuracy/cp_phases.py
[--sources simumax,bridge] [--rows N,M]`` (``--rows``: the sources' CSV row numbers). SimuMax's
seven rows take seconds; Bridge's twelve about two minutes.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.bench_measured_data import DATA, RECIPES, SOURCES  # noqa: E402
from benchmarks.accuracy.memory_rows import GENERATED  # noqa: E402
from sim.compute.decoder import layer_kernels, tokens  # noqa: E402
from sim.compute.kernels import kernel_time_s  # noqa: E402
from sim.config import parse_experiment  # noqa: E402
from sim.parallel.context_kernels import context_kernels  # noqa: E402
from sim.parallel.decoder_split import attention_dims  # noqa: E402
from sim.parallel.ring_steps import with_ring_steps  # noqa: E402
from sim.plan.point_row import point_row  # noqa: E402
from sim.point.experiment import Prepared  # noqa: E402
from sim.runs.bridge_recipes import read_recipes  # noqa: E402
from sim.runs.express import Expressed, express  # noqa: E402
from sim.runs.measured_csv import read_measured_csv  # noqa: E402
from sim.runs.predict import Predictor, build_trace, experiment_of, point_of  # noqa: E402
from sim.trace.decoder import decoder_shape  # noqa: E402
from sim.trace.schema import dtype_bytes  # noqa: E402


def layer_split(ex: Expressed, topo, trace) -> dict[str, float]:
    """Seconds of one attention block's forward and backward on a rank, by kind of kernel (in
    the trace's 16-bit dtype: a low-precision recipe's quantized GEMMs are not applied here)."""
    spec, p = topo.gpus[0].compute, ex.point
    m = decoder_shape(trace)
    tp, sp, cp = p["tensor_parallel"], p["sequence_parallel"], p["context_parallel"]
    kind = "block" if m.moe is None else "moe_block"
    out: dict[str, float] = defaultdict(float)
    d = dtype_bytes(trace.dtype)
    ring = cp if p["context_parallel_comm"] == "p2p" else 1  # TE's step kernels (ring_steps)
    for phase in layer_kernels(kind, m, 1, d, tp, sp, cp):
        for k in with_ring_steps(phase, m.seq_len, ring, spec, trace.dtype):
            part = {"gemm": "gemm", "attn": "attention core"}.get(k.kind, "memory-bound")
            out[part] += kernel_time_s(k, spec, trace.dtype)
    t, _ = tokens(m, 1, tp, sp, cp)
    for phase in context_kernels(attention_dims(m, tp), t, cp, d, p["context_parallel_comm"]):
        out["cp copies/merges"] += sum(kernel_time_s(k, spec, trace.dtype) for k in phase)
    return out


def report(run, ex: Expressed, pred: Predictor) -> None:
    """Print one row's figures (module doc)."""
    topo = pred.topology(ex.hardware, ex.overlay)
    trace = build_trace(ex, topo)
    exp = parse_experiment(experiment_of(ex, pred.hardware(ex.hardware, ex.overlay), ex.model))
    row, log = point_row(Prepared(exp, "<measured>", topo, {ex.model: trace}), point_of(ex))
    meas, lay = run.measured.iteration_time_s, run.layout
    print(f"\n{run.source}: {run.name} {run.precision} s={run.seq_len} tp{lay.tp} pp{lay.pp} "
          f"cp{lay.cp} ({row.context_parallel_comm}) dp{lay.dp} gbs {run.global_batch}")  # fmt: skip
    if log is None or row.iteration_time_s is None:
        print(f"  not simulated: {row.error}")
        return
    it = row.iteration_time_s
    print(f"  measured {meas:.4f} s, predicted {it:.4f} s ({(it / meas - 1) * 100:+.1f} %)")
    per: dict[tuple[str, str], float] = defaultdict(float)
    n = len(log.iteration_ends_s)
    for e in log.events:
        if e.device == "gpu0":
            per[e.kind, e.stream] += (e.end_s - e.start_s) / n
    print("  gpu0 per iteration (a ring span includes its hidden part, a group's first exchange")
    print("  its wait for the others):")
    for (kind, stream), s in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:15s} {stream:8s} {s * 1e3:10.1f} ms")
    layers = decoder_shape(trace).layers / max(1, lay.pp)
    mbs = row.microbatches
    for part, s in layer_split(ex, topo, trace).items():
        print(f"  one layer {part:17s} {s * 1e3:8.3f} ms x {layers:.0f} layers x {mbs} "
              f"micro-batches = {s * layers * mbs * 1e3:9.1f} ms")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", default="simumax,bridge")
    ap.add_argument("--rows", default="", help="CSV row numbers (comma-separated); all if empty")
    args = ap.parse_args()
    rows = {r.strip() for r in args.rows.split(",") if r.strip()}
    pred = Predictor()
    for source in args.sources.split(","):
        rec = read_recipes(RECIPES) if source == "bridge" else None
        runs = read_measured_csv(DATA / SOURCES[source], recipes=rec, generated=GENERATED)
        for run in runs:
            if rows and run.source.rsplit(" ", 1)[-1] not in rows:
                continue
            if not rows and run.layout.cp <= 1:
                continue
            ex = express(run)
            if isinstance(ex, Expressed):
                report(run, ex, pred)
            else:
                print(f"\n{run.source}: not expressed: {ex}")


if __name__ == "__main__":
    main()

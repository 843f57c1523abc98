"""Where the predicted time of the hybrid Mamba-2 rows goes (Nemotron 3 Nano / Super on
Megatron-Bridge): per row, the measured and predicted iteration, the predicted seconds per
event kind and stream of the first GPU, the rank's layers by kind (forward and backward
seconds of one micro-batch as the engine runs them, with precision and parallelism applied,
times the layers and micro-batches a GPU runs; and their host ops, ``fwd_ops`` / ``bwd_ops``
with the shard's per-expert ``GroupedLinear`` charge, priced at the preset's ``op`` /
``backward_op``), and one Mamba-2 layer's kernels split into
GEMMs, the SSD scan (:mod:`sim.compute.ssd_speed`), the conv and the other memory-bound
kernels (in the trace's 16-bit dtype: a low-precision recipe's quantized GEMMs are not applied
to that split).

Rows: the Megatron-Bridge rows whose model name contains ``--models`` (default ``Nemotron``),
read and predicted as ``bench_measured_data.py`` does (:mod:`sim.runs`). Prints figures only;
nothing is fitted.

Run: ``PIPESIM_SHARED_DATA=../shared/data python benchmarks/accuracy/hybrid_phases.py
[--rows N,M] [--models Nemotron_3_Super]`` (``--rows``: the CSV row numbers; all 47 Nemotron
rows take about a minute).
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
from sim.compute.kernels import kernel_time_s  # noqa: E402
from sim.compute.ssd_speed import is_ssd  # noqa: E402
from sim.compute.ssm import mamba_bwd, mamba_fwd  # noqa: E402
from sim.config import parse_experiment  # noqa: E402
from sim.plan.point_row import point_row  # noqa: E402
from sim.point.experiment import Prepared  # noqa: E402
from sim.point.simulate import resolve  # noqa: E402
from sim.runs.bridge_recipes import read_recipes  # noqa: E402
from sim.runs.express import Expressed, express  # noqa: E402
from sim.runs.measured_csv import read_measured_csv  # noqa: E402
from sim.runs.predict import Predictor, build_trace, experiment_of, point_of  # noqa: E402
from sim.trace.decoder import decoder_shape  # noqa: E402
from sim.trace.schema import dtype_bytes  # noqa: E402


def mamba_split(trace, spec, tp: int, sp: bool) -> dict[str, float]:
    """Seconds of one Mamba-2 layer's forward and backward on a rank by kind of kernel."""
    m = decoder_shape(trace)
    if m.mamba is None:
        return {}
    d, b = dtype_bytes(trace.dtype), trace.microbatch_size
    fwd = mamba_fwd(m.mamba, m.hidden, m.seq_len, b, d, tp, sp)
    dx, dw = mamba_bwd(m.mamba, m.hidden, m.seq_len, b, d, tp, sp)
    out: dict[str, float] = defaultdict(float)
    for k in fwd + dx + dw:
        part = ("SSD scan" if is_ssd(k) else "conv1d" if "conv1d" in k.name
                else "GEMM" if k.kind == "gemm" else "memory-bound")  # fmt: skip
        out[part] += kernel_time_s(k, spec, trace.dtype)
    return out


def report(run, ex: Expressed, pred: Predictor) -> None:
    """Print one row's figures (module doc)."""
    topo = pred.topology(ex.hardware, ex.overlay)
    trace = build_trace(ex, topo)
    exp = parse_experiment(experiment_of(ex, pred.hardware(ex.hardware, ex.overlay), ex.model))
    prep = Prepared(exp, "<measured>", topo, {ex.model: trace})
    point = point_of(ex)
    row, log = point_row(prep, point)
    lay = run.layout
    print(f"\n{run.source}: {run.name} {ex.hardware} {run.precision} tp{lay.tp} ep{lay.ep} "
          f"dp{lay.dp} mbs {point.microbatch_size} gbs {run.global_batch}")  # fmt: skip
    if log is None or row.iteration_time_s is None:
        print(f"  not simulated: {row.error}")
        return
    meas, it, mbs = run.measured.iteration_time_s, row.iteration_time_s, row.microbatches
    print(f"  measured {meas:.3f} s, predicted {it:.3f} s ({(it / meas - 1) * 100:+.1f} %), "
          f"{mbs} micro-batches per GPU")  # fmt: skip
    per: dict[tuple[str, str], float] = defaultdict(float)
    for e in log.events:
        if e.device == "gpu0":
            per[e.kind, e.stream] += (e.end_s - e.start_s) / len(log.iteration_ends_s)
    for (kind, stream), s in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:15s} {stream:8s} {s * 1e3:10.1f} ms")
    rank = resolve(exp, point, topo, trace, shared=prep).trace
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    for layer in rank.layers:
        k = kinds[layer.name.split(".")[0]]
        k[0], k[1], k[2] = k[0] + 1, k[1] + layer.fwd_s, k[2] + layer.bwd_s
        k[3], k[4] = k[3] + (layer.fwd_ops or 0.0), k[4] + (layer.bwd_ops or 0.0)
    host = topo.hosts[0].overhead
    for name, (n, f, b, fo, bo) in kinds.items():
        print(f"  {name:10s} x{n:3.0f}: forward {f / n * 1e3:7.3f} ms, backward {b / n * 1e3:7.3f} "
              f"ms each; {(f + b) * mbs:7.3f} s per iteration")  # fmt: skip
        print(f"  {'':10s}       host ops {fo / n:6.1f} fwd {bo / n:6.1f} bwd each: "
              f"{fo / n * host.op_s * 1e3:7.3f} / {bo / n * host.backward_op_s * 1e3:7.3f} ms "
              "at the preset's op prices (before CUDA graphs; calls not priced)")  # fmt: skip
    tp, sp = lay.tp, point.tensor_parallel > 1 and point.sequence_parallel
    for part, s in mamba_split(prep.adapted(ex.model, point.microbatch_size, "")[0],
                               topo.gpus[0].compute, tp, sp).items():  # fmt: skip
        print(f"  one Mamba layer {part:12s} {s * 1e3:7.3f} ms (16-bit)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="", help="CSV row numbers (comma-separated); all if empty")
    ap.add_argument("--models", default="Nemotron", help="a part of the model name")
    args = ap.parse_args()
    rows = {r.strip() for r in args.rows.split(",") if r.strip()}
    pred = Predictor()
    runs = read_measured_csv(DATA / SOURCES["bridge"], recipes=read_recipes(RECIPES),
                             generated=GENERATED)  # fmt: skip
    for run in runs:
        if args.models not in run.name or (rows and run.source.rsplit(" ", 1)[-1] not in rows):
            continue
        ex = express(run)
        if isinstance(ex, Expressed):
            report(run, ex, pred)
        else:
            print(f"\n{run.source}: not expressed: {ex}")


if __name__ == "__main__":
    main()

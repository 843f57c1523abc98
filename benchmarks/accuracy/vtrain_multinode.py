"""What the network between nodes costs vTrain-style runs: single-node configurations scaled
across nodes by data parallelism, predicted on vTrain's cluster (synthetic: no measured time).

Takes a few of vTrain's single-node configurations (their configuration columns only, from
``ground_truth_single_h2048.csv``: hidden 2048, 24 layers, ``t, p, w, b, B``; :data:`CONFIGS`)
and scales the data-parallel width over ``N`` nodes of 8 A100s (``w N`` replicas, global batch
``B N``: the same micro-batches per replica), as vTrain's multi-node runs grow (its
``config/validation/multi/*.json``: ``node_size: 8``, up to 512 GPUs). Each point is predicted
as ``bench_measured.py --rows`` predicts a row (:func:`sim.runs.vtrain.read_vtrain`'s run, Megatron-DeepSpeed,
Megatron's rank order: tensor, then data, then pipeline), on two networks:

* ``vtrain``: vTrain's cluster, 800 Gb/s per node (``sim/hardware/overlays/vtrain-a100-cluster.yaml``:
  its configs' ``inter_node_bandwidth``), what its multi-node rows are predicted with;
* ``preset``: the ``Nx-dgx-a100-40gb`` preset's own 8 x HDR 200 Gb/s per node (1600 Gb/s).

Prints and writes (``--out``/``multinode.csv``), per point and network, the iteration time and
its split on the first GPU of the first stage (seconds per iteration by event kind, from the
engine's event log, with the steady-state periods a long pipeline's periodic simulation leaves
out of it counted, :func:`simulate`): compute (forward, backward, recompute, optimizer, host
waits), the tensor-parallel all-reduces, the data-parallel all-reduce (after the backward, one
fp16 buffer: exposed whole, as DeepSpeed's pipeline engine runs it), the tied-embedding
all-reduce, pipeline sends (blocking), other device work, and ``idle`` (the rest of the
iteration: pipeline fill and drain, waits for a peer); beside it ``dp_bytes`` (the all-reduced gradient bytes) and ``dp_rail_s``, the
all-reduce's network term by hand: ``2 (n - 1) / n x dp_bytes / (L x r)`` for a group spread over
``n`` nodes with ``L`` members each, every member's rail at ``r`` (12.5 or 25 GB/s; the
hierarchical algorithm's rail phase, :mod:`sim.comm.hierarchical`).

``--vtrain-multi`` predicts instead a few of vTrain's own multi-node configurations
(:data:`MULTI_CONFIGS`: the settings of ``config/validation/multi/*.json``, never their measured
times) at their own GPU counts, on both networks.

``--fits PRESET[,PRESET]`` asks instead which of vTrain's 108 multi-node configurations
(``measurements/vtrain/multi_configs.csv``: settings only) fit each A100 preset in pipesim's
memory model, as ``bench_measured.py --rows`` runs them (:func:`fits`): vTrain ran them all, so
one that does not fit says something about the GPU (40 or 80 GB, which vTrain does not state)
or about a setting vTrain does not state (ZeRO), or about the memory model.

Nothing here is measured or fitted. Run:
``python benchmarks/accuracy/vtrain_multinode.py [--nodes 1,8,16,32,64] [--vtrain-multi]
[--fits dgx-a100-40gb,dgx-a100-80gb] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.vtrain_predict import predict  # noqa: E402
from sim.config import parse_experiment  # noqa: E402
from sim.engine.periodic import simulate_periodic  # noqa: E402
from sim.events import Event  # noqa: E402
from sim.point.experiment import Prepared  # noqa: E402
from sim.point.simulate import resolve  # noqa: E402
from sim.runs.express import Expressed, express  # noqa: E402
from sim.runs.predict import Predictor, build_trace, experiment_of, point_of  # noqa: E402
from sim.runs.record import MeasuredRun  # noqa: E402
from sim.runs.vtrain import NODE_SIZE, run_of_row  # noqa: E402

CONFIGS = (
    (8, 1, 1, 8, 16),
    (4, 2, 1, 4, 16),
    (2, 2, 2, 4, 32),
    (1, 4, 2, 2, 32),
    (1, 1, 8, 4, 128),
)
"""``(t, p, w, b, B)`` of single-node vTrain configurations (8 GPUs, hidden 2048, 16 heads, 24
layers, sequence 1024), configuration columns of ``ground_truth_single_h2048.csv``."""
HIDDEN, HEADS, LAYERS, SEQ = 2048, 16, 24, 1024
MULTI_CONFIGS = (
    ("config_val_3B_8_8_1_8", 3072, 30, 32, 8, 1, 8, 8, 512),
    ("config_val_3B_1_32_2_4", 3072, 30, 32, 1, 2, 32, 4, 512),
    ("config_val_18B_8_32_1_4", 6144, 40, 48, 8, 1, 32, 4, 1024),
    ("config_val_18B_16_16_1_2", 6144, 40, 48, 16, 1, 16, 2, 1024),
    ("config_val_39B_8_8_8_4", 8192, 48, 64, 8, 8, 8, 4, 1536),
    ("config_val_175B_8_8_8_2", 12288, 96, 96, 8, 8, 8, 2, 1536),
)
"""``(file, h, L, heads, t, p, w, b, B)`` of vTrain's multi-node configurations
(VIA-Research/vTrain@f8dda84 ``config/validation/multi/<file>.json``, sequence 2048; files
named ``<size>_<t>_<w>_<p>_<b>``). Settings only: their measured times are held out."""
MULTI_SEQ = 2048
RAIL_BPS = {"vtrain": 12.5e9, "preset": 25e9}
"""Each GPU's rail: vTrain's 800 Gb/s / 8 GPUs; the preset's HDR 200 Gb/s NIC per GPU."""


def run_of(t: int, p: int, w: int, b: int, batch: int, nodes: int, shape=None):
    """The vTrain-layout run of a configuration scaled to ``nodes`` nodes (module doc);
    ``shape``: ``(h, L, heads, seq)``, default the single-node rows' 2048, 24, 16, 1024."""
    h, layers, heads, seq = shape or (HIDDEN, LAYERS, HEADS, SEQ)
    row = pd.Series({
        "gpus": t * p * w * nodes, "global_batch": batch * nodes, "microbatch_size": b,
        "hidden": h, "heads": heads, "layers": layers, "seq_len": seq,
        "tensor_parallel": t, "data_parallel": w * nodes, "pipeline_parallel": p,
        "iteration_time_ms": 1.0,  # placeholder: read_vtrain needs a positive value
    })  # fmt: skip
    return run_of_row(row, 0, "synthetic")


SPLIT = {
    "compute": ("compute", "recompute", "optimizer", "host_wait", "stall"),
    "tp_allreduce": (),
    "dp_allreduce": (),
    "tied_allreduce": (),
    "sends": (),
    "other": (),
}


def simulate(pred: Predictor, run: MeasuredRun) -> tuple[float, list[tuple[Event, int]]]:
    """Predicted seconds per iteration of ``run`` (as ``bench_measured_data.py`` predicts it)
    and the events of its last iteration, each with how many times it counts: a long pipeline's
    steady state is simulated once per period (:func:`sim.engine.periodic.simulate_periodic`,
    as :func:`sim.point.simulate.evaluate` runs it), and the periods it leaves out of the log
    count their one period's events ``repeats`` times."""
    item = express(run)
    if not isinstance(item, Expressed):
        raise ValueError(f"{run.name}: not expressed ({item})")
    topo = pred.topology(item.hardware, item.overlay)
    exp = parse_experiment(experiment_of(item, pred.hardware(item.hardware, item.overlay),
                                         item.model))  # fmt: skip
    trace = build_trace(item, topo)
    prep = Prepared(exp, "<synthetic>", topo, {item.model: trace})
    res = resolve(exp, point_of(item), topo, trace, shared=prep)
    log, repeated = simulate_periodic(res.sim_input, res.schedule)
    ends = log.iteration_ends_s
    start, end = (ends[-2], ends[-1]) if len(ends) > 1 else (0.0, ends[-1])
    out = [(ev, 1) for ev in log.events if start <= ev.start_s < end]
    if repeated is not None:
        out += [(ev, repeated.repeats) for ev in repeated.events]
    return end - start, out


def split(events: list[tuple[Event, int]], device: str = "gpu0") -> dict[str, float]:
    """Seconds per iteration on ``device`` by part (module doc), and the data-parallel
    all-reduce's bytes."""
    out: dict[str, float] = defaultdict(float)
    for ev, n in events:
        if ev.device != device:
            continue
        d = (ev.end_s - ev.start_s) * n
        if ev.kind in SPLIT["compute"]:
            out["compute"] += d
        elif ev.kind == "allreduce" and ev.stream == "tp":
            out["tp_allreduce"] += d
        elif ev.kind == "allreduce" and ev.name.startswith("tied"):
            out["tied_allreduce"] += d
        elif ev.kind == "allreduce":
            out["dp_allreduce"] += d
            out["dp_bytes"] = ev.nbytes
        elif ev.kind == "transfer":
            out["sends"] += d
        else:
            out["other"] += d
    return dict(out)


def rail_s(nbytes: float, t: int, w: int, rail_Bps: float) -> float:
    """The data-parallel all-reduce's network term by hand (module doc): the first stage's
    ``w`` replicas of ``t`` GPUs fill ``n = w t / 8`` nodes (Megatron's order), ``L = 8 / t``
    members per node; 0 within one node.

    Example (t = 8, 8 nodes, 100 MB at 12.5 GB/s: 2 x 7/8 x 100e6 / 12.5e9):
        >>> round(rail_s(100e6, 8, 8, 12.5e9), 6)
        0.014
    """
    nodes = w * t // NODE_SIZE
    if nodes < 2:
        return 0.0
    members = max(1, NODE_SIZE // t)
    return 2 * (nodes - 1) / nodes * nbytes / (members * rail_Bps)


def cases(nodes: list[int], multi: bool) -> list[tuple[str, int, int, object]]:
    """``(config, nodes, t, run)`` of every point (module doc)."""
    if multi:
        out = []
        for name, h, layers, heads, t, p, w, b, batch in MULTI_CONFIGS:
            run = run_of(t, p, w, b, batch, 1, (h, layers, heads, MULTI_SEQ))
            out.append((name, t * p * w // NODE_SIZE, t, run))
        return out
    return [(f"t{t}p{p}w{w}b{b}B{batch}", n, t, run_of(t, p, w, b, batch, n))
            for t, p, w, b, batch in CONFIGS for n in nodes]  # fmt: skip


def points(nodes: list[int], multi: bool = False) -> pd.DataFrame:
    """Every point on both networks (module doc)."""
    pred = Predictor()
    rows = []
    for name, n, t, run in cases(nodes, multi):
        for net in ("vtrain", "preset") if n > 1 else ("one node",):
            r = run if net == "vtrain" else replace(run, hardware_overlay="")  # type: ignore[type-var]
            s, events = simulate(pred, r)  # type: ignore[arg-type]
            parts = split(events)
            nbytes = parts.pop("dp_bytes", 0.0)
            w = run.layout.dp_replicate  # type: ignore[attr-defined]
            rows.append({
                "config": name, "nodes": n, "gpus": 8 * n, "network": net,
                "iteration_ms": s * 1e3, **{k: parts.get(k, 0.0) * 1e3 for k in SPLIT},
                "idle_ms": (s - sum(parts.get(k, 0.0) for k in SPLIT)) * 1e3,
                "dp_bytes": nbytes,
                "dp_rail_ms": rail_s(nbytes, t, w, RAIL_BPS.get(net, 25e9)) * 1e3,
            })  # fmt: skip
    return pd.DataFrame(rows)


MULTI_CSV = ROOT / "measurements" / "vtrain" / "multi_configs.csv"
"""vTrain's multi-node configurations, settings only (the file's header says its source)."""


def fits(presets: list[str]) -> pd.DataFrame:
    """Every configuration of :data:`MULTI_CSV` with, per preset, whether pipesim says it fits
    (``fits_<preset>``: ``bench_measured.py --rows``'s prediction, on ``Nx-<preset>`` with
    vTrain's cluster network)."""
    df = pd.read_csv(MULTI_CSV, comment="#")
    rows = df.assign(iteration_time_ms=1.0)  # placeholder: no time is read or compared
    rows["microbatches"] = rows.global_batch // (rows.microbatch_size * rows.data_parallel)
    for preset in presets:
        df[f"fits_{preset}"] = predict(rows, preset).fits.astype(bool).to_numpy()
    return df


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,8,16,32,64", help="node counts (default: %(default)s)")
    ap.add_argument(
        "--vtrain-multi",
        action="store_true",
        help="vTrain's own multi-node configurations instead (settings only)",
    )
    ap.add_argument("--fits", default="", help="presets to check vTrain's multi configs' memory on")
    ap.add_argument("--out", default="results/vtrain_multinode", help="folder for the CSV")
    args = ap.parse_args()
    if args.fits:
        table = fits(args.fits.split(","))
        Path(args.out).mkdir(parents=True, exist_ok=True)
        table.to_csv(Path(args.out) / "fits.csv", index=False)
        for col in [c for c in table.columns if c.startswith("fits_")]:
            print(f"{col[5:]}: {int(table[col].sum())} of {len(table)} fit; not: "
                  + ", ".join(table.file[~table[col]].str.removeprefix("config_val_")))  # fmt: skip
        return
    df = points([int(x) for x in args.nodes.split(",")], args.vtrain_multi)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "multinode.csv", index=False)
    pd.set_option("display.width", 200)
    print(df.drop(columns="dp_bytes").to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print(f"wrote {out / 'multinode.csv'}")


if __name__ == "__main__":
    main()

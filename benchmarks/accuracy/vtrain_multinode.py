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
engine's event log): compute (forward, backward, recompute, optimizer, host waits), the
tensor-parallel all-reduces, the data-parallel all-reduce (after the backward, one fp16 buffer:
exposed whole, as DeepSpeed's pipeline engine runs it), the tied-embedding all-reduce, pipeline
sends; beside it ``dp_bytes`` (the all-reduced gradient bytes) and ``dp_rail_s``, the
all-reduce's network term by hand: ``2 (n - 1) / n x dp_bytes / (L x r)`` for a group spread over
``n`` nodes with ``L`` members each, every member's rail at ``r`` (12.5 or 25 GB/s; the
hierarchical algorithm's rail phase, :mod:`sim.comm.hierarchical`).

Nothing here is measured or fitted. Run:
``python benchmarks/accuracy/vtrain_multinode.py [--nodes 1,8,16,32,64] [--out DIR]``.
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

from benchmarks.accuracy.vtrain_phases import _simulate  # noqa: E402
from sim.events import EventLog  # noqa: E402
from sim.runs.predict import Predictor  # noqa: E402
from sim.runs.vtrain import NODE_SIZE, _run  # noqa: E402

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
RAIL_BPS = {"vtrain": 12.5e9, "preset": 25e9}
"""Each GPU's rail: vTrain's 800 Gb/s / 8 GPUs; the preset's HDR 200 Gb/s NIC per GPU."""


def run_of(t: int, p: int, w: int, b: int, batch: int, nodes: int):
    """The vTrain-layout run of a configuration scaled to ``nodes`` nodes (module doc)."""
    row = pd.Series({
        "gpus": t * p * w * nodes, "global_batch": batch * nodes, "microbatch_size": b,
        "hidden": HIDDEN, "heads": HEADS, "layers": LAYERS, "seq_len": SEQ,
        "tensor_parallel": t, "data_parallel": w * nodes, "pipeline_parallel": p,
        "iteration_time_ms": 1.0,  # placeholder: read_vtrain needs a positive value
    })  # fmt: skip
    return _run(row, 0, "synthetic")


SPLIT = {
    "compute": ("compute", "recompute", "optimizer", "host_wait", "stall"),
    "tp_allreduce": (),
    "dp_allreduce": (),
    "tied_allreduce": (),
    "sends": (),
}


def split(log: EventLog, device: str = "gpu0") -> dict[str, float]:
    """Seconds per iteration on ``device`` by part (module doc), and the data-parallel
    all-reduce's bytes."""
    out: dict[str, float] = defaultdict(float)
    n = max(1, len(log.iteration_ends_s))
    for ev in log.events:
        if ev.device != device:
            continue
        d = (ev.end_s - ev.start_s) / n
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


def points(nodes: list[int]) -> pd.DataFrame:
    """Every configuration at every node count on both networks (module doc)."""
    pred = Predictor()
    rows = []
    for t, p, w, b, batch in CONFIGS:
        for n in nodes:
            run = run_of(t, p, w, b, batch, n)
            nets = ("vtrain", "preset") if n > 1 else ("one node",)
            for net in nets:
                r = run if net == "vtrain" else replace(run, hardware_overlay="")
                s, log = _simulate(pred, r)
                parts = split(log) if log is not None else {}
                nbytes = parts.pop("dp_bytes", 0.0)
                rows.append({
                    "config": f"t{t}p{p}w{w}b{b}B{batch}", "nodes": n, "gpus": 8 * n,
                    "network": net, "iteration_ms": s * 1e3,
                    **{k: parts.get(k, 0.0) * 1e3 for k in SPLIT},
                    "dp_bytes": nbytes,
                    "dp_rail_ms": rail_s(nbytes, t, w * n, RAIL_BPS.get(net, 25e9)) * 1e3,
                })  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,8,16,32,64", help="node counts (default: %(default)s)")
    ap.add_argument("--out", default="results/vtrain_multinode", help="folder for the CSV")
    args = ap.parse_args()
    df = points([int(x) for x in args.nodes.split(",")])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "multinode.csv", index=False)
    pd.set_option("display.width", 200)
    print(df.drop(columns="dp_bytes").to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print(f"wrote {out / 'multinode.csv'}")


if __name__ == "__main__":
    main()

"""Speed of the planner on the questions users ask: bounds, pruning and simulation, end to end.

Run: ``python benchmarks/speed/bench_planner.py [--question ds40b|llama70b|all] [--jobs N]
[--executor local|ray] [--exhaustive] [--check]``.

Questions:

* ``ds40b`` (issue 11, item 4): GPT "DS-40B" (41.1B parameters, which needs tensor x pipeline
  parallelism: 16 bytes per parameter of model state) on two DGX H100 (the ``2x-dgx-h100``
  preset, 16 GPUs), global batch 64, over tensor_parallel x sequence_parallel x stages x
  dp_width x microbatch_size x schedule x memory_policy; the combinations that cannot run (more
  GPUs than 16, a batch that does not divide) are skipped by :func:`sim.plan.sweep.expand` and
  not counted. Target: at least 2,000 configurations in at most 60 s on a 2-core machine.
* ``llama70b`` (issue 28): ``experiments/llama3-70b-64xh100.yaml``, "Llama-3-70B, sequence
  8192, global batch 512 on 64 H100: which layout?" (1F1B and interleaved 1F1B x p 1-8 x t 2-8
  x cp 1-2 x b 1-2, distributed optimizer: 92 configurations). Target: at most 60 s wall on a
  2-core machine, with the exhaustive sweep's winner (``--check`` runs both and compares).

Prints, per question, the configurations expanded, pruned by the memory lower bound (and of
those, once partitioned), pruned by the throughput bound and simulated, the winner, and wall
and CPU seconds (this process and its workers: the machine is shared, CPU seconds are
steadier) with the load average. Asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from sim.config import load_experiment, parse_experiment
from sim.plan.executors import open_executor
from sim.plan.planner import plan_points
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.rows import pick_winner

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "experiments" / "llama3-70b-64xh100.yaml"

GRID = {
    "name": "bench-planner-2x-dgx-h100",
    "hardware": "2x-dgx-h100",
    "models": [{"name": "gpt-ds-40b", "trace": "gpt-ds-40b", "global_batch": 64}],
    "training": {"optimizer": "adam"},
    "sweep": {
        "schedule": ["gpipe", "1f1b", "pipedream_2bw"],
        "stages": [1, 2, 4, 8, 16],
        "dp_width": [1, 2, 4, 8],
        "tensor_parallel": [1, 2, 4, 8],
        "sequence_parallel": [False, True],
        "microbatch_size": [1, 2, 4, 8],
        "memory_policy": [
            "none",
            "recompute:full",
            "recompute:selective",
            "zero_offload",
            "zero3",
            "cpu_swap",
        ],
    },
}
"""The ``ds40b`` question's experiment (as a YAML mapping)."""


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _describe(w) -> str:
    if w is None:
        return "none fits"
    tp = f"t={w.tensor_parallel}{'+sp' if w.sequence_parallel else ''}"
    cp = f" cp={w.context_parallel}" if w.context_parallel > 1 else ""
    v = f" v={w.virtual_stages}" if w.virtual_stages > 1 else ""
    return (
        f"{w.schedule} p={w.stages}{v} w={w.dp_width} {tp}{cp} b={w.microbatch_size} "
        f"m={w.microbatches} {w.memory_policy}: {w.throughput_samples_per_s:.3f} samples/s"
    )


def run_question(name: str, args: argparse.Namespace, exhaustive: bool) -> object:
    """Plan question ``name`` (pruned, or every point); print its figures; its winner."""
    load = _load()
    t0, c0 = time.perf_counter(), cpu_s()
    if name == "ds40b":
        exp = parse_experiment(GRID, file="<bench_planner>")
        prep = prepare(exp, "<bench_planner>")
    else:
        exp = load_experiment(LLAMA)
        prep = prepare(exp, str(LLAMA))
    points, skipped = expand(prep)
    t_expand = time.perf_counter() - t0
    with open_executor(args.executor, prep, args.jobs) as pool:
        rows, stats = plan_points(
            prep, points, cache_dir=None, executor=pool, prune=not exhaustive, jobs=args.jobs
        )
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    winner = pick_winner(rows)
    fits = sum(r.ok for r in rows)
    mode = "exhaustive" if exhaustive else "planned"
    print(f"[{name}, {mode}] {exp.hardware}, model {exp.models[0].name}")
    print(f"  combinations skipped as invalid: {len(skipped)}")
    print(f"  configurations expanded:        {stats.expanded}")
    if not exhaustive:
        print(
            f"  pruned by memory lower bound:   {stats.pruned_memory} "
            f"({stats.pruned_resolved} once partitioned)"
        )
        print(f"  pruned by throughput bound:     {stats.pruned_bound}")
    print(f"  simulated:                      {stats.simulated} ({fits} fit)")
    print(f"  winner: {_describe(winner)}")
    print(f"  expand: {t_expand:.2f} s")
    print(
        f"  wall: {wall:.1f} s, CPU: {cpu:.1f} s ({args.jobs} jobs, {args.executor}, "
        f"{os.cpu_count()} cores; load average before {load}, after {_load()})"
    )
    return winner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--question", default="all", choices=["ds40b", "llama70b", "all"])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--exhaustive", action="store_true", help="no pruning (slow)")
    ap.add_argument("--check", action="store_true", help="also run exhaustive, compare winners")
    args = ap.parse_args()
    names = ["ds40b", "llama70b"] if args.question == "all" else [args.question]
    for name in names:
        winner = run_question(name, args, args.exhaustive)
        if args.check and not args.exhaustive:
            other = run_question(name, args, True)
            print(f"  same winner as the exhaustive sweep: {winner == other}")


if __name__ == "__main__":
    main()

"""Speed of the planner on a 2-server grid: bounds, pruning and simulation, end to end.

Run: ``python benchmarks/bench_planner.py [--jobs N] [--executor local|ray] [--exhaustive]``.

The grid (issue 11, item 4): GPT "DS-40B" (41.1B parameters, which needs tensor x pipeline
parallelism: 16 bytes per parameter of model state) on two DGX H100 (the ``2x-dgx-h100``
preset, 16 GPUs), global batch 64, over tensor_parallel x sequence_parallel x stages x dp_width
x microbatch_size x schedule x memory_policy; the combinations that cannot run (more GPUs than
16, a batch that does not divide) are skipped by :func:`sim.plan.sweep.expand` and not counted.
Prints the configurations expanded, pruned by the memory lower bound, pruned by the throughput
bound and simulated, the winner, and wall and CPU seconds (this process and its workers: the
machine is shared, CPU seconds are steadier). Target: at least 2,000 configurations in at most
60 s on a 2-core machine. Asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import os
import time

from sim.config import parse_experiment
from sim.plan.executors import open_executor
from sim.plan.planner import plan_points
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.rows import pick_winner

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
"""The benchmark's experiment (as a YAML mapping)."""


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--exhaustive", action="store_true", help="no pruning (slow)")
    args = ap.parse_args()

    t0, c0 = time.perf_counter(), cpu_s()
    exp = parse_experiment(GRID, file="<bench_planner>")
    prep = prepare(exp, "<bench_planner>")
    points, skipped = expand(prep)
    t_expand = time.perf_counter() - t0
    with open_executor(args.executor, prep, args.jobs) as pool:
        rows, stats = plan_points(
            prep,
            points,
            cache_dir=None,
            executor=pool,
            prune=not args.exhaustive,
            jobs=args.jobs,
        )
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    winner = pick_winner(rows)
    fits = sum(r.ok for r in rows)
    print(f"grid: {GRID['hardware']}, model {GRID['models'][0]['name']}")
    print(f"combinations skipped as invalid: {len(skipped)}")
    print(f"configurations expanded:        {stats.expanded}")
    print(f"pruned by memory lower bound:   {stats.pruned_memory}")
    print(f"pruned by throughput bound:     {stats.pruned_bound}")
    print(f"simulated:                      {stats.simulated} ({fits} fit)")
    if winner is not None:
        print(
            f"winner: {winner.schedule} p={winner.stages} w={winner.dp_width} "
            f"t={winner.tensor_parallel}{'+sp' if winner.sequence_parallel else ''} "
            f"b={winner.microbatch_size} m={winner.microbatches} {winner.memory_policy}: "
            f"{winner.throughput_samples_per_s:.3f} samples/s"
        )
    else:
        print("winner: none fits")
    print(f"expand: {t_expand:.2f} s")
    print(
        f"wall: {wall:.1f} s, CPU: {cpu:.1f} s ({args.jobs} jobs, {args.executor}, "
        f"{os.cpu_count()} cores; target <= 60 s wall)"
    )


if __name__ == "__main__":
    main()

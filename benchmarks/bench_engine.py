"""Speed of the simulator: actions per second, one p=8 m=64 configuration, the dgx1 sweep.

Run: ``python benchmarks/bench_engine.py``. Prints figures; asserts nothing (timings are not
tests). Targets (issue 2): one p=8, m=64 configuration under 0.5 s; the dgx1 sweep under 60 s
on a 2-core machine.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sim.config import PointConfig, load_experiment
from sim.point import evaluate, resolve
from sim.sweep import expand, prepare, run_points

ROOT = Path(__file__).resolve().parents[1]


def one_config(schedule: str, repeats: int = 5) -> tuple[float, int]:
    """Median wall seconds of resolve + simulate + metrics for GPT-2 1.5B, p=8, m=64."""
    exp_file = ROOT / "experiments" / "dgx1.yaml"
    prep = prepare(load_experiment(exp_file), str(exp_file))
    point = PointConfig(model="gpt2-1.5b", schedule=schedule, stages=8, dp_width=1,
                        microbatch_size=1, microbatches=64, memory_policy="none",
                        global_batch=64)
    times, actions = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = resolve(prep.exp, point, prep.topology, prep.traces["gpt2-1.5b"])
        _, log = evaluate(res)
        times.append(time.perf_counter() - t0)
        actions = sum(len(rank) for rank in res.sim_input.program)
    return statistics.median(times), actions


def sweep(jobs: int) -> tuple[float, int]:
    exp_file = ROOT / "experiments" / "dgx1.yaml"
    prep = prepare(load_experiment(exp_file), str(exp_file))
    points, _ = expand(prep)
    tmp = Path(tempfile.mkdtemp())
    try:
        t0 = time.perf_counter()
        run_points(prep, points, cache_dir=tmp, jobs=jobs)
        return time.perf_counter() - t0, len(points)
    finally:
        shutil.rmtree(tmp)


def main() -> None:
    for sched in ("1f1b", "gpipe", "pipedream_2bw", "pipedream"):
        wall, actions = one_config(sched)
        print(f"one config gpt2-1.5b p=8 m=64 {sched:14s}: {wall:.3f} s, {actions} actions "
              f"({actions / wall:,.0f} actions/s)")
    jobs = os.cpu_count() or 1
    wall, n = sweep(jobs)
    print(f"dgx1.yaml sweep (no cache, {jobs} jobs): {n} configurations in {wall:.1f} s")
    t0 = time.perf_counter()
    os.system(f"cd {ROOT} && sim run experiments/dgx1.yaml --no-cache --out "
              f"{tempfile.mkdtemp()} > /dev/null")
    print(f"`sim run experiments/dgx1.yaml --no-cache` end to end: "
          f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()

"""Wall and CPU seconds of ``sim run experiments/dgx1.yaml``, a cold run each time (issue 28:
at most 2 s wall on a 2-core machine).

Run: ``python benchmarks/speed/bench_run_dgx1.py [--runs 5] [--jobs 0] [--no-plots] [--root DIR]``. Each run
is a fresh process, ``python -m sim.cli run experiments/dgx1.yaml --out TMP -q`` into a new
folder (no row cache); the figures are the whole process's wall time and its CPU time with
its workers' (user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``), minimum, median
and maximum, with the load average before and after (the machine is shared: a load above the
core count slows the wall time, the CPU time much less). Prints figures; asserts nothing
(timings are not tests). ``--check DIR`` also compares each run's results.csv and winner.yaml
with DIR's (an earlier run's, e.g. main's) byte for byte.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def one_run(root: Path, out: Path, jobs: int, plots: bool) -> tuple[float, float]:
    """Wall and CPU seconds (this child and its workers) of one cold ``sim run`` of the
    checkout ``root``."""
    cmd = [sys.executable, "-m", "sim.cli", "run", "experiments/dgx1.yaml", "--out", str(out),
           "-q", "--jobs", str(jobs)] + ([] if plots else ["--no-plots"])  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="Counted runs (after one warm-up).")
    ap.add_argument("--jobs", type=int, default=0, help="sim run --jobs (0: one per core).")
    ap.add_argument("--no-plots", action="store_true", help="sim run --no-plots.")
    ap.add_argument("--check", type=Path, help="An earlier output folder to compare with.")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="The checkout to run (default: this one), e.g. main's.")  # fmt: skip
    args = ap.parse_args()
    walls, cpus = [], []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.runs + 1):
            out = Path(tmp) / f"run{k}"
            wall, cpu = one_run(args.root, out, args.jobs, not args.no_plots)
            if k:
                walls.append(wall)
                cpus.append(cpu)
            if args.check:
                for name in ("results.csv", "winner.yaml"):
                    same = filecmp.cmp(out / name, args.check / name, shallow=False)
                    if not same:
                        print(f"run {k}: {name} differs from {args.check / name}")
    print(f"{args.root}: sim run experiments/dgx1.yaml, {args.runs} cold runs, {os.cpu_count()} cores, "
          f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after")  # fmt: skip
    print(f"  wall s (min / median / max): {_spread(walls)}")
    print(f"  CPU s with workers:          {_spread(cpus)}")


if __name__ == "__main__":
    main()

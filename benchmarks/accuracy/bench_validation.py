"""Accuracy of the simulator against real torch replays on this machine's CPU.

Profiles a small GPT (4 blocks, hidden 256) with ``sim profile --concurrent 2``'s function
(two simultaneous processes, as the replay's two ranks share the cores), calibrates 2 gloo
ranks, then for GPipe, 1F1B and PipeDream-2BW at several micro-batch counts replays the
configuration with our runtime (and torch's ScheduleGPipe / Schedule1F1B) and simulates it on
the calibrated hardware. Prints the iteration-time error per configuration and the mean
absolute percentage error (MAPE), the peak-memory error, and per rank where the iteration time
goes (F, B, STEP, idle; measured beside predicted, ``validation_breakdown.csv``).

Run: ``python benchmarks/accuracy/bench_validation.py [--microbatches 4 8 16] [--iterations 5]``.
Prints figures; asserts nothing. Target (issue 4): MAPE under 10 % on CPU.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import yaml

from backends.torch.replay.replayer import TorchReplayer
from sim import api


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--microbatches", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()

    from backends.torch.calibrate.hardware import calibrate
    from backends.torch.profile.concurrent import profile_concurrent

    tmp = Path(tempfile.mkdtemp(prefix="pipesim-bench-"))
    spec = dict(
        name="gpt-bench",
        kind="gpt",
        layers=args.layers,
        hidden=args.hidden,
        heads=4,
        seq_len=128,
        vocab=2048,
    )
    t0 = time.perf_counter()
    threads = max(1, (os.cpu_count() or 2) // 2)
    profile_concurrent(spec, copies=2, microbatch_size=4, threads=threads, reps=9, path=tmp / "gpt")
    calibrate(nproc=2, device="cpu", path=tmp / "hw.yaml")
    exp = {
        "name": "bench",
        "hardware": "hw.yaml",
        "models": [
            {"name": "gpt-bench", "trace": "gpt.csv", "global_batch": 4 * args.microbatches[0]}
        ],
        "training": {"optimizer": "sgd"},
        "sweep": {"schedule": "gpipe", "stages": 2, "microbatch_size": 4},
    }
    (tmp / "exp.yaml").write_text(yaml.safe_dump(exp))
    print(f"profiled and calibrated in {time.perf_counter() - t0:.1f} s ({tmp})")

    def show(r: dict) -> None:
        print(
            f"{r['schedule']:14s} {r['runtime']:5s} m={r['microbatches']:3d}: measured "
            f"{r['measured_iteration_s'] * 1e3:8.1f} ms  predicted "
            f"{r['predicted_iteration_s'] * 1e3:8.1f} ms  error {r['error']:+6.1%}  "
            f"peak memory error {r['memory_error']:+6.1%}",
            flush=True,
        )

    result = api.validate(
        tmp / "exp.yaml",
        replayer=TorchReplayer(),
        out=tmp,
        schedules=("gpipe", "1f1b", "pipedream_2bw"),
        microbatches=tuple(args.microbatches),
        iterations=args.iterations,
        torch_builtin=True,
        on_row=show,
    )
    df, dest, parts = result.table, result.path, result.breakdown
    ours = df[df.runtime == "ours"]
    torch_rows = df[df.runtime == "torch"]
    print(
        f"MAPE iteration time, our runtime: {ours.error.abs().mean():.1%} "
        f"({len(ours)} configurations)"
    )
    if len(torch_rows):
        print(
            f"MAPE iteration time, torch ScheduleGPipe/Schedule1F1B: "
            f"{torch_rows.error.abs().mean():.1%} ({len(torch_rows)} configurations)"
        )
    print(f"MAPE peak memory (our runtime): {ours.memory_error.abs().mean():.1%}")
    if len(parts):
        print("per-rank breakdown, ms per iteration (measured / predicted / difference):")
        for (sched, m, rank), g in parts.groupby(["schedule", "microbatches", "rank"], sort=False):
            cells = "  ".join(
                f"{r.part} {r.measured_s * 1e3:.0f}/{r.predicted_s * 1e3:.0f}/{r.diff_s * 1e3:+.0f}"
                for r in g.itertuples()
            )
            print(f"  {sched:14s} m={m:3d} {rank}: {cells}")
    ran = df[df.status == "ok"]
    rest = ", ".join(f"{n} {k}" for k, n in df[df.status != "ok"].status.value_counts().items())
    print(
        f"{len(ran)} of {len(df)} replays ran{f' ({rest})' if rest else ''}; "
        f"all actions done: {bool(ran.all_actions_done.all())}; "
        f"losses finite: {bool(ran.losses_finite.all())}; table: {dest}"
    )


if __name__ == "__main__":
    main()

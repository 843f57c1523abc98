"""Wall time and peak memory of one configuration against the cluster's GPU count, and the
planner's search on 1,024 GPUs (issue 18, item 4).

Run: ``python benchmarks/bench_scale.py [--out DIR] [--gpus 8,16,...] [--skip-planner]
[--executor local|ray] [--jobs N]``.

1. **Scaling** (one process per GPU count, so that each peak RSS is its own): a GPT of 40
   layers (h = 5120, 40 heads, s = 2048, GPT-3 13B's shape, Brown et al. 2020 Table 2.1) under
   1F1B with Megatron-LM's runtime, t = 4, p = 2, m = 16 micro-batches of 1 sample, full
   recompute, on ``N/8`` DGX H100 servers (``Nx-dgx-h100``), data-parallel width ``N/8``:
   the family grows by replicas only. For each ``N`` (8 to 16,384) it prints the seconds to
   load the cluster, to resolve the point and to simulate it, the total, and the process's
   CPU seconds and peak RSS (``ru_maxrss``); above 64 GPUs the replicas are simulated once
   (:mod:`sim.engine.symmetry`), so the simulation stays flat while loading grows with the
   cluster. ``N = 3,072`` is in the list (the issue's target: one 3,072-GPU configuration in
   at most 2 s and 2 GB).
2. **Planner**: GPT-3 175B (96 layers, h = 12288, 96 heads, s = 2048; Brown et al. Table 2.1)
   on 128 DGX A100 80GB (1,024 GPUs), global batch 1,536 (Narayanan et al. SC'21 Table 1's
   175B row), ``sweep.gpus: 1024`` over t in {4, 8}, p in {8, 16}, b in {1, 2}, 1F1B and
   interleaved 1F1B, full or selective recompute or the distributed optimizer with recompute;
   prints its wall time, the configurations simulated and pruned and the winner (target: at
   most 60 s on 2 cores).

Writes ``scale.png`` (log-log: seconds and peak RSS against GPUs) and ``scale.csv`` under
``--out`` (default ``/tmp/pipesim-bench-scale``). Traces are generated analytically for the
A100's and H100's kernel models into that folder. Asserts nothing (timings are not tests; the
machine it runs on may be shared: its figures are upper bounds).
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_GPUS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 8192, 16384)
SCALE_SHAPE = {"layers": 40, "hidden": 5120, "heads": 40, "seq_len": 2048, "vocab": 51200}
PLAN_SHAPE = {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, "vocab": 51200}


def _trace(out: Path, name: str, shape: dict, preset: str) -> str:
    """The analytic GPT trace ``name`` for ``preset``'s GPU, written once under ``out``."""
    from sim.trace.generator import preset_gpu, transformer_trace
    from sim.trace.native import write_trace

    path = out / f"{name}.csv"
    if not path.exists():
        trace = transformer_trace(
            "gpt", name=name, microbatch_size=1, dtype="fp16", gpu=preset_gpu(preset), **shape
        )
        write_trace(trace, path)
    return str(path)


def scale_experiment(gpus: int, trace: str) -> dict:
    """The scaling family's experiment at ``gpus`` GPUs (module doc)."""
    w, m = gpus // 8, 16
    return {
        "name": f"scale-{gpus}",
        "hardware": f"{gpus // 8}x-dgx-h100",
        "framework": "megatron-lm",
        "models": [{"name": "gpt-13b", "trace": trace, "global_batch": w * m}],
        "training": {"optimizer": "adam", "dtype": "fp16"},
        "sweep": {
            "schedule": "1f1b",
            "stages": 2,
            "dp_width": w,
            "tensor_parallel": 4,
            "microbatch_size": 1,
            "memory_policy": "recompute",
        },
    }


def plan_experiment(trace: str) -> dict:
    """The planner's 1,024-GPU grid (module doc)."""
    return {
        "name": "plan-1024",
        "hardware": "128x-dgx-a100-80gb",
        "framework": "megatron-lm",
        "models": [{"name": "gpt-175b", "trace": trace, "global_batch": 1536}],
        "training": {"optimizer": "adam", "dtype": "fp16"},
        "sweep": {
            "gpus": 1024,
            "schedule": ["1f1b", "interleaved_1f1b"],
            "stages": [8, 16],
            "tensor_parallel": [4, 8],
            "microbatch_size": [1, 2],
            "memory_policy": ["recompute", "recompute:selective", "dist_opt:recompute"],
        },
    }


def one(gpus: int, trace: str) -> dict:
    """Load, resolve and simulate the family at ``gpus`` GPUs in this process."""
    from sim.config import parse_experiment
    from sim.plan.sweep import expand
    from sim.point.experiment import prepare
    from sim.point.simulate import evaluate, resolve

    t0 = time.perf_counter()
    exp = parse_experiment(scale_experiment(gpus, trace))
    prep = prepare(exp, "<bench>")
    t1 = time.perf_counter()
    (point,), _ = expand(prep)
    res = resolve(exp, point, prep.topology, prep.traces[point.model])
    t2 = time.perf_counter()
    met, log = evaluate(res)
    t3 = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "gpus": gpus,
        "load_s": t1 - t0,
        "resolve_s": t2 - t1,
        "simulate_s": t3 - t2,
        "total_s": t3 - t0,
        "cpu_s": ru.ru_utime + ru.ru_stime,  # the process's, imports included
        "peak_rss_MiB": ru.ru_maxrss / 1024,
        "mirrored": res.sim_input.mirrored,
        "events": len(log.events),
        "iteration_s": met.iteration_time_s,
        "peak_GiB": met.peak_memory_bytes / 2**30,
    }


def planner(trace: str, executor: str, jobs: int) -> dict:
    """Plan the 1,024-GPU grid; its wall time, counts and winner."""
    from sim import api

    t0 = time.perf_counter()
    plan = api.plan(plan_experiment(trace), jobs=jobs, executor=executor)
    wall = time.perf_counter() - t0
    win = plan.winners["gpt-175b"]
    simulated = [r for r in plan.rows if not (r.error or "").startswith("pruned")]
    return {
        "wall_s": wall,
        "points": len(plan.rows),
        "simulated": len(simulated),
        "winner": None
        if win is None
        else {
            k: getattr(win, k)
            for k in ("schedule", "stages", "virtual_stages", "dp_width", "tensor_parallel")
            + ("microbatch_size", "memory_policy", "iteration_time_s")
        },
    }


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    n = [r["gpus"] for r in rows]
    for key, label in (("total_s", "load + resolve + simulate"), ("simulate_s", "simulate"),
                       ("load_s", "load cluster")):  # fmt: skip
        ax.loglog(n, [r[key] for r in rows], marker="o", label=f"{label} (s)")
    ax.set_xlabel("GPUs (t = 4, p = 2, w = GPUs / 8)")
    ax.set_ylabel("wall seconds")
    ax2 = ax.twinx()
    ax2.loglog(n, [r["peak_rss_MiB"] for r in rows], "k--", marker="s", label="peak RSS (MiB)")
    ax2.set_ylabel("peak RSS (MiB)")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, fontsize=8, loc="upper left")
    ax.set_title("pipesim: one configuration against cluster size")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/pipesim-bench-scale")
    ap.add_argument("--gpus", default=",".join(map(str, DEFAULT_GPUS)))
    ap.add_argument("--skip-planner", action="store_true")
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child: one GPU count
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = _trace(out, "gpt-13b-h100", SCALE_SHAPE, "dgx-h100")
    if args.one:
        print(json.dumps(one(args.one, trace)))
        return
    rows = []
    print(f"{'GPUs':>6} {'load s':>8} {'resolve s':>9} {'sim s':>8} {'total s':>8} "
          f"{'CPU s':>7} {'RSS MiB':>8} {'mirror':>6} {'events':>7} {'iter s':>8}")  # fmt: skip
    for n in (int(x) for x in args.gpus.split(",")):
        cmd = [sys.executable, __file__, "--one", str(n), "--out", str(out)]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        rows.append(r)
        print(f"{n:>6} {r['load_s']:>8.2f} {r['resolve_s']:>9.2f} {r['simulate_s']:>8.2f} "
              f"{r['total_s']:>8.2f} {r['cpu_s']:>7.2f} {r['peak_rss_MiB']:>8.0f} {r['mirrored']!s:>6} "
              f"{r['events']:>7} {r['iteration_s']:>8.4f}", flush=True)  # fmt: skip
    with (out / "scale.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, out / "scale.png")
    print(f"plot: {out / 'scale.png'}; table: {out / 'scale.csv'}")
    if not args.skip_planner:
        plan_trace = _trace(out, "gpt-175b-a100", PLAN_SHAPE, "dgx-a100-80gb")
        res = planner(plan_trace, args.executor, args.jobs)
        print(f"planner, 1,024 GPUs ({args.executor}, jobs {args.jobs}): {res['wall_s']:.1f} s, "
              f"{res['points']} configurations, {res['simulated']} simulated; "
              f"winner {res['winner']}")  # fmt: skip


if __name__ == "__main__":
    main()

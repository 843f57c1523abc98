"""Wall time and peak memory of one configuration against the cluster's GPU count, for every
schedule, expert and context parallelism, and the planner's search on 1,024 GPUs (issues 18
and 28).

Run: ``python benchmarks/speed/bench_scale.py [--out DIR] [--gpus 8,16,...] [--families a,b]
[--skip-planner] [--executor local|ray] [--jobs N]``; ``--families none`` runs the planner only.

1. **Scaling** (one process per family and GPU count, so that each peak RSS is its own), on
   ``N/8`` DGX H100 servers (``Nx-dgx-h100``), 16 micro-batches of 1 sample per iteration
   (global batch ``16 x`` the data-parallel width), each family grown by replicas only:

   * ``1f1b``: a GPT of 40 layers (h = 5120, 40 heads, s = 2048, GPT-3 13B's shape, Brown et
     al. 2020 Table 2.1), t = 4, p = 2, full recompute, Megatron-LM's runtime, at every ``N``
     of ``--gpus`` (8 to 16,384: its own log-log line);
   * the other families at 1,024 and 16,384 GPUs (``--family-gpus``): the same GPT under
     interleaved 1F1B (p = 4, v = 2, Megatron-LM), interleaved zero bubble, ZB-V and
     DualPipeV (p = 4, torch's runtime), PipeDream, PipeDream-2BW and PipeMare (p = 2);
     ``ep``: DeepSeek-V3 (61 layers, 256 routed experts, traces/deepseek-v3) under 1F1B with
     p = 4, expert parallelism 64 across 8 servers and the distributed optimizer; ``cp``:
     Llama-3-8B at 128K tokens (traces/llama3-8b-128k), t = 2 with sequence parallelism,
     context parallelism 4 (ring attention), p = 2, the distributed optimizer.

   For each it prints the seconds to load the cluster, to resolve the point and to simulate
   it, the total, the process's CPU seconds and peak RSS (``ru_maxrss``), whether it was
   mirrored (:mod:`sim.engine.symmetry`) and run periodically (:mod:`sim.engine.periodic`);
   the issue's targets: any family at 1,024 GPUs in at most 2 s and at 16,384 in at most 5 s,
   2 GB.
2. **Planner**: GPT-3 175B (96 layers, h = 12288, 96 heads, s = 2048; Brown et al. Table 2.1)
   on 128 DGX A100 80GB (1,024 GPUs), global batch 1,536 (Narayanan et al. SC'21 Table 1's
   175B row), ``sweep.gpus: 1024`` over schedule (1F1B, interleaved 1F1B) x p in {4, 8, 16} x
   t in {4, 8} x v (1 for 1F1B, 2 or 3 interleaved) x b in {1, 2} x recompute (full, selective, full with the
   distributed optimizer): 108 configurations; prints its wall time, the configurations
   simulated and pruned and the winner (target: at most 30 s on 2 cores).

Writes ``scale.png`` (log-log: seconds and peak RSS against GPUs, one line per family) and
``scale.csv`` under ``--out`` (default ``/tmp/pipesim-bench-scale``). The GPT traces are
generated analytically for the A100's and H100's kernel models into that folder. Asserts
nothing (timings are not tests; the machine it runs on may be shared: its figures are upper
bounds, and the load average is printed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_GPUS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 8192, 16384)
FAMILY_GPUS = (1024, 16384)
SCALE_SHAPE = {"layers": 40, "hidden": 5120, "heads": 40, "seq_len": 2048, "vocab": 51200}
PLAN_SHAPE = {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, "vocab": 51200}
MICROBATCHES = 16

FAMILIES: dict[str, dict] = {
    "1f1b": {"schedule": "1f1b", "stages": 2},
    "interleaved_1f1b": {"schedule": "interleaved_1f1b", "stages": 4, "virtual_stages": 2},
    "interleaved_zero_bubble": {
        "schedule": "interleaved_zero_bubble", "stages": 4, "virtual_stages": 2,
        "framework": "pipesim",
    },
    "zbv_zero_bubble": {"schedule": "zbv_zero_bubble", "stages": 4, "framework": "pipesim"},
    "dualpipe_v": {"schedule": "dualpipe_v", "stages": 4, "framework": "pipesim"},
    "pipedream": {"schedule": "pipedream", "stages": 2, "framework": "pipesim"},
    "pipedream_2bw": {"schedule": "pipedream_2bw", "stages": 2, "framework": "pipesim"},
    "pipemare": {"schedule": "pipemare", "stages": 2, "framework": "pipesim"},
    "ep": {
        "schedule": "1f1b", "stages": 4, "trace": "deepseek-v3", "tensor_parallel": 1,
        "expert_parallel": 64, "memory_policy": "dist_opt",
    },
    "cp": {
        "schedule": "1f1b", "stages": 2, "trace": "llama3-8b-128k", "tensor_parallel": 2,
        "sequence_parallel": True, "context_parallel": 4, "memory_policy": "dist_opt",
    },
}  # fmt: skip
"""Each family's sweep (module doc); unset keys: the 13B GPT, t = 4, recompute, Megatron-LM."""


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


def scale_experiment(family: str, gpus: int, gpt_trace: str) -> dict:
    """The experiment of ``family`` at ``gpus`` GPUs (module doc)."""
    f = dict(FAMILIES[family])
    per_replica = f["stages"] * f.get("tensor_parallel", 4) * f.get("context_parallel", 1)
    w = gpus // per_replica
    sweep = {
        "schedule": f.pop("schedule"),
        "stages": f.pop("stages"),
        "dp_width": w,
        "tensor_parallel": f.pop("tensor_parallel", 4),
        "microbatch_size": 1,
        "memory_policy": f.pop("memory_policy", "recompute"),
    }
    framework = f.pop("framework", "megatron-lm")
    trace = f.pop("trace", gpt_trace)
    sweep.update(f)
    return {
        "name": f"scale-{family}-{gpus}",
        "hardware": f"{gpus // 8}x-dgx-h100",
        "framework": framework,
        "models": [{"name": "m", "trace": trace, "global_batch": w * MICROBATCHES}],
        "training": {"optimizer": "adam", "dtype": "bf16" if trace != gpt_trace else "fp16"},
        "sweep": sweep,
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
            "stages": [4, 8, 16],
            "virtual_stages": [1, 2, 3],
            "tensor_parallel": [4, 8],
            "microbatch_size": [1, 2],
            "memory_policy": ["recompute", "recompute:selective", "dist_opt:recompute"],
        },
    }


def one(family: str, gpus: int, trace: str) -> dict:
    """Load, resolve and simulate ``family`` at ``gpus`` GPUs in this process."""
    from sim.config import parse_experiment
    from sim.plan.sweep import expand
    from sim.point.experiment import prepare
    from sim.point.simulate import evaluate, resolve

    t0 = time.perf_counter()
    exp = parse_experiment(scale_experiment(family, gpus, trace))
    prep = prepare(exp, "<bench>")
    t1 = time.perf_counter()
    (point,), _ = expand(prep)
    res = resolve(exp, point, prep.topology, prep.traces[point.model], shared=prep)
    t2 = time.perf_counter()
    met, log = evaluate(res)
    t3 = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "family": family,
        "gpus": gpus,
        "load_s": t1 - t0,
        "resolve_s": t2 - t1,
        "simulate_s": t3 - t2,
        "total_s": t3 - t0,
        "cpu_s": ru.ru_utime + ru.ru_stime,  # the process's, imports included
        "peak_rss_MiB": ru.ru_maxrss / 1024,
        "mirrored": res.sim_input.mirrored,
        "periodic": log.meta.get("periodic", "").startswith("periodic"),
        "events": len(log.events),
        "iteration_s": met.iteration_time_s,
        "peak_GiB": met.peak_memory_bytes / 2**30,
        "notes": [n for n in res.compute_notes if "full" in n or "mirror" in n]
        + [log.meta.get("periodic", "")],
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

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    what = (
        ("total_s", "wall seconds (load + resolve + simulate)", [(1024, 2), (16384, 5)]),
        ("cpu_s", "CPU seconds of the process (imports included)", [(1024, 2), (16384, 5)]),
        ("peak_rss_MiB", "peak RSS (MiB)", [(1024, 2048), (16384, 2048)]),
    )
    for fam in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == fam]
        style = "-" if len(mine) > 2 else "--"
        for ax, (key, _, _) in zip(axes, what, strict=True):
            ax.loglog([r["gpus"] for r in mine], [r[key] for r in mine], style, marker="o",
                      label=fam)  # fmt: skip
    for ax, (_, label, targets) in zip(axes, what, strict=True):
        ax.set_xlabel("GPUs")
        ax.set_ylabel(label)
        ax.plot(*zip(*targets, strict=True), "k:", lw=1, marker="x", label="targets")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("pipesim: one configuration against cluster size (a shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _child(family: str, n: int, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--one", f"{family}:{n}", "--out", str(out)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/pipesim-bench-scale")
    ap.add_argument("--gpus", default=",".join(map(str, DEFAULT_GPUS)))
    ap.add_argument("--family-gpus", default=",".join(map(str, FAMILY_GPUS)))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--skip-planner", action="store_true")
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child: family:gpus
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = _trace(out, "gpt-13b-h100", SCALE_SHAPE, "dgx-h100")
    if args.one:
        family, n = args.one.split(":")
        print(json.dumps(one(family, int(n), trace)))
        return
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    families = [f for f in args.families.split(",") if f in FAMILIES]
    jobs = [("1f1b", int(x)) for x in args.gpus.split(",") if "1f1b" in families]
    jobs += [(f, int(x)) for f in families if f != "1f1b" for x in args.family_gpus.split(",")]
    if jobs:
        _scaling(jobs, out)
    if not args.skip_planner:
        plan_trace = _trace(out, "gpt-175b-a100", PLAN_SHAPE, "dgx-a100-80gb")
        res = planner(plan_trace, args.executor, args.jobs)
        print(f"planner, 1,024 GPUs ({args.executor}, jobs {args.jobs}): {res['wall_s']:.1f} s, "
              f"{res['points']} configurations, {res['simulated']} simulated; "
              f"winner {res['winner']}")  # fmt: skip
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _scaling(jobs: list[tuple[str, int]], out: Path) -> None:
    """Run each ``(family, GPUs)`` in its own process; print, tabulate and plot them."""
    rows = []
    print(f"{'family':>24} {'GPUs':>6} {'load s':>7} {'resolve':>7} {'sim s':>7} {'total':>7} "
          f"{'CPU s':>6} {'RSS MiB':>7} {'mirror':>6} {'period':>6} {'events':>7} {'iter s':>8}")  # fmt: skip
    for fam, n in jobs:
        r = _child(fam, n, out)
        rows.append(r)
        print(f"{fam:>24} {n:>6} {r['load_s']:>7.2f} {r['resolve_s']:>7.2f} {r['simulate_s']:>7.2f} "
              f"{r['total_s']:>7.2f} {r['cpu_s']:>6.2f} {r['peak_rss_MiB']:>7.0f} "
              f"{r['mirrored']!s:>6} {r['periodic']!s:>6} {r['events']:>7} {r['iteration_s']:>8.4f}",
              flush=True)  # fmt: skip
    with (out / "scale.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, out / "scale.png")
    print(f"plot: {out / 'scale.png'}; table: {out / 'scale.csv'}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

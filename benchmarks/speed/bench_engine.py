"""Speed of the simulator: one p=8 m=64 configuration, hardware loading, placement, the sweep.

Run: ``python benchmarks/speed/bench_engine.py [--parts one,hardware,placement,sweep,cli]``. Prints
figures; asserts nothing (timings are not tests). Targets (issue 2): one p=8, m=64
configuration under 0.5 s; the dgx1 sweep under 60 s on a 2-core machine. Issue 7: loading a
512-GPU topology (generated: 64 nodes of 8 GPUs on an NVSwitch, a host per node, hosts on
one network switch) was 78 s with a search per GPU pair; pipesim now refuses more than 256 GPUs
(an input bound), so the benchmark loads 64, 128 and 256 GPUs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sim.config import load_experiment
from sim.hardware.loader import load_hardware
from sim.plan.rowcache import run_points
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import prepare
from sim.point.simulate import evaluate, resolve

ROOT = Path(__file__).resolve().parents[2]


def one_config(schedule: str, repeats: int = 5) -> tuple[float, float, int]:
    """Median wall and CPU seconds of resolve + simulate + metrics for GPT-2 1.5B, p=8, m=64
    (CPU seconds are steadier on a shared machine)."""
    exp_file = ROOT / "experiments" / "dgx1.yaml"
    prep = prepare(load_experiment(exp_file), str(exp_file))
    point = PointConfig(
        model="gpt2-1.5b",
        schedule=schedule,
        stages=8,
        dp_width=1,
        microbatch_size=1,
        microbatches=64,
        memory_policy="none",
        global_batch=64,
    )
    times, cpu, actions = [], [], 0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        res = resolve(prep.exp, point, prep.topology, prep.traces["gpt2-1.5b"])
        _, log = evaluate(res)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        actions = sum(len(rank) for rank in res.sim_input.program)
    return statistics.median(times), statistics.median(cpu), actions


def cluster_spec(nodes: int, gpus_per_node: int = 8) -> dict:
    """A generated hardware mapping: ``nodes`` NVSwitch boxes whose hosts share a network switch.

    Bandwidths are round assumptions (only the loading time is measured here).
    """
    n = nodes * gpus_per_node
    links = []
    for k in range(nodes):
        for i in range(k * gpus_per_node, (k + 1) * gpus_per_node):
            links.append(
                {
                    "a": f"gpu{i}",
                    "b": f"nvs{k}",
                    "bandwidth": "250 GB/s",
                    "latency": "5 us",
                    "kind": "nvswitch",
                }
            )
            links.append(
                {
                    "a": f"gpu{i}",
                    "b": f"cpu{k}",
                    "bandwidth": "25 GB/s",
                    "latency": "5 us",
                    "kind": "pcie",
                }
            )
        links.append(
            {
                "a": f"cpu{k}",
                "b": "net",
                "bandwidth": "25 GB/s",
                "latency": "5 us",
                "kind": "network",
            }
        )
    return {
        "name": f"cluster-{n}",
        "gpu": {
            "model": "generated",
            "memory": "80 GiB",
            "peak_flops": "312 TFLOPS",
            "hbm_bandwidth": "2039 GB/s",
        },
        "num_gpus": n,
        "hosts": [{"name": f"cpu{k}", "dram": "1 TB"} for k in range(nodes)],
        "gpu_hosts": [f"cpu{i // gpus_per_node}" for i in range(n)],
        "switches": [f"nvs{k}" for k in range(nodes)] + ["net"],
        "links": links,
    }


def hardware_load(nodes: int) -> float:
    """Wall seconds of :func:`load_hardware` (validation, topology, reachability check)."""
    spec = cluster_spec(nodes)
    t0 = time.perf_counter()
    load_hardware(spec)
    return time.perf_counter() - t0


def placement_time(stages: int, dp_width: int, repeats: int = 3) -> float:
    """Median wall seconds of :func:`sim.parallel.placement.place` on a fresh DGX-1 topology, its
    caches cleared."""
    from sim.parallel import placement

    place = placement.place
    times = []
    for _ in range(repeats):
        for fn in vars(placement).values():
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()
        topo = load_hardware("dgx1-v100-16gb")
        t0 = time.perf_counter()
        place(topo, stages, dp_width)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="one,hardware,placement,sweep,cli")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parts = ap.parse_args().parts.split(",")
    if "one" in parts:
        for sched in ("1f1b", "gpipe", "pipedream_2bw", "pipedream"):
            wall, cpu, actions = one_config(sched)
            print(
                f"one config gpt2-1.5b p=8 m=64 {sched:14s}: {wall:.3f} s wall, {cpu:.3f} s "
                f"CPU, {actions} actions ({actions / cpu:,.0f} actions per CPU second)"
            )
    if "hardware" in parts:
        for nodes in (8, 16, 32):
            print(
                f"load_hardware, generated {nodes * 8}-GPU topology: {hardware_load(nodes):.2f} s"
            )
    if "placement" in parts:
        for p, w in ((8, 1), (4, 2), (2, 4), (1, 8)):
            print(f"place on dgx1-v100-16gb p={p} w={w}: {placement_time(p, w):.4f} s")
    if "sweep" in parts:
        wall, n = sweep(ap.parse_args().jobs)
        print(
            f"dgx1.yaml sweep (no cache, {ap.parse_args().jobs} jobs): {n} configurations "
            f"in {wall:.1f} s"
        )
    if "cli" in parts:
        t0 = time.perf_counter()
        os.system(
            f"cd {ROOT} && sim run experiments/dgx1.yaml --no-cache --out "
            f"{tempfile.mkdtemp()} > /dev/null"
        )
        print(
            f"`sim run experiments/dgx1.yaml --no-cache` end to end: "
            f"{time.perf_counter() - t0:.1f} s"
        )


if __name__ == "__main__":
    main()

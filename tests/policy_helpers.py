"""Shared by the memory-policy tests: a tiny GPT trace, one simulated point under a policy,
a category's peak in an event log, and a DGX-1 whose GPUs count tensors only."""

from __future__ import annotations

import re
from dataclasses import replace

from sim.config import parse_experiment
from sim.hardware.capacity import NO_RESERVE
from sim.hardware.loader import load_hardware
from sim.hardware.topology import Topology
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.trace.generator import transformer_trace
from sim.trace.schema import Trace

GiB = 2.0**30
POLICIES = [
    "none",
    "recompute",
    "recompute:selective",
    "recompute:full:2",
    "cpu_swap",
    "d2d_swap",
    "zero_offload",
    "chunked",
    "auto",
]


def tiny_gpt(layers: int = 4, b: int = 2, h: int = 64, a: int = 4, s: int = 128) -> Trace:
    return transformer_trace(
        "gpt",
        name="tiny",
        layers=layers,
        hidden=h,
        heads=a,
        seq_len=s,
        vocab=100,
        microbatch_size=b,
        gpu_model="x",
        peak_flops=1e12,
    )


def run(
    trace: Trace,
    topo: Topology,
    policy: str,
    *,
    schedule: str = "1f1b",
    p: int = 2,
    w: int = 1,
    m: int = 4,
    optimizer_step: bool = True,
    **options,
):
    """Resolve and simulate one point; returns (resolved, metrics, log)."""
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "x",
            "models": [{"name": trace.name, "trace": "x"}],
            "training": {
                "global_batch": m * w * trace.microbatch_size,
                "optimizer_step": optimizer_step,
            },
            "options": options,
        }
    )
    point = PointConfig(
        model=trace.name,
        schedule=schedule,
        stages=p,
        dp_width=w,
        microbatch_size=trace.microbatch_size,
        microbatches=m,
        memory_policy=policy,
        global_batch=m * w * trace.microbatch_size,
    )
    res = resolve(exp, point, topo, trace)
    met, log = evaluate(res)
    return res, met, log


def category_peak(log, device: str, category: str) -> float:
    live = peak = 0.0
    for ev in sorted(log.memory, key=lambda e: e.time_s):
        if ev.device == device and ev.category == category:
            live += ev.delta_bytes
            peak = max(peak, live)
    return peak


def dgx1(capacity_gib: float = 32.0) -> Topology:
    """DGX-1 with GPUs of ``capacity_gib`` that count tensors only (no runtime reserve: these
    tests are about the policies; tests/test_memory_model.py covers the reserve)."""
    topo = load_hardware("dgx1-v100-32gb")
    return replace(
        topo,
        gpus=tuple(
            replace(g, memory_bytes=capacity_gib * GiB, reserve=NO_RESERVE) for g in topo.gpus
        ),
        _route_cache={},
    )


def stage_gpus(key: str, placement) -> set[str]:
    """GPUs of a policy-notes key: ``s3`` (stage 3 of every replica) or ``r1s3``."""
    m = re.fullmatch(r"(?:r(\d+))?s(\d+)", key)
    assert m, key
    replicas = range(len(placement)) if m.group(1) is None else [int(m.group(1))]
    return {f"gpu{placement[r][int(m.group(2))]}" for r in replicas}


def d2d_trace(b: int) -> Trace:
    """The 16-layer h=1536 GPT of the d2d and auto tests at micro-batch ``b``."""
    return transformer_trace(
        "gpt",
        name="g",
        layers=16,
        hidden=1536,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=b,
        gpu_model="x",
        peak_flops=62.5e12,
    )

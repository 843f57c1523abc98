"""Small hand-built inputs for engine tests: uniform stages on a chain of GPUs."""

from __future__ import annotations

import pytest

from sim.engine import SimInput
from sim.engine.stage_cost import StageCost
from sim.hardware.parts import GPU, Host, Link
from sim.hardware.topology import Topology
from sim.memory.plan import StagePlan
from sim.schedules.registry import get_schedule

GiB = 2.0**30


def chain_topology(
    n: int,
    bandwidth_Bps: float = 10e9,
    latency_s: float = 0.0,
    memory_bytes: float = 16 * GiB,
    shared: bool = False,
    hbm_Bps: float = 1e12,
) -> Topology:
    """``n`` GPUs; each pair joined directly (or, with ``shared``, all through one switch)."""
    gpus = tuple(GPU(f"gpu{i}", "test", memory_bytes, 100e12, hbm_Bps, "cpu0") for i in range(n))
    links = []
    if shared:
        for i in range(n):
            links.append(Link(f"gpu{i}->sw0", f"gpu{i}", "sw0", bandwidth_Bps, latency_s))
            links.append(Link(f"sw0->gpu{i}", "sw0", f"gpu{i}", bandwidth_Bps, latency_s))
        links.append(Link("sw0->cpu0", "sw0", "cpu0", bandwidth_Bps, latency_s))
        links.append(Link("cpu0->sw0", "cpu0", "sw0", bandwidth_Bps, latency_s))
        switches = ("sw0",)
    else:
        for i in range(n):
            for j in range(n):
                if i != j:
                    links.append(
                        Link(f"gpu{i}->gpu{j}", f"gpu{i}", f"gpu{j}", bandwidth_Bps, latency_s)
                    )
            links.append(Link(f"gpu{i}->cpu0", f"gpu{i}", "cpu0", bandwidth_Bps, latency_s))
            links.append(Link(f"cpu0->gpu{i}", "cpu0", f"gpu{i}", bandwidth_Bps, latency_s))
        switches = ()
    return Topology("test", gpus, (Host("cpu0", 512 * GiB),), tuple(links), switches)


def uniform_input(
    schedule: str,
    p: int,
    m: int,
    *,
    fwd_s: float = 1.0,
    bwd_s: float = 2.0,
    out_bytes: float = 0.0,
    act_bytes: float = 0.0,
    weight_bytes: float = 0.0,
    w: int = 1,
    iterations: int = 1,
    optimizer_s: float = 0.0,
    topology: Topology | None = None,
    plan: StagePlan | None = None,
    virtual_stages: int | None = None,
) -> SimInput:
    """A p-rank pipeline of identical stages (w replicas), free communication by default.

    With ``v`` stage chunks per rank (``virtual_stages``; the schedule's minimum by default)
    there are ``p * v`` chunks, each with ``fwd_s / v`` and ``bwd_s / v`` (split evenly into
    I and W), as schedules.md §3 costs them; ``act_bytes`` and ``weight_bytes`` are per chunk.
    """
    sched = get_schedule(schedule)(p, m, virtual_stages)
    n = sched.num_stages
    v = sched.virtual_stages
    topo = topology or chain_topology(p * w)
    costs = tuple(
        StageCost(fwd_s / v, bwd_s / v, out_bytes, 0.0 if s == 0 else out_bytes) for s in range(n)
    )
    plan = plan or StagePlan(
        act_bytes=act_bytes,
        resident_act_bytes=act_bytes,
        weight_bytes=weight_bytes * 1,
        optimizer_s=optimizer_s,
    )
    plans = tuple(tuple(plan for _ in range(n)) for _ in range(w))
    placement = tuple(tuple(r * p + sched.stage_rank(s) for s in range(n)) for r in range(w))
    return SimInput(topo, costs, sched.program(iterations), m, placement, plans)


def small_gpt_csv(folder) -> str:
    """A 16-layer GPT (h = 2048, 16 heads, s = 1024) traced for the A100's kernel model,
    written under ``folder``; its path."""
    from sim.trace.generator import preset_gpu, transformer_trace
    from sim.trace.native import write_trace

    path = folder / "gpt-small.csv"
    trace = transformer_trace(
        "gpt", name="gpt-small", layers=16, hidden=2048, heads=16, seq_len=1024, vocab=51200,
        microbatch_size=1, gpu=preset_gpu("dgx-a100-80gb"),
    )  # fmt: skip
    write_trace(trace, path)
    return str(path)


def cluster_1f1b(
    trace: str,
    servers: int,
    t: int,
    p: int,
    w: int,
    global_batch: int,
    simulation: str,
    *,
    name: str = "cluster",
    framework: str = "pipesim",
    memory_policy: str = "recompute",
    options: dict | None = None,
    **sweep,
) -> dict:
    """An experiment running ``trace`` as 1F1B on ``servers`` DGX A100 80 GB servers with
    tensor parallelism ``t``, ``p`` stages, ``w`` replicas and micro-batches of 1 (Adam, fp16),
    simulated in ``options.simulation`` mode ``simulation``; ``sweep`` adds sweep keys."""
    return {
        "name": name,
        "hardware": f"{servers}x-dgx-a100-80gb",
        "framework": framework,
        "models": [{"name": "g", "trace": trace, "global_batch": global_batch}],
        "training": {"optimizer": "adam", "dtype": "fp16"},
        "options": {"simulation": simulation, **(options or {})},
        "sweep": {
            "schedule": "1f1b",
            "stages": p,
            "dp_width": w,
            "tensor_parallel": t,
            "microbatch_size": 1,
            "memory_policy": memory_policy,
            **sweep,
        },
    }


def assert_times_reported(r) -> None:
    """A replay row measured a positive iteration time, predicted one, and its ``error`` is
    ``(predicted - measured) / measured`` (sim.validate.table)."""
    where = (r.schedule, r.runtime) if hasattr(r, "runtime") else r.schedule
    assert r.measured_iteration_s > 0 and r.predicted_iteration_s > 0, where
    want = (r.predicted_iteration_s - r.measured_iteration_s) / r.measured_iteration_s
    assert r.error == pytest.approx(want, rel=1e-6), where


REPLAY_TARGETS = {
    "ours": "backends.torch.replay.runtime:run_rank",  # what launch.replay starts per backend
    "torch": "backends.torch.replay.torch_schedules:run_rank",
}
"""The rank function :func:`backends.torch.replay.launch.replay` starts for each runtime."""


def run_jobs_in_turn(payload: dict, ctx: object) -> list:
    """Rank function (``run_ranks("tests.helpers:run_jobs_in_turn", {"jobs": [[target, job],
    ...]}, ...)``): each job's ``target(job, ctx)`` in turn on this rank, so several replays of
    one shape share one launch of their rank processes (each process starts Python and imports
    torch: about 2 CPU seconds); returns the targets' results in order."""
    import importlib

    out = []
    for target, job in payload["jobs"]:
        module, name = target.split(":")
        out.append(getattr(importlib.import_module(module), name)(job, ctx))
    return out


def replay_in_turn(jobs: list) -> list:
    """:func:`backends.torch.replay.launch.replay` of each of ``jobs`` (ReplayJobs of one shape:
    the same ranks, device and threads; no single-rank or tensor-parallel job), run one after
    another in one launch of their rank processes (:func:`run_jobs_in_turn`)."""
    from backends.torch.replay.job import collect_result
    from backends.torch.replay.launch import run_ranks

    first = jobs[0]
    payload = {"jobs": [[REPLAY_TARGETS[j.backend], j.to_dict()] for j in jobs]}
    ranks = run_ranks(
        "tests.helpers:run_jobs_in_turn",
        payload,
        nproc=first.nproc or first.stages,
        device=first.device,
        timeout_s=sum(j.timeout_s for j in jobs),
        pg_timeout_s=first.pg_timeout_s,
        threads=first.threads,
    )
    return [collect_result(j, [rank[i] for rank in ranks]) for i, j in enumerate(jobs)]


def small_gpt2_1f1b(global_batch: int) -> dict:
    """GPT-2 1.5B on a DGX-1 (V100 16 GB): 1F1B over 8 stages, micro-batch 1, no memory
    policy: the small experiment the provenance tests plan and print."""
    return {
        "name": "small",
        "hardware": "dgx1-v100-16gb",
        "models": [
            {
                "name": "gpt",
                "trace": "gpt2-1.5b",
                "global_batch": global_batch,
                "microbatch_size": 1,
            }
        ],
        "sweep": {"schedule": "1f1b", "stages": 8, "dp_width": 1, "memory_policy": "none"},
    }

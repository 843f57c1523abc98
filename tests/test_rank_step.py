"""One optimizer step per rank: a rank that holds several stage chunks (interleaved and V-shaped
schedules) reduces the gradients of all its chunks, all-reduces the tied embedding, meets the
step barrier once, then updates every chunk (Megatron-LM ``finalize_model_grads`` then
``optimizer.step()``). Exact small timelines, and a sweep of every framework profile over the
schedules it runs asserting that no combination deadlocks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import chain_topology, uniform_input

from sim.config import parse_experiment
from sim.engine import simulate
from sim.engine.inputs import PipelineRuntime
from sim.framework import framework_names, get_framework
from sim.hardware.loader import load_hardware
from sim.memory.auto import dp_layout
from sim.memory.plan import StagePlan
from sim.memory.registry import POLICIES
from sim.parallel.layout import ParallelLayout
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.schedules.action import STEP, Action
from sim.schedules.base import ScheduleError
from sim.schedules.registry import get_schedule, schedule_names
from sim.trace.generator import preset_gpu, transformer_trace

GB = 1e9


def _megatron_input(tied_bytes: float, expert_share: float = 0.0, **runtime):
    """Interleaved 1F1B, p = 2, v = 2 (chunks 0, 2 on rank 0; 1, 3 on rank 1), m = 4, w = 2
    replicas on 4 GPUs joined pairwise at 1 GB/s; F = 1, B = 2 per rank (0.5 and 1 per
    chunk), free sends; each chunk has 0.5 GB of gradients, reduced after the backward
    (no buckets), and a 1 s optimizer step."""
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=0.5 * GB, optimizer_s=1.0)
    inp = uniform_input(
        "interleaved_1f1b",
        2,
        4,
        w=2,
        virtual_stages=2,
        plan=plan,
        topology=chain_topology(4, bandwidth_Bps=1 * GB),
    )
    rt = PipelineRuntime(
        blocking_p2p=True,
        sync_after_p2p=True,
        tied_grad_bytes=tied_bytes,
        tied_after_dp=True,
        step_barrier="before_update",
        **runtime,
    )
    costs = tuple(replace(c, expert_grad_share=expert_share) for c in inp.costs)
    ep = 2 if expert_share else 1
    return replace(inp, costs=costs, dp_bucket_bytes=0.0, runtime=rt, layout=ParallelLayout(ep=ep))


def _span(e) -> tuple:
    return (e.device, e.name, round(e.start_s, 9), round(e.end_s, 9))


@pytest.mark.parametrize("expert_share", [0.0, 0.5], ids=["dense", "expert-parallel"])
def test_interleaved_megatron_step_with_tied_embedding_and_data_parallelism(expert_share):
    # Both ranks' last backwards end at (m + (p - 1)/v)(F + B) = 4.5 x 3 = 13.5 s on rank 0
    # (12.5 on rank 1). Megatron's finalize_model_grads on each rank: the data-parallel
    # all-reduce of each chunk (ring of 2 at 1 GB/s: 0.5 GB -> 0.5 s; with EP = 2 of w = 2
    # the routed experts' half is reduced over a group of one replica: 0.25 s), then the
    # embedding all-reduce between rank 0 and rank 1 (1 GB: 1 s), then the found-inf /
    # grad-norm barrier, then one optimizer step over both chunks (2 x 1 s):
    # 13.5 + 2 x dp + 1 + 2 = 17.5 s (17.0 with EP). Without the tied all-reduce: 1 s less.
    dp_s = 0.5 * (1.0 - expert_share)
    log = simulate(_megatron_input(1 * GB, expert_share))
    assert log.iteration_ends_s == [pytest.approx(13.5 + 2 * dp_s + 1.0 + 2.0)]
    t0 = 13.5 + 2 * dp_s  # rank 0 has reduced both chunks; rank 1 did 1 s earlier
    tied = sorted(_span(e) for e in log.events if e.name.startswith("tied"))
    assert tied == [
        ("gpu0", "tied allreduce s0", t0, t0 + 1),
        ("gpu1", "tied allreduce s3", t0 - 1, t0 + 1),
        ("gpu2", "tied allreduce s0", t0, t0 + 1),
        ("gpu3", "tied allreduce s3", t0 - 1, t0 + 1),
    ]
    steps = sorted(_span(e) for e in log.events if e.kind == "optimizer")
    assert steps[:4] == [
        ("gpu0", "0STEP0", t0 + 1, t0 + 2),
        ("gpu0", "2STEP0", t0 + 2, t0 + 3),
        ("gpu1", "1STEP0", t0 + 1, t0 + 2),
        ("gpu1", "3STEP0", t0 + 2, t0 + 3),
    ]
    untied = simulate(_megatron_input(0.0, expert_share))
    assert untied.iteration_ends_s == [pytest.approx(13.5 + 2 * dp_s + 2.0)]


def test_after_update_barrier_once_per_rank():
    # the same run with the barrier after the update (a loss broadcast): every rank reduces
    # both chunks, all-reduces the embedding (gpu0 and gpu1 meet once gpu0 has reduced, at
    # 13.5 + 2 x 0.5 = 14.5: [14.5, 15.5]), updates both chunks [15.5, 17.5], then waits for
    # the others once (both ranks are there at 17.5).
    rt = PipelineRuntime(tied_grad_bytes=1 * GB, tied_after_dp=True, step_barrier="after_update")
    log = simulate(replace(_megatron_input(1 * GB), runtime=rt))
    assert log.iteration_ends_s == [pytest.approx(17.5)]


def test_a_deadlock_names_the_gpus_that_did_not_finish():
    # rank 0 runs 0B0 before 0F1, rank 1 needs 1F1's input before its 1B0: neither step runs
    acts = [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)]
    program = (
        (*acts, Action(0, STEP, 0)),
        tuple(Action(1, op, mb) for op, mb in (("F", 0), ("F", 1), ("B", 0), ("B", 1), (STEP, 0))),
    )
    inp = replace(uniform_input("1f1b", 2, 2), program=program)
    with pytest.raises(ValueError, match=r"0 of 2 optimizer steps ran \(unfinished: gpu0, gpu1\)"):
        simulate(inp)


# -- the sweep: nothing deadlocks ----------------------------------------------------------
def _tiny_gpt():
    return transformer_trace(
        "gpt",
        name="tiny",
        layers=4,
        hidden=64,
        heads=4,
        seq_len=32,
        vocab=512,
        microbatch_size=1,
        gpu=preset_gpu(),
    )


TRACE = _tiny_gpt()
DGX1 = load_hardware("dgx1-v100-16gb")


def _combinations():
    for fw in framework_names():
        for name in schedule_names():
            cls = get_schedule(name)
            if get_framework(fw).schedule_reason(cls):
                continue
            for v in (1, 2):
                if v < cls.min_virtual_stages or (
                    cls.max_virtual_stages is not None and v > cls.max_virtual_stages
                ):
                    continue
                for w in (1, 2):
                    for t in (1, 2):
                        yield pytest.param(fw, name, v, w, t, id=f"{fw}-{name}-v{v}-w{w}-t{t}")


def _run_point(framework, schedule, v, w, t, policy="none"):
    """p = 2 ranks (p * v stages of the 4 blocks, embedding and head), m = 4, two iterations
    of the tiny GPT on a DGX-1: every rank of every replica and tensor rank must run every
    optimizer step of its program (simulate raises on a deadlock, naming the GPUs that did
    not) and each iteration ends after the one before it."""
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "t", "trace": "t"}],
            "training": {"global_batch": 4 * w, "iterations": 2},
            "options": {"partition": "uniform"},
            "framework": framework,
        }
    )
    point = PointConfig(
        model="t",
        schedule=schedule,
        stages=2,
        virtual_stages=v,
        dp_width=w,
        tensor_parallel=t,
        microbatch_size=1,
        microbatches=4,
        memory_policy=policy,
        global_batch=4 * w,
        framework=framework,
    )
    try:
        res = resolve(exp, point, DGX1, TRACE)
    except ScheduleError:  # a combination the schedule refuses is not a deadlock
        pytest.skip("schedule refuses it")
    _, log = evaluate(res)
    inp = res.sim_input
    steps = sum(a.op == STEP for rank in inp.program for a in rank)
    ran = [e for e in log.events if e.kind == "optimizer"]
    assert len(ran) == steps * w * t
    ends = log.iteration_ends_s
    assert len(ends) == res.iterations and ends == sorted(ends) and ends[0] > 0
    return res


@pytest.mark.parametrize("framework, schedule, v, w, t", list(_combinations()))
def test_every_framework_schedule_and_width_finishes(framework, schedule, v, w, t):
    _run_point(framework, schedule, v, w, t)


NEEDS_ARGS = {"act_offload": "act_offload:0.5"}
"""Policies whose name alone is not a policy: an instance with its parameter."""


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved_1f1b"])
@pytest.mark.parametrize("policy", [NEEDS_ARGS.get(n, n) for n in POLICIES.names()])
def test_every_memory_policy_finishes_with_data_parallelism(policy, schedule):
    # w = 2: the replicas of a stage meet in the same gradient collectives. auto once chose
    # per replica (replica 0 kept its states on the GPU, all-reduced at the step; replica 1
    # took PatrickStar chunks, gathered and reduce-scattered around every action): nobody
    # finished. Every stage's replicas now share one layout.
    res = _run_point("pipesim", schedule, get_schedule(schedule).min_virtual_stages, 2, 1, policy)
    for stage in zip(*res.sim_input.plans, strict=True):
        assert len({dp_layout(plan) for plan in stage}) == 1

"""FSDP2 as torchtitan runs it (issue 26 item 3; sim.memory.fsdp, sim.engine.fsdp): one test
per mechanism, each a hand-computed small case.

The cases: two transformer blocks of 1e9 bytes each (fp16 trace: 5e8 parameters each), F = 1 s
and B = 2 s per block, on GPUs joined by 1 GB/s links with no latency, torchtitan's FSDP
(bf16 all-gathers, fp32 reduce-scatters, fp32 shards). A ring of ``n`` moves ``(n-1)/n`` of a
collective's bytes over each link: an all-gather of one block over 2 ranks is 0.5 s, its
reduce-scatter (fp32: 2e9 bytes) 1 s. The GPUs' memory is infinitely fast (FSDP2's copies on the
compute stream take no time) except where a test gives a rate.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from helpers import chain_topology

from sim.config import parse_experiment
from sim.errors import InputError
from sim.events import EventKind
from sim.framework import get_framework
from sim.memory.fsdp import FsdpSpec
from sim.memory.fsdp_units import FsdpPlan, FsdpUnit
from sim.memory.registry import parse_policy
from sim.parallel.layout import ParallelLayout
from sim.plan.parallel_axes import sharding_invalid
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import prepare
from sim.point.simulate import evaluate, resolve
from sim.schedules.registry import get_schedule
from sim.trace.schema import LayerProfile, Trace

GB = 1e9


def _trace(n: int = 2) -> Trace:
    layers = tuple(LayerProfile(f"block.{i}", 1.0, 2.0, 1 * GB, 0.0, 0.0) for i in range(n))
    return Trace("t", layers, 1, "fp16", "test")


def _run(p: int, w: int, shard: int, m: int, options: dict | None = None, n: int = 2, hbm=math.inf):
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "t", "trace": "t"}],
            "training": {"global_batch": m * w, "optimizer_step": False},
            "options": {"partition": "uniform", **(options or {})},
            "framework": "torchtitan",
        }
    )
    point = PointConfig(
        model="t",
        schedule="gpipe",
        stages=p,
        dp_width=w,
        dp_shard=shard,
        microbatch_size=1,
        microbatches=m,
        memory_policy="none",
        global_batch=m * w,
        framework="torchtitan",
    )
    topo = chain_topology(p * w, bandwidth_Bps=1 * GB, memory_bytes=1e12, hbm_Bps=hbm)
    res = resolve(exp, point, topo, _trace(n))
    return res, *evaluate(res)


def _spans(log, kind, gpu="gpu0", iteration=0):
    return [
        (e.name.split()[-1], round(e.start_s, 9), round(e.end_s, 9), e.nbytes)
        for e in log.events
        if e.kind == kind and e.device == gpu and e.iteration == iteration
    ]


def test_sharded_states_are_sixteen_bytes_per_parameter_over_the_shard():
    # 1e9 parameters on the stage, shard 2: fp32 parameter 4 B, fp32 gradient 4 B, Adam's two
    # moments 8 B, each over 2 ranks: 2e9 + 2e9 + 4e9 bytes (torchtitan training.dtype fp32).
    res, _, _ = _run(p=1, w=2, shard=2, m=1)
    plan = res.sim_input.plans[0][0]
    assert (plan.weight_bytes, plan.grad_bytes, plan.optimizer_bytes) == pytest.approx(
        (2 * GB, 2 * GB, 4 * GB)
    )
    assert plan.fsdp.units == (
        FsdpUnit((0,), 5e8, 0.0, True),
        FsdpUnit((1,), 5e8, 0.0, True),
    )


def test_one_unit_ahead_all_gathers_and_reduce_scatters_timeline():
    # p = 1, two ranks sharding, m = 1. Forward: AG u0 [0, 0.5] exposed, F u0 [0.5, 1.5]
    # with AG u1 prefetched [0.5, 1.0]; F u1 [1.5, 2.5]. Backward (u1 first): u1 was
    # resharded, AG u1 [2.5, 3.0] exposed, B u1 [3.0, 5.0] with AG u0 prefetched [3.0, 3.5];
    # RS u1 [5.0, 6.0] under B u0 [5.0, 7.0]; RS u0 [7.0, 8.0]; the step waits: 8.0.
    _, met, log = _run(p=1, w=2, shard=2, m=1)
    assert _spans(log, EventKind.ALL_GATHER) == [
        ("0F0u0", 0.0, 0.5, 1 * GB),
        ("0F0u1", 0.5, 1.0, 1 * GB),
        ("0B0u1", 2.5, 3.0, 1 * GB),
        ("0B0u0", 3.0, 3.5, 1 * GB),
    ]
    assert _spans(log, EventKind.REDUCE_SCATTER) == [
        ("0B0u1", 5.0, 6.0, 2 * GB),
        ("0B0u0", 7.0, 8.0, 2 * GB),
    ]
    assert met.iteration_time_s == pytest.approx(8.0)


def test_copy_out_and_copy_in_take_the_compute_stream():
    # The case above at 1e12 B/s of memory: copy-out 2 x 1e9 B = 2 ms, copy-in 5e8 x (2 + 4) B
    # = 3 ms (FsdpPlan.copy_Bps). Forward: AG u0 [0, 0.5], copy-out [0.5, 0.502], F u0 [0.502,
    # 1.502] with AG u1 [0.502, 1.002]; copy-out [1.502, 1.504], F u1 [1.504, 2.504]. Backward:
    # AG u1 [2.504, 3.004], copy-out to 3.006, B u1 [3.006, 5.006] with AG u0 [3.006, 3.506];
    # copy-in [5.006, 5.009], RS u1 [5.009, 6.009]; copy-out u0 to 5.011, B u0 [5.011, 7.011];
    # copy-in to 7.014, RS u0 [7.014, 8.014]; the step waits: 8.014.
    _, met, log = _run(p=1, w=2, shard=2, m=1, hbm=1e12)
    assert [x[:3] for x in _spans(log, EventKind.REDUCE_SCATTER)] == [
        ("0B0u1", 5.009, 6.009),
        ("0B0u0", 7.014, 8.014),
    ]
    copies = [
        (e.name.split()[-1], round(e.start_s, 9), round(e.end_s, 9))
        for e in log.events
        if e.kind == EventKind.COMPUTE
        and e.device == "gpu0"
        and "fsdp copy" in e.name
        and e.iteration == 0
    ]
    assert copies == [
        ("0F0u0", 0.5, 0.502), ("0F0u1", 1.502, 1.504), ("0B0u1", 3.004, 3.006),
        ("0B0u1", 5.006, 5.009), ("0B0u0", 5.009, 5.011), ("0B0u0", 7.011, 7.014),
    ]  # fmt: skip
    assert met.iteration_time_s == pytest.approx(8.014)


def test_unsharded_block_bytes_and_their_lifetime():
    # Unit 0's unsharded parameters (5e8 x 2 B = 1e9 B) live from its copy-out to the end of
    # its forward [0.5, 1.5] and again in backward [3.5, 7.0] (resharded after it); its
    # all-gather output (1e9 B) from the all-gather's start to the next unit's copy-out:
    # [0, 1.5] in forward; in backward each all-gather output is freed at its copy-out (unit
    # 1's [2.5, 3.0]). Its reduce-scatter input (fp32, 2e9 B) [7.0, 8.0]: the last of the pass
    # is dropped when its reduce-scatter ends; unit 1's, [5.0, 7.0], is kept until unit 0's
    # post-backward though its reduce-scatter ends at 6.0 (torch's reduce_scatter_states).
    _, _, log = _run(p=1, w=2, shard=2, m=1)
    mem = [e for e in log.memory if e.device == "gpu0" and "fsdp" in e.label and e.time_s < 8.5]

    def life(prefix_on: str, prefix_off: str, category: str):
        on = [e for e in mem if e.label == prefix_on and e.category == category]
        off = [e for e in mem if e.label == prefix_off and e.category == category]
        return (on[0].time_s, off[0].time_s, on[0].delta_bytes)

    assert life("fsdp unshard 0F0u0", "fsdp reshard 0F0u0", "weights") == (0.5, 1.5, 1 * GB)
    assert life("fsdp unshard 0B0u0", "fsdp reshard 0B0u0", "weights") == (5.0, 7.0, 1 * GB)
    assert life("fsdp ag 0F0u0", "fsdp ag free 0F0u1", "buffers") == (0.0, 1.5, 1 * GB)
    assert life("fsdp ag 0B0u1", "fsdp ag free 0B0u1", "buffers") == (2.5, 3.0, 1 * GB)
    assert life("fsdp rs 0B0u0", "fsdp rs done 0B0u0", "gradients") == (7.0, 8.0, 2 * GB)
    assert life("fsdp rs 0B0u1", "fsdp rs drop 0B0u0", "gradients") == (5.0, 7.0, 2 * GB)


def test_counts_and_sizes_per_step_without_and_with_pipeline_parallelism():
    # Without PP, m = 2: every micro-batch gathers each unit twice (F, B) and reduce-scatters
    # it once: 8 all-gathers of 1e9 B and 4 reduce-scatters of 2e9 B per step. With PP (p = 2,
    # one block per stage, torch pipelining): a unit is gathered once, at the stage's first
    # forward of the step, its gradients accumulate unsharded (fp32) and are reduce-scattered
    # once, at the step: 1 and 1 per step.
    _, _, flat = _run(p=1, w=2, shard=2, m=2)
    ag, rs = _spans(flat, EventKind.ALL_GATHER), _spans(flat, EventKind.REDUCE_SCATTER)
    assert (len(ag), {x[3] for x in ag}, len(rs), {x[3] for x in rs}) == (8, {GB}, 4, {2 * GB})
    res, _, piped = _run(p=2, w=2, shard=2, m=2)
    assert res.sim_input.plans[0][0].fsdp.accumulate
    for gpu in ("gpu0", "gpu1"):  # replica 0's two stages
        ag = _spans(piped, EventKind.ALL_GATHER, gpu)
        rs = _spans(piped, EventKind.REDUCE_SCATTER, gpu)
        assert [(x[0][-2:], x[3]) for x in ag] == [("u0", GB)]
        assert [(x[0][:4], x[3]) for x in rs] == [("STEP", 2 * GB)]


def test_accumulated_gradients_and_parameters_stay_unsharded_for_the_step():
    # With PP the stage's unit stays unsharded (1e9 B of bf16 parameters) from its first
    # forward until the step's reduce-scatter, and its fp32 gradients (2e9 B) from its first
    # backward: both freed when the reduce-scatter at the step ends.
    _, _, log = _run(p=2, w=2, shard=2, m=2)
    mem = [e for e in log.memory if e.device == "gpu0" and e.label.startswith("fsdp")]
    it0 = [e for e in mem if e.time_s < min(x.time_s for x in mem if "STEP1" in x.label)]
    adds = {e.label: e.delta_bytes for e in it0 if e.delta_bytes > 0}
    assert adds["fsdp unshard 0F0u0"] == 1 * GB and adds["fsdp acc u0"] == 2 * GB
    frees = [e for e in it0 if e.delta_bytes < 0 and "STEP0" in e.label]
    assert sorted(-e.delta_bytes for e in frees) == [1 * GB, 2 * GB]


def test_hsdp_all_reduces_the_reduce_scatter_output_over_the_replicas():
    # w = 4, dp_shard 2: two shard groups {0, 1} and {2, 3}, replicated; each unit's
    # reduce-scatter (2e9 B over 2 ranks) is followed by an all-reduce of its output (1e9 B)
    # over the replicate group {0, 2}: per step 2 reduce-scatters and 2 all-reduces; the
    # states are sharded over 2 (not 4).
    res, _, log = _run(p=1, w=4, shard=2, m=1)
    ar = _spans(log, EventKind.ALLREDUCE)
    assert [(x[0], x[3]) for x in ar] == [("0B0u1", GB), ("0B0u0", GB)]
    assert res.sim_input.plans[0][0].weight_bytes == pytest.approx(2 * GB)
    assert res.sim_input.layout == ParallelLayout(dp_replicate=2, dp_shard=2)


def test_replicas_alone_all_reduce_each_unit_in_fp32():
    # torchtitan@b5bcd76 runs fully_shard at dp_shard 1 too: HSDP over a shard group of one
    # (option data_parallel fully_shard). w = 2, two blocks of 5e8 parameters: no all-gather
    # nor reduce-scatter; after each unit's backward its gradients in reduce_dtype fp32
    # (5e8 x 4 B = 2e9 B) are all-reduced over the 2 replicas, u1 then u0 (not DDP's 100 MiB
    # buckets); the states stay whole, 16 B per parameter: 4e9 + 4e9 + 8e9 B. One replica
    # alone is not modelled as FSDP (no collective).
    res, _, log = _run(p=1, w=2, shard=1, m=1)
    plan = res.sim_input.plans[0][0]
    assert (plan.fsdp.shard, plan.fsdp.reduce_bytes) == (1, 4)
    assert (plan.weight_bytes, plan.grad_bytes, plan.optimizer_bytes) == pytest.approx(
        (4 * GB, 4 * GB, 8 * GB)
    )
    assert _spans(log, EventKind.ALL_GATHER) == _spans(log, EventKind.REDUCE_SCATTER) == []
    ar = _spans(log, EventKind.ALLREDUCE)
    assert [(x[0], x[3]) for x in ar] == [("0B0u1", 2 * GB), ("0B0u0", 2 * GB)]
    assert _run(p=1, w=1, shard=1, m=1)[0].sim_input.plans[0][0].fsdp is None


def test_reshard_after_forward_false_and_to_a_smaller_world():
    # reshard_after_forward False: the backward gathers nothing (2 AGs per micro-batch);
    # 2: each unit keeps half its parameters (5e8 B) from forward to backward and gathers over
    # 2 ranks of the 4 for backward: 0.5 s instead of 0.75 s (3/4 x 1e9 B at 1 GB/s).
    _, _, kept = _run(p=1, w=2, shard=2, m=1, options={"fsdp_reshard_after_forward": False})
    assert [x[0] for x in _spans(kept, EventKind.ALL_GATHER)] == ["0F0u0", "0F0u1"]
    _, _, half = _run(p=1, w=4, shard=4, m=1, options={"fsdp_reshard_after_forward": 2})
    ag = {x[0]: x[2] - x[1] for x in _spans(half, EventKind.ALL_GATHER)}
    assert ag["0F0u0"] == pytest.approx(0.75) and ag["0B0u0"] == pytest.approx(0.5)
    held = [e for e in half.memory if e.label == "fsdp reshard 0F0u0" and e.device == "gpu0"]
    assert held[0].delta_bytes == pytest.approx(-0.5 * GB)


def test_units_and_plan_helpers():
    # The held bytes by policy and when a unit is gathered.
    plan = FsdpPlan((FsdpUnit((0,), 10.0, 2.0, 4),), param_bytes=2, reduce_bytes=4, shard=8)
    unit = plan.units[0]
    assert plan.unsharded_bytes(unit) == 24 and plan.held_bytes(unit) == 6
    assert plan.grad_bytes(unit) == 48
    assert plan.gathers(FsdpUnit((0,), 1.0, reshard=False), "B", False) is False
    acc = FsdpPlan(plan.units, 2, 4, 8, accumulate=True)
    assert acc.gathers(unit, "F", True) and not acc.gathers(unit, "F", False)
    assert FsdpSpec().param_bytes is None


def test_copy_out_casts_the_whole_fp32_parameter_at_a_shard_of_one():
    # torch 2.13 FSDP2, param_dtype bf16 (2 B), fp32 shards (4 B). A shard world > 1: the
    # copy-out reads and writes each unsharded element in bf16, 2 + 2 = 4 B (the cast of the
    # shard runs on the all-gather copy-in stream). A world of 1 (no all-gather): the fp32
    # parameter cast to bf16 (read 4, write 2) then copied (read 2, write 2) on the current
    # stream: 10 B. Unit: 10 dense parameters over `shard`, 2 expert ones over 4 ranks.
    unit = FsdpUnit((0,), 10.0, 2.0)
    one = FsdpPlan((unit,), param_bytes=2, reduce_bytes=4, shard=1, expert_shard=4, shard_bytes=4)
    assert one.copy_out_bytes(unit) == 10 * 10 + 2 * 4
    assert replace(one, shard=2).copy_out_bytes(unit) == 12 * 4
    assert replace(one, shard_bytes=2).copy_out_bytes(unit) == 12 * 4  # no cast
    # torchtitan's replicas alone (dp_shard 1): the plan's shards are fp32; block 5e8 params.
    plan = _run(p=1, w=2, shard=1, m=1)[0].sim_input.plans[0][0].fsdp
    assert plan.copy_out_bytes(plan.units[0]) == 5e8 * 10


def test_refusals():
    # dp_shard must divide dp_width; ZeRO-style policies and DeepSpeed do not run with FSDP.
    lay = ParallelLayout(dp_shard=4)
    one = get_schedule("1f1b")
    assert "dist_opt" in sharding_invalid(
        lay, parse_policy("dist_opt"), get_framework("torchtitan"), one
    )
    assert "no FSDP" in sharding_invalid(lay, parse_policy("none"), get_framework("deepspeed"), one)
    assert sharding_invalid(lay, parse_policy("recompute"), get_framework("torchtitan"), one) == ""
    with pytest.raises(InputError, match="dp_shard 3 must divide dp_width 4"):
        exp = parse_experiment(
            {
                "name": "x",
                "hardware": "dgx-h100",
                "models": [{"name": "m", "trace": "llama3.1-8b", "global_batch": 8}],
                "framework": "torchtitan",
                "sweep": {"stages": 1, "dp_width": 4, "dp_shard": 3},
            }
        )
        expand(prepare(exp, "x.yaml"))

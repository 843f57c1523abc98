"""The optimizer step's transient in the memory model (sim.memory.step_moment): DeepSpeed's
FP16_Optimizer.step flattens fp32 copies of the fp16 gradients (microsoft/DeepSpeed@f5dde36
deepspeed/runtime/fp16/fused_optimizer.py: per-parameter copies and the flat buffer at once,
4 + 4 B per 2-byte gradient = 4 B per gradient byte). ``sim memory`` (rank_memory), the planner's
bounds, the allocator replay and the engine's ledger count it alike. Hand-computed cases."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import chain_topology

from sim.config import parse_experiment
from sim.framework import get_framework
from sim.framework.step_work import shard_optimizer
from sim.hardware.capacity import MIB
from sim.hardware.loader import load_hardware
from sim.memory.context import StageContext
from sim.memory.dist_opt import DistOptPolicy
from sim.memory.flat_reduce import param_shares
from sim.memory.plan import StagePlan
from sim.memory.rank_memory import REDUCE_MOMENT, STEP_MOMENT, rank_memory
from sim.memory.states import StateBytes
from sim.memory.step_moment import step_transient_bytes
from sim.memory.tensor_program import tensor_program
from sim.plan.bounds import BoundModel, resolved_memory_excess
from sim.plan.point_row import point_row
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.memory import point_memory
from sim.point.simulate import resolve
from sim.trace.schema import LayerProfile, Trace

DGX = load_hardware("dgx-a100-40gb")
GiB = 2.0**30


def test_step_transient_per_gradient_byte_is_one_rule_for_memory_and_engine():
    """FP16_Optimizer: 4 B per gradient byte; DeepSpeed bf16 (BF16_Optimizer keeps its fp32
    gradients as a state): 0; Megatron-LM fp16 (main_grad.float(), 4 B per 2-byte gradient):
    2; Megatron-LM bf16 (fp32 main_grad, no copy): 0. The runtime the engine gets says the
    same as the layout the memory model gets."""
    cases = {("deepspeed", "fp16"): 4.0, ("deepspeed", "bf16"): 0.0,
             ("megatron-lm", "fp16"): 2.0, ("megatron-lm", "bf16"): 0.0}  # fmt: skip
    trace = Trace("t", (LayerProfile("l", 1.0, 2.0, 8.0, 1.0, 1.0),), 1, "fp16", "test")
    for (name, dtype), per_byte in cases.items():
        fw = get_framework(name)
        memory = fw.memory(dtype, "A100")
        rt = fw.runtime(DGX, replace(trace, dtype=dtype), memory=memory)
        assert (memory.step_transient, rt.step_transient) == (per_byte, per_byte), name


def _pair(act_bytes: float, optimizer_s: float = 1.0) -> tuple[StageContext, StagePlan]:
    """DeepSpeed fp16, w = 2: three layers of 8e8 B fp16 parameters (G = 2.4e9 B of
    gradients), ``act_bytes`` of stash per layer, one micro-batch."""
    fp16 = get_framework("deepspeed").memory("fp16", "A100")
    layers = tuple(LayerProfile(f"l{i}", 1.0, 2.0, 8e8, act_bytes, 0.0) for i in range(3))
    ctx = StageContext(
        0, 1, 0, 2, "gpu0", "cpu0", layers, 1, 1, StateBytes(2, 2, 12), 2, 40e9, DGX,
        order=("F", "B"), framework=fp16,
    )  # fmt: skip
    plan = StagePlan(
        act_bytes=3 * act_bytes, resident_act_bytes=3 * act_bytes, weight_bytes=2.4e9,
        grad_bytes=2.4e9, optimizer_bytes=14.4e9, optimizer_s=optimizer_s,
    )  # fmt: skip
    return ctx, plan


def test_rank_peak_is_model_states_plus_four_g_at_the_step():
    """States 2.4 + 2.4 + 14.4 = 19.2e9 B; small stashes: the peak is the step, 4 x 2.4e9 =
    9.6e9 B of working memory (more than the 1.6e9 B reduce bucket): 28.8e9 B allocated.
    Stashes of 3 x 5e9 B outweigh it (the activation moment); no GPU step (optimizer_s 0):
    the reduction's bucket is the later moment again."""
    small = rank_memory([_pair(act_bytes=1e6)])
    assert small.peak_at == STEP_MOMENT
    assert small.by_category["working"] == pytest.approx(9.6e9)
    assert small.by_category["activations"] == 0.0
    assert small.allocated_bytes == pytest.approx(28.8e9)
    assert small.floor_bytes >= 28.8e9 * (1 - 1e-12)  # the ledger surely holds it
    assert rank_memory([_pair(act_bytes=5e9)]).peak_at not in (STEP_MOMENT, REDUCE_MOMENT)
    assert rank_memory([_pair(act_bytes=1e6, optimizer_s=0.0)]).peak_at == REDUCE_MOMENT


def test_allocator_replay_holds_the_transient_around_the_first_step():
    """The replay allocates the 9.6e9 B transient, one piece per parameter tensor in the
    tensors' shares (each gradient copied on its own), then Adam's moments (first step), then
    frees every piece."""
    ctx, plan = _pair(act_bytes=1e6)
    ctx = replace(ctx, rank_order=((0, "F", 0), (0, "B", 0), (0, "STEP", 0)))
    ops = tensor_program([(ctx, plan)])
    allocs = [k for k, op in enumerate(ops) if op[0] == "alloc" and op[1][0] == "step"]
    frees = [k for k, op in enumerate(ops) if op[0] == "free" and op[1][0] == "step"]
    assert sum(ops[k][2] for k in allocs) == pytest.approx(9.6e9)
    assert len(allocs) == len(frees) == len(param_shares(ctx)) > 1
    adam = [k for k, op in enumerate(ops) if op[1][0] == "adam"]
    assert max(allocs) < min(adam) and max(adam) < min(frees)


def _point(fw: str, dtype: str, topo, act_mib: float = 1.0):
    """Two layers of 100 MiB parameters (G = 200 MiB of 16-bit gradients), ``act_mib`` of
    stash each, 1F1B, p = 1, w = 1, m = 2, framework ``fw``."""
    layer = LayerProfile("l", 1e-3, 2e-3, 100 * MIB, act_mib * MIB, 1 * MIB)
    trace = Trace("two", (layer, replace(layer, name="l2")), 1, dtype, "test")
    exp = parse_experiment({
        "name": "t", "hardware": "x", "models": [{"name": "two", "trace": "x"}],
        "training": {"global_batch": 2, "dtype": dtype}, "framework": fw,
    })  # fmt: skip
    point = PointConfig(
        model="two", schedule="1f1b", stages=1, dp_width=1, microbatch_size=1,
        microbatches=2, memory_policy="none", global_batch=2, framework=fw,
    )  # fmt: skip
    return Prepared(exp, "x.yaml", topo, {"two": trace}), point


def test_sim_memory_and_the_engine_agree_on_deepspeed_fp16_step_peak():
    """DeepSpeed fp16, no runtime reserve (test GPU): 200 + 200 + 1200 MiB of states
    (2 + 2 + 12 B per parameter) + 4 x 200 MiB = 2400 MiB at the step, in ``sim memory`` and
    the ledger; on a DGX A100 (reserve, workspaces, allocator replay) they agree too; the
    planner's bound is 2400 MiB, and the resolved bound prunes it under 2400 MiB."""
    prep, point = _point("deepspeed", "fp16", chain_topology(1, memory_bytes=64 * GiB))
    rank = point_memory(prep, point).ranks[0]
    row, _ = point_row(prep, point)
    assert rank.peak_at == STEP_MOMENT
    assert rank.allocated_bytes == pytest.approx(2400 * MIB)
    assert row.peak_allocated_bytes == pytest.approx(2400 * MIB)
    assert BoundModel(prep).memory_bytes(point) == pytest.approx(2400 * MIB)
    small = replace(prep, topology=chain_topology(1, memory_bytes=2300 * MIB))
    res = resolve(small.exp, point, small.topology, small.traces["two"])
    assert resolved_memory_excess(res) == ("gpu0", pytest.approx(2400 * MIB), 2300 * MIB)
    prep, point = _point("deepspeed", "fp16", DGX)
    rank = point_memory(prep, point).ranks[0]
    row, _ = point_row(prep, point)
    assert rank.peak_at == STEP_MOMENT
    assert rank.allocated_bytes == pytest.approx(row.peak_allocated_bytes)
    assert rank.device_bytes == pytest.approx(row.peak_memory_bytes)


def test_megatron_lm_bf16_has_no_step_moment():
    """Megatron-LM bf16 (fp32 main_grad: the step copies nothing): no transient, the peak
    stays at the activation moment, 200 + 400 + 1200 MiB of states (2 + 4 + 12 B per
    parameter) + 2 x 1 MiB of stash + 1 MiB of working memory; the planner's bound below
    it."""
    prep, point = _point("megatron-lm", "bf16", chain_topology(1, memory_bytes=64 * GiB))
    rank = point_memory(prep, point).ranks[0]
    assert rank.peak_at not in (STEP_MOMENT, REDUCE_MOMENT)
    assert rank.allocated_bytes == pytest.approx(1803 * MIB)
    assert BoundModel(prep).memory_bytes(point) <= 1803 * MIB


def _sharded_point(fw: str, w: int, policy: str):
    """fp16, two layers of 5e8 B parameters (G = 1e9 B of 16-bit gradients, 5e8 parameters),
    1 MB of stash each, 1F1B, p = 1, ``w`` replicas, m = 2, no runtime reserve (test GPUs)."""
    layer = LayerProfile("l", 1e-3, 2e-3, 5e8, 1e6, 1e6)
    trace = Trace("two", (layer, replace(layer, name="l2")), 1, "fp16", "test")
    exp = parse_experiment({
        "name": "t", "hardware": "x", "models": [{"name": "two", "trace": "x"}],
        "training": {"global_batch": 2 * w, "dtype": "fp16"}, "framework": fw,
    })  # fmt: skip
    point = PointConfig(
        model="two", schedule="1f1b", stages=1, dp_width=w, microbatch_size=1,
        microbatches=2, memory_policy=policy, global_batch=2 * w, framework=fw,
    )  # fmt: skip
    return Prepared(exp, "x.yaml", chain_topology(w, memory_bytes=64 * GiB), {"two": trace}), point


def test_distributed_optimizer_copies_only_its_shard_of_the_gradients():
    """Megatron's DistributedOptimizer copies ``shard_model_grad.float()``, the rank's 1/w of
    each gradient (NVIDIA/Megatron-LM@d98e8a64 distrib_optimizer.py l.2783, l.2792); the
    unsharded Float16Optimizer every gradient (optimizer.py l.1097). 1e9 B of fp16 gradients
    (2 B per gradient byte): w = 4, dist_opt: 2 x 1e9 / 4 = 5e8 B at the step, over 1e9 + 1e9 +
    6e9 / 4 B of states = 4.0e9; w = 1: 2e9 over 1e9 + 1e9 + 6e9 = 10e9; DeepSpeed fp16
    (FP16_Optimizer, 4 per byte): 4e9, 12e9. ``sim memory`` and the engine's ledger alike."""
    cases = [("megatron-lm", 4, "dist_opt", 5e8, 4e9), ("megatron-lm", 1, "none", 2e9, 10e9),
             ("deepspeed", 1, "none", 4e9, 12e9)]  # fmt: skip
    for fw, w, policy, transient, peak in cases:
        prep, point = _sharded_point(fw, w, policy)
        rank = point_memory(prep, point).ranks[0]
        row, _ = point_row(prep, point)
        assert rank.peak_at == STEP_MOMENT, (fw, w)
        assert rank.by_category["working"] == pytest.approx(transient), (fw, w)
        assert rank.allocated_bytes == pytest.approx(peak), (fw, w)
        assert row.peak_allocated_bytes == pytest.approx(peak), (fw, w)
        assert BoundModel(prep).memory_bytes(point) <= peak * (1 + 1e-12), (fw, w)


def test_distributed_optimizer_shards_expert_gradients_over_their_own_group():
    """Half the stage's parameters routed experts, w = 4, ep = 2 (their 2 replicas): the shard
    is 0.5 / 4 + 0.5 / 2 = 0.375 of the 1e9 gradient bytes, 2 x 3.75e8 = 7.5e8 B at the step
    (Megatron fp16 16-bit main_grad). A framework that shards its own plans
    (``shard_optimizer``, no expert split): 2 x 1e9 / 4 = 5e8 B."""
    fp16 = get_framework("megatron-lm").memory("fp16", "A100")
    layers = (LayerProfile("l", 1.0, 2.0, 1e9, 1e6, 0.0),)
    ctx = StageContext(
        0, 1, 0, 4, "gpu0", "cpu0", layers, 1, 1, StateBytes(2, 2, 12), 2, 40e9, DGX,
        expert_share=0.5, expert_parallel=2, framework=fp16,
    )  # fmt: skip
    plan = DistOptPolicy().plan(ctx)
    assert plan.grad_bytes == pytest.approx(1e9)
    assert step_transient_bytes(fp16.step_transient, plan) == pytest.approx(7.5e8)
    own = shard_optimizer(replace(plan, step_grad_share=1.0), 4)
    assert step_transient_bytes(fp16.step_transient, own) == pytest.approx(5e8)

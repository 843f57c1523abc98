"""DeepSpeed's data-parallel gradient all-reduce as its pipeline engine runs it with fp16
(sim.memory.flat_reduce; microsoft/DeepSpeed@f5dde36 deepspeed/runtime/engine.py l.2215-2256):
one flat bucket at a time, closed after the tensor that crosses 5e8 elements, freed after its
copy back; no copy of the whole gradient. One hand-computed case per mechanism."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import chain_topology, uniform_input

from sim.engine import simulate
from sim.framework import get_framework
from sim.hardware.loader import load_hardware
from sim.memory.context import StageContext
from sim.memory.flat_reduce import flat_buckets, reduce_bucket_bytes
from sim.memory.plan import StagePlan
from sim.memory.rank_memory import REDUCE_MOMENT, framework_buffer_bytes, rank_memory
from sim.memory.states import StateBytes
from sim.memory.tensor_program import tensor_program
from sim.trace.schema import LayerProfile

DGX = load_hardware("dgx-a100-40gb")
FP16 = get_framework("deepspeed").memory("fp16", "A100")
TENSOR = 8e8  # bytes of one fp16 parameter tensor (4e8 elements)


def _pair(act_bytes: float, w: int) -> tuple[StageContext, StagePlan]:
    """A stage of three one-tensor layers of 4e8 fp16 parameters each (2.4e9 bytes of
    gradients), ``act_bytes`` of stash per layer, one micro-batch, at width ``w``."""
    layers = tuple(LayerProfile(f"l{i}", 1.0, 2.0, TENSOR, act_bytes, 0.0) for i in range(3))
    ctx = StageContext(
        0, 1, 0, w, "gpu0", "cpu0", layers, 1, 1, StateBytes(2, 2, 12), 2, 40e9, DGX,
        order=("F", "B"), framework=FP16,
    )  # fmt: skip
    plan = StagePlan(
        act_bytes=3 * act_bytes, resident_act_bytes=3 * act_bytes, weight_bytes=2.4e9,
        grad_bytes=2.4e9, optimizer_bytes=14.4e9,
    )  # fmt: skip
    return ctx, plan


def test_buckets_close_after_the_tensor_that_crosses_the_limit():
    """allreduce_no_retain (l.2245-2256) reduces a bucket once numel > 5e8: three gradients of
    4e8 give 4e8 (kept), 8e8 (reduced), then 4e8 at the end; 5e8 exactly is not over it."""
    assert flat_buckets([4e8, 4e8, 4e8], 5e8) == (8e8, 4e8)
    assert flat_buckets([5e8, 1.0], 5e8) == (5e8 + 1.0,)
    assert flat_buckets([6e8, 1e8], 5e8) == (6e8, 1e8)
    assert flat_buckets([], 5e8) == ()


def test_fp16_reduction_holds_one_bucket_and_no_whole_gradient_copy():
    """DeepSpeed fp16, w = 2: 5e8 elements x 2 B = 1e9 B a bucket; the rank's 2.4e9 B of
    gradients in three 8e8 B tensors flatten as 1.6e9 then 8e8, so 1.6e9 B at most, where
    DDP's copy (the same layout without flat buckets) adds all 2.4e9 B as a buffer."""
    assert FP16.reduce_bucket_bytes == 1e9
    pair = _pair(act_bytes=1e6, w=2)
    assert reduce_bucket_bytes([pair]) == pytest.approx(1.6e9)
    ddp = (replace(pair[0], framework=replace(FP16, reduce_bucket_bytes=0.0)), pair[1])
    assert reduce_bucket_bytes([ddp]) == 0.0
    assert framework_buffer_bytes([ddp]) - framework_buffer_bytes([pair]) == pytest.approx(2.4e9)


def test_rank_peak_is_the_reduction_where_its_bucket_exceeds_the_activations():
    """After the last backward nothing is in flight: with 3 x 1e6 B of stash the 1.6e9 B
    bucket is the peak's working memory (no activations); with 3 x 1e9 B of stash the
    activation moment stays the peak and the bucket adds nothing. At w = 1 too (the engine
    flattens and all-reduces over a one-rank group: pipe/engine.py l.67, l.241-251)."""
    for w in (1, 2):
        small = rank_memory([_pair(act_bytes=1e6, w=w)])
        assert small.peak_at == REDUCE_MOMENT
        assert small.by_category["working"] == pytest.approx(1.6e9)
        assert small.by_category["activations"] == 0.0 and small.by_category["buffers"] == 0.0
    large = rank_memory([_pair(act_bytes=1e9, w=2)])
    assert large.peak_at != REDUCE_MOMENT and large.by_category["activations"] >= 3e9


def test_allocator_replay_allocates_and_frees_the_bucket_at_each_step():
    """The replay (sim.memory.tensor_program) allocates the 1.6e9 B bucket before the step and
    frees it right after (allreduce_and_copy drops it, l.2240-2243)."""
    ctx, plan = _pair(act_bytes=1e6, w=2)
    ctx = replace(ctx, rank_order=((0, "F", 0), (0, "B", 0), (0, "STEP", 0)))
    ops = tensor_program([(ctx, plan)])
    i = ops.index(("alloc", "reduce", pytest.approx(1.6e9)))
    assert ops[i + 1] == ("free", "reduce", 0.0)


def test_engine_holds_the_bucket_while_it_reduces():
    """A plan with no other bytes and a 5e8 B bucket: the ledger's peak is the bucket, at
    w = 1 (no all-reduce, the flatten still runs) and at w = 2 (over a 1 GB/s chain); 0
    without it."""
    topo = chain_topology(2, bandwidth_Bps=1e9)
    for w in (1, 2):
        plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=1e9,
                         optimizer_bytes=1.0, optimizer_s=1.0, reduce_bucket_bytes=5e8)  # fmt: skip
        log = simulate(replace(uniform_input("gpipe", 1, 1, w=w, topology=topo, plan=plan),
                               dp_bucket_bytes=0.0))  # fmt: skip
        assert log.meta["peak_bytes"]["gpu0"] == pytest.approx(5e8 + 1e9 + 1.0)

"""Megatron-Core's MoE layer as the host issues it (sim/compute/mcore_ops.py): the counted
table, a decoder trace's MoE block, and expert parallelism taking the remote experts' loop off."""

from __future__ import annotations

import pytest

from sim.compute.decoder import DecoderShape
from sim.compute.mcore_ops import MOE_BLOCK, MOE_PER_EXPERT, expert_ops, moe_layer_ops
from sim.compute.megatron_ops import block_calls, block_ops
from sim.compute.moe_shape import MoEShape
from sim.hardware.host_ops import HostOverhead
from sim.hardware.loader import load_hardware
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.layout import ParallelLayout
from sim.trace.decoder import decoder_trace

COUNTED = {2: (127, 125, 24, 14), 4: (145, 154, 30, 22), 8: (181, 210, 42, 38)}
"""scripts/count_mcore_ops.py's one-layer counts (megatron-core 0.15.0, CPU): forward ops,
backward ops, module calls, Python Function nodes."""

CPU_DROPOUT = 3 * 3  # three dropouts, 4 ops each on the CPU, 1 (native_dropout) on CUDA


@pytest.mark.parametrize("experts", [2, 4, 8])
def test_counts_reproduce_the_counted_layers(experts):
    fwd, bwd, mods, fns = moe_layer_ops("moe_block", experts)
    cf, cb, cm, cn = COUNTED[experts]
    # the 2-expert counts are off the 4 -> 8 line by one op each way
    assert abs(fwd + CPU_DROPOUT - cf) <= 1 and abs(bwd - cb) <= 1
    assert (mods, fns) == (cm, cn)


def test_moe_block_by_hand():
    # 8 local experts: forward 100 + 8 x 9, backward 98 + 8 x 14, modules 18 + 8 x 3,
    # Function applies 6 + 8 x 4
    assert MOE_BLOCK == (100.0, 98.0, 18.0, 6.0) and MOE_PER_EXPERT == (9.0, 14.0, 3.0, 4.0)
    assert moe_layer_ops("moe_block", 8) == (172.0, 210.0, 42.0, 38.0)
    # a hybrid's MoE-only layer: the block less half a dense block (63/2, 88/2, 11/2, 8/2)
    (f, b), (m, n) = block_ops(), block_calls()
    assert (f, b, m, n) == (63, 88, 11, 8)
    assert moe_layer_ops("moe", 8) == (172 - 31.5, 210 - 44.0, 42 - 5.5, 38 - 4.0)
    # and what a rank of EP 2 with 8 experts does not issue: 4 experts' loop
    assert expert_ops(4) == (36.0, 56.0, 12.0, 16.0)


def _mix2(sequential: bool):
    gpu = load_hardware("dgx-h100").gpus[0].compute
    moe = MoEShape(4096, 8, 2, 14336, sequential_experts=sequential)
    m = DecoderShape(2, 4096, 32, 1024, 32000, 14336, kv_heads=8, moe=moe)
    return decoder_trace(m, name="mix2", microbatch_size=1, gpu=gpu), gpu


def test_decoder_trace_moe_block_and_expert_parallel_shard():
    trace, gpu = _mix2(sequential=True)
    blk = trace.layers[1]
    assert (blk.fwd_ops, blk.bwd_ops, blk.fwd_modules, blk.fwd_functions) == (172, 210, 42, 38)
    assert trace.layers[0].fwd_ops == 12  # the embedding keeps its counted ops
    shard = shard_decoder(trace, ParallelLayout(dp_replicate=4, ep=4), gpu)
    b4 = shard.trace.layers[1]
    # EP 4: 2 local experts, 6 remote: 172 - 54, 210 - 84, 42 - 18, 38 - 24 (the dispatcher's
    # token-count all-gather adds its op as a group exchange, not here)
    assert (b4.fwd_ops, b4.bwd_ops, b4.fwd_modules, b4.fwd_functions) == (118, 126, 24, 14)
    # the host's forward seconds of that block at 10 us per op and 2 / 8 us per call
    host = HostOverhead(op_s=10e-6, module_s=2e-6, function_s=8e-6)
    secs = host.forward_s(b4.fwd_ops) + host.calls_s(b4.fwd_modules, b4.fwd_functions)
    assert secs == pytest.approx(118 * 10e-6 + 24 * 2e-6 + 14 * 8e-6)


def test_grouped_experts_issue_one_experts_ops_on_any_ep():
    # --moe-grouped-gemm: the fixed part and one expert's: 100 + 9, 98 + 14, 18 + 3, 6 + 4
    trace, gpu = _mix2(sequential=False)
    blk = trace.layers[1]
    assert (blk.fwd_ops, blk.bwd_ops, blk.fwd_modules, blk.fwd_functions) == (109, 112, 21, 10)
    b4 = shard_decoder(trace, ParallelLayout(dp_replicate=4, ep=4), gpu).trace.layers[1]
    # plus TE GroupedLinear's per-expert host work for the rank's 2 local experts, in BF16
    # (sim/compute/te_grouped_host.py): fc1 and fc2 each 2 x 10 us forward (a GEMM's launch and
    # TE's cuBLASLt set-up, sim/compute/cublaslt_host.py), 2 x 29 us + 1 x (13.9 + 7.5) us
    # backward, as 9.8 us forward and 13.9 us backward ops
    fwd, bwd = 2 * 2 * 10.0 / 9.8, 2 * (2 * 29.0 + 21.4) / 13.9
    assert (b4.fwd_ops, b4.bwd_ops) == pytest.approx((109 + fwd, 112 + bwd))


def test_functional_test_flags_choose_the_experts_loop():
    from sim.runs.megatron_reading import Reading
    from sim.runs.megatron_shape import shape_features

    def features(flags):
        return shape_features(Reading(flags, strict=False))

    assert "moe_experts=sequential" in features({"num-experts": 8})
    assert "moe_experts=sequential" not in features({"num-experts": 8, "moe-grouped-gemm": True})
    assert "moe_experts=sequential" not in features({})  # a dense model
    # Megatron-Bridge's providers group the experts unless the recipe says otherwise
    bridge = shape_features(Reading({"num-experts": 8}, strict=False), grouped=True)
    assert "moe_experts=sequential" not in bridge

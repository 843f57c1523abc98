"""Transformer Engine GroupedLinear's per-expert host work (sim/compute/te_grouped_host.py):
a hand count of 4 local experts under MXFP8, and where a MoE layer's shard charges it."""

from __future__ import annotations

import pytest

from sim.compute.decoder import DecoderShape
from sim.compute.moe_shape import MoEShape
from sim.compute.te_grouped_host import grouped_expert_ops, grouped_linear_s
from sim.hardware.loader import load_hardware
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.layout import ParallelLayout
from sim.trace.decoder import decoder_trace


def test_four_experts_mxfp8_by_hand():
    # TE @70f5366 grouped_linear.py, per expert. Forward: split_quantize's object,
    # get_weight_workspace, 2 update_usage, 2 prepare_for_saving = 6 Python calls of 2 us;
    # one MXFP8 quantize kernel and one cuBLASLt GEMM = 2 launches of 3 us: 18 us.
    # Backward: 2 restore_from_saved, split_quantize's object, update_usage, clear_tensor_data,
    # handle_custom_ddp_from_mcore = 6 calls (12 us); its torch.empty (5 us); quantize, dgrad,
    # wgrad = 3 launches (9 us): 26 us; and for 3 of the 4 experts an AccumulateGrad node
    # (13.9 us) and Megatron's DDP hook (7.5 us).
    fwd, bwd = grouped_linear_s(4, "mxfp8")
    assert fwd == pytest.approx(4 * 18e-6)
    assert bwd == pytest.approx(4 * 26e-6 + 3 * 21.4e-6)
    # fc1 and fc2, handed on as the reference host's 9.8 us forward / 13.9 us backward ops
    ops = grouped_expert_ops(4, "mxfp8")
    assert ops == pytest.approx((2 * 72 / 9.8, 2 * 168.2 / 13.9))
    # current scaling adds two kernels (amax, scale) per quantize; delayed scaling none
    assert grouped_linear_s(4, "fp8-tensorwise")[0] == pytest.approx(4 * 24e-6)
    assert grouped_linear_s(4, "fp8-delayed")[0] == pytest.approx(4 * 15e-6)


@pytest.mark.parametrize("fused", [False, True])
def test_shard_charges_grouped_experts_unless_fused(fused):
    gpu = load_hardware("dgx-h100").gpus[0].compute
    moe = MoEShape(4096, 8, 2, 14336, fused_grouped_mlp=fused)
    m = DecoderShape(2, 4096, 32, 1024, 32000, 14336, kv_heads=8, moe=moe)
    trace = decoder_trace(m, name="mix2", microbatch_size=1, gpu=gpu)
    one, two = (
        shard_decoder(trace, ParallelLayout(dp_replicate=8 // ep, ep=ep), gpu).trace.layers[1]
        for ep in (8, 4)
    )
    if fused:
        assert (one.fwd_ops, two.fwd_ops) == (109, 109)
        return
    # 1 and 2 local experts in BF16: the second expert adds 2 x 3 us forward per layer
    assert two.fwd_ops - one.fwd_ops == pytest.approx(2 * 3.0 / 9.8)

"""Transformer Engine GroupedLinear's per-expert host work (sim/compute/te_grouped_host.py):
a hand count of 4 local experts under MXFP8, and where a MoE layer's shard charges it."""

from __future__ import annotations

from dataclasses import replace

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
    # wgrad = 3 launches (9 us): 26 us; each GEMM's cuBLASLt set-up in TE (10 us per call,
    # NVIDIA/raft#1736, less the 3 us launch: 7 us; 1 forward, 2 backward); and for 3 of the
    # 4 experts an AccumulateGrad node (13.9 us) and Megatron's DDP hook (7.5 us).
    fwd, bwd = grouped_linear_s(4, "mxfp8")
    assert fwd == pytest.approx(4 * (18e-6 + 7e-6))
    assert bwd == pytest.approx(4 * (26e-6 + 14e-6) + 3 * 21.4e-6)
    # fc1 and fc2, handed on as the reference host's 9.8 us forward / 13.9 us backward ops
    ops = grouped_expert_ops(4, "mxfp8")
    assert ops == pytest.approx((2 * 100 / 9.8, 2 * 224.2 / 13.9))
    # current scaling adds two kernels (amax, scale) per quantize; delayed scaling none
    assert grouped_linear_s(4, "fp8-tensorwise")[0] == pytest.approx(4 * 31e-6)
    assert grouped_linear_s(4, "fp8-delayed")[0] == pytest.approx(4 * 22e-6)


def test_grace_prices_the_per_expert_python_and_launches_apart():
    # gb200-nvl72's host: Python calls at its module figure, launches at its launch figure,
    # the dummy torch.empty at nograd_op less a launch, AccumulateGrad at backward_op, the DDP
    # hook at function_backward; 4 experts under MXFP8 (counts as in the hand count above).
    topo = load_hardware("gb200-nvl72")
    h = topo.host(topo.gpu(0).host).overhead
    py, ln, empty = h.module_s, h.kernel_launch_s, h.nograd_op_s - h.kernel_launch_s
    # TE's cuBLASLt set-up per GEMM, C++: 7 us at the host's C++ work per op (op less launch)
    setup = 7e-6 * (h.op_s - ln) / (9.8e-6 - 3.0e-6)
    fwd, bwd = grouped_linear_s(4, "mxfp8", h)
    assert fwd == pytest.approx(4 * (6 * py + 2 * ln + setup))
    assert bwd == pytest.approx(
        4 * (6 * py + empty + 3 * ln + 2 * setup) + 3 * (h.backward_op_s + h.function_backward_s)
    )
    # handed on as that host's own ops, the engine's op prices give the seconds back
    f_ops, b_ops = grouped_expert_ops(4, "mxfp8", host=h)
    assert (f_ops * h.op_s, b_ops * h.backward_op_s) == pytest.approx((2 * fwd, 2 * bwd))
    # the x86 reference host prices every kind as before
    x86 = load_hardware("dgx-h100")
    assert grouped_expert_ops(4, "mxfp8", host=x86.host(x86.gpu(0).host).overhead) == (
        pytest.approx(grouped_expert_ops(4, "mxfp8"))
    )


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
    # 1 and 2 local experts in BF16: the second expert adds 2 x (3 + 7) us forward per layer
    # (a GEMM's launch and TE's cuBLASLt set-up, in fc1 and fc2)
    assert two.fwd_ops - one.fwd_ops == pytest.approx(2 * 10.0 / 9.8)


def test_attn_graph_keeps_the_grouped_experts_host_work():
    # 2 local experts in BF16 (ep 4 of 8): per GroupedLinear 2 x 10 us forward (GEMM launch
    # 3 us + TE's cuBLASLt set-up 7 us) and 2 x 29 us + 1 x (13.9 + 7.5) us backward; fc1 and
    # fc2 as 9.8 us / 13.9 us ops. A per-layer graph of
    # scope attn captures the attention half of the MoE block's other ops but none of the
    # experts' (Megatron-LM@d98e8a64 transformer_layer.py 1235-1261); moe captures both halves.
    from sim.engine.stage_cost import StageCost
    from sim.framework.cuda_graphs import captured

    gpu = load_hardware("dgx-h100").gpus[0].compute
    moe = MoEShape(4096, 8, 2, 14336)
    m = DecoderShape(2, 4096, 32, 1024, 32000, 14336, kv_heads=8, moe=moe)
    trace = decoder_trace(m, name="mix2", microbatch_size=1, gpu=gpu)
    shard = shard_decoder(trace, ParallelLayout(dp_replicate=2, ep=4), gpu)
    gf, gb = 2 * 20.0 / 9.8, 2 * (58.0 + 21.4) / 13.9
    kinds = ["embedding", "moe_block", "moe_block", "head"]
    flat = [x for pair in shard.grouped_ops for x in pair]
    assert flat == pytest.approx([0, 0, gf, gb, gf, gb, 0, 0])
    layer = shard.trace.layers[1]
    cost = StageCost.from_layers(shard.trace.layers, 0.0)
    cost = replace(cost, grouped_ops=shard.grouped_ops)
    attn = captured(cost, kinds, "local", ("attn",))
    assert attn.fwd_layers[1][1] == pytest.approx((layer.fwd_ops - gf) / 2 + gf)
    assert attn.bwd_layers[1][1] == pytest.approx((layer.bwd_ops - gb) / 2 + gb)
    both = captured(cost, kinds, "local", ("attn", "moe"))
    assert both.fwd_layers[1][1] == 0.0 and both.bwd_layers[1][1] == pytest.approx(0.0)


def test_grouped_experts_host_work_is_issued_after_the_token_count_sync():
    # One MoE layer: 1 ms of device, 150 ops of 10 us, a token-count sync half-way through its
    # device seconds; 50 of the ops are its grouped experts' (after the sync). The host is
    # free at 0, the device at 1 ms. Before the sync: 100 x 0.5 = 50 ops (0.5 ms host, 0.5 ms
    # device): the device ends at 1.5 ms, the host waits for it. After: 100 ops (1 ms host,
    # 0.5 ms device), K = max(1 ms + 0.5 ms / 100, 0.5 ms + 1 ms / 100) = 1.005 ms: 2.505 ms.
    # Spread like the others (75 and 75 ops) it ended at 1.5 + 0.75 + 0.5 / 75 ms.
    from sim.engine.host import LayerPart, layered_work
    from sim.hardware.host_ops import HostOverhead

    h = HostOverhead(op_s=10e-6)

    def end(after: float, sync: tuple[float, ...] = (0.5,)) -> float:
        part = LayerPart(1e-3, 150.0, 0.0, 0.0, 0.0, 0.0, sync, after)
        return layered_work(h, "F", (part,)).finish(0.0, 1e-3)[0]

    assert end(50.0) == pytest.approx(2.505e-3)
    assert end(0.0) == pytest.approx(1.5e-3 + 0.75e-3 + 0.5e-3 / 75)
    assert end(50.0, ()) == end(0.0, ())  # without a sync the placement does not matter


def test_nvfp4_expert_casts_follow_the_te_version_on_host_and_device():
    """NVFP4's split_quantize of 3 experts, by the container's TE version, the same on both
    sides. TE 2.9 (Bridge 25.11): per expert an amax, a row-wise and a column-wise Hadamard
    cast, so the device's cast of the 3 experts stands for 9 launches and the host's forward
    per expert is 6 Python calls (12 us) + 3 casts, the GEMM's per-tensor scale kernel and the
    GEMM (5 x 3 us) + the GEMM's cuBLASLt set-up (7 us) = 34 us. TE 2.14 (Bridge 26.04, the
    first release with NVFP4 MoE rows): the casts are grouped (#2411, in 2.12), one launch on
    the device, and the host's forward per expert 12 us + the scale kernel's and the GEMM's
    2 x 3 us + its set-up 7 us = 25 us; its backward 12 + 5 + 4 x 3 (two GEMMs, each with its
    scale kernel) + 2 x 7 = 43 us (52 us at 2.9, with the 3 casts)."""
    from sim.compute.moe import grouped
    from sim.compute.precision import get_recipe
    from sim.compute.precision_rules import te_version
    from sim.compute.quantize import quantize_layer
    from sim.compute.te_grouped_host import per_expert_s
    from sim.runs.bridge_software import transformer_engine

    b200 = load_hardware("dgx-b200").gpus[0].compute
    assert b200 is not None
    fwd = [grouped("expert_up[128]", 128, 32, 64, 2, 3, "fwd")]
    nvfp4 = get_recipe("nvfp4")
    bridge = te_version(transformer_engine("26.04"))
    launches = {}
    for te in ((2, 9), bridge):
        f, _, _ = quantize_layer((fwd, [], []), nvfp4, b200.low_rate("nvfp4"), te=te)
        launches[te] = next(k for k in f if k.name == "quantize_expert_up").batch
    assert launches == {(2, 9): 9, (2, 14): 1}
    assert [round(x * 1e6, 6) for x in per_expert_s("nvfp4", te=(2, 9))] == [34.0, 52.0]
    assert [round(x * 1e6, 6) for x in per_expert_s("nvfp4", te=bridge)] == [25.0, 43.0]

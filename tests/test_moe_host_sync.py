"""The host sync of a dropless MoE layer: the host reads the token counts back and waits for the
device there (Megatron-LM@d98e8a64 token_dispatcher.py ``_maybe_dtoh_and_synchronize``), so
its lead over the device is lost (sim.hardware.host_ops.HostWork.sync, sim.engine.host)."""

from __future__ import annotations

from functools import reduce

import pytest

from sim.hardware.host_ops import HostWork


def _issue_with_syncs(ops, host0: float, device0: float) -> tuple[float, float]:
    """Ops ``(h, d)`` issued one by one; ``None`` is a sync: the host waits for the device."""
    host, device = host0, device0
    for op in ops:
        if op is None:
            host = max(host, device)
            continue
        h, d = op
        host += h
        device = max(device, host) + d
    return device, host


@pytest.mark.parametrize("start", [(0.0, 0.0), (0.0, 5.0), (4.0, 0.0)])
def test_sync_summary_matches_ops_issued_one_by_one(start):
    """The max-plus summary with syncs equals issuing the ops one by one (hand-checkable
    small case: device-bound ops, a sync, host-bound ops, a sync, a mixed op)."""
    ops = [(1.0, 3.0), (0.5, 2.0), None, (2.0, 0.5), (3.0, 1.0), None, (1.0, 1.0)]
    parts = [HostWork.sync() if op is None else HostWork(op[0], op[1], op[0] + op[1])
             for op in ops]  # fmt: skip
    work = reduce(HostWork.then, parts)
    host0, device0 = start
    assert work.finish(host0, device0) == pytest.approx(_issue_with_syncs(ops, host0, device0))
    assert work.device_s == pytest.approx(3.0 + 2.0 + 0.5 + 1.0 + 1.0)
    assert work.host_s == pytest.approx(1.0 + 0.5 + 2.0 + 3.0 + 1.0)


def test_dropless_moe_layer_syncs_a_padded_one_does_not():
    """A dropless MoE block's forward has its host sync after the attention and the router
    (a share of its forward strictly inside (0, 1)); with every expert padded to its capacity
    the dispatcher knows its sizes on the host and there is none."""
    from dataclasses import replace

    from sim.compute.decoder import DecoderShape, layer_kernels
    from sim.compute.moe_shape import MoEShape
    from sim.hardware.gpu_compute import ComputeSpec
    from sim.parallel.layer_host import sync_shares

    gpu = ComputeSpec("x", 1e15, 1e14, 4e12, 100, 0.6, 0.5)
    moe = MoEShape(512, 8, 2, 256)
    m = DecoderShape(2, 512, 8, 256, 1000, 1024, moe=moe)
    rows = (128.0,) * 8
    fwd = layer_kernels("moe_block", m, 1, 2, rows=rows)[0]
    (share,) = sync_shares(fwd, gpu, "bf16")
    assert 0.0 < share < 1.0
    padded = replace(m, moe=replace(moe, capacity_factor=1.0, pad_to_capacity=True))
    assert sync_shares(layer_kernels("moe_block", padded, 1, 2, rows=rows)[0], gpu, "bf16") == ()


def test_blackwell_presets_model_their_hosts():
    """Every Blackwell preset models its host (the token-count sync costs nothing without one):
    the x86 DGX B200 and B300 take DGX H100's per-op figures, the GB300 tray GB200's Grace
    figures (the same CPU)."""
    from sim.hardware.loader import load_hardware

    def host(name: str):
        return load_hardware(name).hosts[0].overhead

    h100, grace = host("dgx-h100"), host("gb200-nvl72")
    for name, ref in (("dgx-b200", h100), ("dgx-b300", h100), ("gb300-nvl72", grace)):
        got = host(name)
        assert (got.op_s, got.backward_op_s, got.te_module_s) == (
            ref.op_s,
            ref.backward_op_s,
            ref.te_module_s,
        )
        assert got.op_s > 0


def test_clamped_quick_geglu_copies_its_offset_with_a_second_sync():
    """GPT-OSS's fused quick-GeGLU turns its offset into a device tensor on every call
    (Megatron-LM@d98e8a64 fused_bias_geglu.py line 434, a blocking pageable copy: a host sync,
    sim.compute.glu_clamp): one copy per layer forward after the clamp, a second sync share;
    none with the unfused activation or Transformer Engine's fused grouped MLP. Hand-computed
    host case: 150 ops of 10 us over 1 ms of device, the host 1 ms ahead, syncs at 1/4 and 3/4
    of the layer: the device ends at 1.25 ms, then 1.25 + 0.75 + 0.5/75 ms, then that + 0.375
    + 0.25/37.5 ms = 2.388 ms."""
    from dataclasses import replace

    from sim.compute.glu_clamp import OFFSET_COPY
    from sim.compute.moe import moe_fwd
    from sim.compute.moe_shape import MoEShape
    from sim.engine.host import LayerPart, layered_work
    from sim.hardware.gpu_compute import ComputeSpec
    from sim.hardware.host_ops import HostOverhead
    from sim.parallel.layer_host import sync_shares

    moe = MoEShape(512, 8, 2, 256, clamp=True, bias=True)
    rows = (128.0,) * 8
    names = [k.name for k in moe_fwd(moe, 512, 512, rows, 2)]
    assert names.count(OFFSET_COPY) == 1
    i = names.index(OFFSET_COPY)
    assert names[i - 1].startswith("expert_act_clamp_cat") and names[i + 1].startswith(
        "expert_act["
    )
    gpu = ComputeSpec("x", 1e15, 1e14, 4e12, 100, 0.6, 0.5)
    first, second = sync_shares(moe_fwd(moe, 512, 512, rows, 2), gpu, "bf16")
    assert 0.0 < first < second < 1.0
    for other in (replace(moe, fused_grouped_mlp=True), replace(moe, fused_weighting=False)):
        assert OFFSET_COPY not in {k.name for k in moe_fwd(other, 512, 512, rows, 2)}
    part = LayerPart(1e-3, 150.0, 0.0, 0.0, 0.0, 0.0, (0.25, 0.75))
    work = layered_work(HostOverhead(op_s=10e-6), "F", (part,))
    third = 1.25e-3 + 0.75e-3 + 0.5e-3 / 75
    assert work.finish(0.0, 1e-3)[0] == pytest.approx(third + 0.375e-3 + 0.25e-3 / 37.5)


def test_moe_act_recompute_syncs_the_backward_too():
    """Megatron-Core's ``moe_act`` recompute re-runs GPT-OSS's fused quick-GeGLU in a hook on
    fc2's output gradient (Megatron-LM@d7288711 moe/experts.py 379-390, random.py 735-822), so
    its blocking offset copy waits for the device in the backward as well, before fc2's input
    gradient. Hand-computed: a backward of 100 ops of 10 us over 1 ms of device, the device
    busy until 1 ms, the sync at 1/4: 25 ops run to 1.25 ms, the host waits there, then 75 ops
    issued one by one end at 1.25 + 0.75 + 0.01 = 2.01 ms (2.00 ms without the sync). Only a
    stage whose policy recomputes ``moe_act`` takes the share."""
    from types import SimpleNamespace

    from sim.engine.host import layered_work
    from sim.engine.stage_cost import StageCost
    from sim.hardware.host_ops import HostOverhead
    from sim.memory.registry import parse_policy
    from sim.parallel.decoder_shard import DecoderShard
    from sim.point.stage_costs import with_recompute_syncs

    h = HostOverhead(op_s=10e-6, backward_op_s=10e-6)
    cost = StageCost(0.0, 1e-3, 0.0, 0.0, bwd_layers=((1e-3, 100.0, 0.0),))
    synced = StageCost(0.0, 1e-3, 0.0, 0.0, bwd_layers=((1e-3, 100.0, 0.0),), bwd_syncs=(0.25,))
    (part,) = synced.backward_layer_parts()
    assert part.sync_share == (0.25,)
    ends = [layered_work(h, "B", c.backward_parts()).finish(0.0, 1e-3)[0] for c in (cost, synced)]
    assert ends == pytest.approx([2.0e-3, 2.01e-3])

    trace = SimpleNamespace(layers=(0,))  # one layer: all the function reads of the trace
    shard = DecoderShard(trace, (), (), (), None, recompute_syncs=(0.25,))  # type: ignore[arg-type]
    for text, want in (("dist_opt:recompute:selective:layernorm,moe_act", (0.25,)),
                       ("dist_opt:recompute:selective:layernorm", ()),
                       ("dist_opt", ())):  # fmt: skip
        (got,) = with_recompute_syncs((cost,), shard, [0], parse_policy(text))
        assert got.bwd_syncs == want

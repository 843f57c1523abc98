"""Megatron-Core's torch.compile-d jit_fuser calls priced on the host (sim.framework.jit_fuser_host)."""

from __future__ import annotations

import pytest

from sim.engine.stage_cost import StageCost
from sim.framework.jit_fuser_host import excess_units, with_jit_fuser
from sim.hardware.host_ops import HostOverhead


def test_dense_block_compiled_calls_cost_the_published_excess() -> None:
    # pytorch/pytorch#122029: compiled 39.0 us vs eager 5.6 us with grad, 14.0 vs 4.6 without.
    # A dense block forward: two bias-dropout-adds with grad, one activation without:
    # 2 * 33.4 + 9.4 = 76.2 us on the x86 presets (module 2 us, function_backward 7.5 us),
    # the same again in its backward; on Grace (module 2.27, function_backward 8.51) x 1.135.
    fwd_mods, bwd_nodes, ops = excess_units("block")
    x86 = HostOverhead(module_s=2e-6, function_backward_s=7.5e-6)
    grace = HostOverhead(module_s=2.27e-6, function_backward_s=8.51e-6)
    assert x86.calls_s(fwd_mods, 0) == pytest.approx(76.2e-6)
    assert x86.calls_s(0, bwd_nodes, backward=True) == pytest.approx(76.2e-6)
    assert grace.calls_s(fwd_mods, 0) == pytest.approx(76.2e-6 * 1.135)
    assert ops == 6.0  # two bias-dropout-adds: 4 eager ops -> one compiled call each


def test_stage_layers_get_calls_and_lose_replaced_ops() -> None:
    c = StageCost(
        1.0, 2.0, 0.0, 0.0, fwd_ops=120.0, bwd_ops=180.0,
        fwd_layers=((0.5, 60.0, 11.0, 8.0, 0.0),) * 2, bwd_layers=((1.0, 90.0, 8.0),) * 2,
    )  # fmt: skip
    d = with_jit_fuser(c, ["block", "head"])
    assert [x[1] for x in d.fwd_layers] == [54.0, 60.0]
    assert [x[1] for x in d.bwd_layers] == [84.0, 90.0]
    assert (d.fwd_ops, d.bwd_ops) == (114.0, 174.0)
    assert d.fwd_layers[0][2] == pytest.approx(11.0 + 76.2 / 2)
    assert d.bwd_layers[0][2] == pytest.approx(8.0 + 76.2 / 7.5)
    assert d.fwd_layers[1][2] == 11.0

"""Transformer Engine modules' host work (sim.framework.te_host): one mechanism, a hand count."""

import pytest

from sim.engine.host import layered_work
from sim.engine.stage_cost import StageCost
from sim.framework.registry import get_framework
from sim.hardware.host_ops import HostOverhead
from sim.hardware.loader import load_hardware
from sim.runs.megatron_host_flags import read_host_options


def test_a_te_block_costs_its_four_linears_more_on_the_host():
    # one block of 60 forward ops at 10 us, 11 module calls at 2 us, 8 Functions at 8 us:
    # 600 + 22 + 64 = 686 us eager; with TE its 4 Linear-type modules add 4 x 22.8 us = 91.2 us
    # (an arbitrary te_module_s: what is tested is the count), the embedding none.
    host = HostOverhead(op_s=10e-6, module_s=2e-6, function_s=8e-6, te_module_s=22.8e-6)
    fwd = ((0.0, 10.0, 0.0, 0.0, 0.0), (0.0, 60.0, 11.0, 8.0, 0.0))
    bwd = ((0.0, 8.0, 0.0), (0.0, 90.0, 8.0))
    cost = StageCost(1e-6, 2e-6, 0.0, 0.0, fwd_layers=fwd, bwd_layers=bwd)
    kinds = ["embedding", "block"]
    te = get_framework("megatron-lm").host_captured(cost, kinds)
    local = get_framework("megatron-lm[transformer_impl=local]").host_captured(cost, kinds)
    h_te = layered_work(host, "F", te.forward_parts(())).host_s
    h_local = layered_work(host, "F", local.forward_parts(())).host_s
    # Megatron-Core's layer Python: 113 / 0.60 module calls more in the block
    # (sim.framework.mcore_python); its torch.compile'd jit_fuser calls (sim.framework.
    # jit_fuser_host): 2 with grad at 33.4 us over an op and 1 without at 9.4 us
    # (pytorch/pytorch#122029), +76.2 us here at 2 us per module call, while each of the 2
    # bias-dropout-adds' 4 eager ops becomes 1: -6 ops at 10 us
    jit = 2 * 33.4e-6 + 9.4e-6 - 6 * 10e-6
    assert h_local == pytest.approx(100e-6 + 686e-6 + 113 / 0.60 * 2e-6 + jit)
    assert h_te - h_local == pytest.approx(4 * 22.8e-6)
    # and as much again in its backward (assumption, TE#445), the embedding none
    h_te_b = layered_work(host, "B", te.backward_parts()).host_s
    h_local_b = layered_work(host, "B", local.backward_parts()).host_s
    assert h_te_b - h_local_b == pytest.approx(4 * 22.8e-6)


@pytest.mark.parametrize(
    ("flags", "option"),
    [({}, None), ({"transformer-impl": "local"}, "local"), ({"spec": "local"}, "local"),
     ({"transformer-impl": "transformer_engine"}, None)],
)  # fmt: skip
def test_the_runs_flags_choose_the_implementation(flags, option):
    options, _ = read_host_options(flags)
    assert options.get("transformer_impl") == option


def test_te_extra_moves_between_grace_and_x86_as_python_does():
    # TE's extra over torch.nn.Linear is Python (TE v2.6 linear.py 1307-1424, 82-463), so an
    # x86 DGX's te_module is GB200's 62.6 us (NVIDIA/TransformerEngine#2053) over the Python
    # ratio the presets price module calls with (2.27 / 2.0 = 1.135, pytorch/pytorch#187862):
    # 62.6 / 1.135 = 55.15 us, not torch Linear's ratio (62.6 x 13.48 / 37.08 = 22.8 us).
    grace = load_hardware("gb200-nvl72").hosts[0].overhead
    for name in ("dgx-h100", "dgx-a100-80gb", "dgx-b200", "dgx-b300"):
        x86 = load_hardware(name).hosts[0].overhead
        assert x86.te_module_s == pytest.approx(55.1e-6)
        assert x86.te_module_s == pytest.approx(
            grace.te_module_s * x86.module_s / grace.module_s, abs=0.1e-6
        )

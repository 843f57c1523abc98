"""Megatron-Core's Python around a layer's forward (sim.framework.mcore_python): one mechanism,
a hand count."""

import pytest

from sim.engine.host import layered_work
from sim.engine.stage_cost import StageCost
from sim.framework.mcore_python import LAYER_PYTHON_OPS
from sim.framework.registry import get_framework
from sim.hardware.host_ops import HostOverhead


def test_a_megatron_core_block_forward_costs_its_python_as_forward_ops():
    # embedding (10 ops) and one block (60 ops, 11 modules, 8 Functions) at 10 us per forward
    # op, 8 us without autograd, 2 us per module, 8 us per Function: 100 + 686 us; Megatron-Core
    # adds LAYER_PYTHON_OPS forward ops to the block (40 x 10 us = 400 us), the embedding none;
    # the backward is unchanged; the SC'21 Megatron-LM (no Megatron-Core) adds nothing.
    host = HostOverhead(
        op_s=10e-6, nograd_op_s=8e-6, backward_op_s=5e-6, module_s=2e-6, function_s=8e-6
    )
    fwd = ((0.0, 10.0, 0.0, 0.0, 0.0), (0.0, 60.0, 11.0, 8.0, 0.0))
    bwd = ((0.0, 8.0, 0.0), (0.0, 90.0, 8.0))
    cost = StageCost(1e-6, 2e-6, 0.0, 0.0, fwd_ops=70.0, fwd_layers=fwd, bwd_layers=bwd)
    kinds = ["embedding", "block"]
    mcore = get_framework("megatron-lm[transformer_impl=local]").host_captured(cost, kinds)
    sc21 = get_framework("megatron-lm-torch-ddp").host_captured(cost, kinds)
    assert LAYER_PYTHON_OPS == 40.0
    assert layered_work(host, "F", sc21.forward_parts(())).host_s == pytest.approx(786e-6)
    assert layered_work(host, "F", mcore.forward_parts(())).host_s == pytest.approx(1186e-6)
    assert mcore.fwd_ops == 110.0
    # a checkpointed block's first forward runs without autograd: 40 x 8 us more
    first = layered_work(host, "F", mcore.forward_parts((1,))).host_s
    assert first - layered_work(host, "F", sc21.forward_parts((1,))).host_s == pytest.approx(320e-6)
    # the backward: the DDP's gradient hooks differ between the two, the Python does not
    assert [x[1] for x in mcore.bwd_layers] == [8.0, 90.0]


def test_a_moe_block_forward_costs_its_measured_python_as_module_calls():
    # scripts/time_mcore_moe_layer.py, one run: the MoE block's forward 124.0 forward-op
    # equivalents (2.78 us each) over its counted ops = 124.0 x 2.78 / 0.55 = 626.8 module-call
    # equivalents of the same CPU (0.55 us each). At 2 us per module call the block's forward
    # costs 1253.6 us more than its counts, whatever the host's op figure; its backward nothing
    # more; no forward ops are added to it (the dense block's 40 are not charged on it).
    host = HostOverhead(op_s=10e-6, backward_op_s=5e-6, module_s=2e-6)
    fwd = ((0.0, 10.0, 0.0, 0.0, 0.0), (0.0, 100.0, 5.0, 0.0, 0.0))
    bwd = ((0.0, 8.0, 0.0), (0.0, 90.0, 0.0))
    cost = StageCost(1e-6, 2e-6, 0.0, 0.0, fwd_ops=110.0, fwd_layers=fwd, bwd_layers=bwd)
    kinds = ["embedding", "moe_block"]
    mcore = get_framework("megatron-lm[transformer_impl=local]").host_captured(cost, kinds)
    sc21 = get_framework("megatron-lm-torch-ddp").host_captured(cost, kinds)
    extra = (
        layered_work(host, "F", mcore.forward_parts(())).host_s
        - layered_work(host, "F", sc21.forward_parts(())).host_s
    )
    assert extra == pytest.approx(124.0 * 2.78 / 0.55 * 2e-6)
    assert mcore.fwd_ops == 110.0
    assert [x[1] for x in mcore.bwd_layers] == [8.0, 90.0]

"""Megatron-Core DDP's Python gradient hooks (sim.framework.ddp_hooks): a hand count."""

import pytest

from sim.engine.host import layered_work
from sim.engine.stage_cost import StageCost
from sim.framework.registry import get_framework
from sim.hardware.host_ops import HostOverhead


def test_each_parameter_tensor_costs_one_python_call_per_backward():
    # a block (8 vectors, 4 matrices: 12 parameter tensors) and an embedding (word and
    # position tables: 2); backward 90 + 8 ops at 10 us and 8 Function nodes at 7.5 us.
    # Megatron-Core's DDP adds 12 + 2 hook calls at 7.5 us = 105 us; torch DDP none.
    host = HostOverhead(op_s=10e-6, backward_op_s=10e-6, function_backward_s=7.5e-6)
    cost = StageCost(0.0, 1e-6, 0.0, 0.0, bwd_layers=((0.0, 8.0, 0.0), (0.0, 90.0, 8.0)))
    kinds = ["embedding", "block"]
    mcore = get_framework("megatron-lm[transformer_impl=local]").host_captured(cost, kinds)
    torch_ddp = get_framework("megatron-lm-torch-ddp").host_captured(cost, kinds)
    h_mcore = layered_work(host, "B", mcore.backward_parts()).host_s
    h_torch = layered_work(host, "B", torch_ddp.backward_parts()).host_s
    assert h_torch == pytest.approx(98 * 10e-6 + 8 * 7.5e-6)
    assert h_mcore - h_torch == pytest.approx(14 * 7.5e-6)

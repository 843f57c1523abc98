"""Megatron-Core's Python around a layer's forward (sim.framework.mcore_python): one mechanism,
a hand count."""

import pytest

from sim.engine.host import layered_work
from sim.engine.stage_cost import StageCost
from sim.framework.jit_fuser_host import with_jit_fuser
from sim.framework.registry import get_framework
from sim.hardware.host_ops import HostOverhead


def test_a_megatron_core_block_forward_costs_its_measured_python_as_module_calls():
    # measurements/host/mcore_layer.md run 3: the dense layer's forward 323 us against 210 us
    # modelled, 113 us of Python over that CPU's module call (0.60 us) = 188.33 module-call
    # equivalents. Embedding (10 ops) and one block (60 ops, 11 modules, 8 Functions) at 10 us
    # per forward op, 8 us without autograd, 2 us per module, 8 us per Function: 100 + 686 us;
    # Megatron-Core adds 188.33 x 2 us = 376.67 us to the block, the embedding none, whatever
    # the host's op figure (a host with op 30 us adds the same); no forward ops are added; a
    # checkpointed block's first forward (no autograd) pays the same Python; the backward is
    # unchanged; the SC'21 Megatron-LM (no Megatron-Core) adds nothing.
    host = HostOverhead(
        op_s=10e-6, nograd_op_s=8e-6, backward_op_s=5e-6, module_s=2e-6, function_s=8e-6
    )
    fwd = ((0.0, 10.0, 0.0, 0.0, 0.0), (0.0, 60.0, 11.0, 8.0, 0.0))
    bwd = ((0.0, 8.0, 0.0), (0.0, 90.0, 8.0))
    cost = StageCost(1e-6, 2e-6, 0.0, 0.0, fwd_ops=70.0, fwd_layers=fwd, bwd_layers=bwd)
    kinds = ["embedding", "block"]
    mcore = get_framework("megatron-lm[transformer_impl=local]").host_captured(cost, kinds)
    sc21 = get_framework("megatron-lm-torch-ddp").host_captured(cost, kinds)
    ref = with_jit_fuser(sc21, kinds)  # Megatron-Core's jit_fuser calls (test_jit_fuser_host)
    python_s = 113.0 / 0.60 * 2e-6
    assert layered_work(host, "F", sc21.forward_parts(())).host_s == pytest.approx(786e-6)
    assert layered_work(host, "F", mcore.forward_parts(())).host_s == pytest.approx(
        layered_work(host, "F", ref.forward_parts(())).host_s + python_s
    )
    grace_like = HostOverhead(op_s=30e-6, module_s=2e-6, function_s=8e-6)
    extra = (
        layered_work(grace_like, "F", mcore.forward_parts(())).host_s
        - layered_work(grace_like, "F", ref.forward_parts(())).host_s
    )
    assert extra == pytest.approx(python_s)
    assert mcore.fwd_ops == ref.fwd_ops
    first = layered_work(host, "F", mcore.forward_parts((1,))).host_s
    assert first - layered_work(host, "F", ref.forward_parts((1,))).host_s == pytest.approx(
        python_s
    )
    assert [x[1] for x in mcore.bwd_layers] == [x[1] for x in ref.bwd_layers]


def test_a_moe_block_forward_costs_its_measured_python_as_module_calls():
    # scripts/time_mcore_moe_layer.py, one run: the MoE block's forward 124.0 forward-op
    # equivalents (2.78 us each) over its counted ops = 124.0 x 2.78 / 0.55 = 626.8 module-call
    # equivalents of the same CPU (0.55 us each). At 2 us per module call the block's forward
    # costs 1253.6 us more than its counts, whatever the host's op figure; its backward nothing
    # more; no forward ops are added to it (the dense block's Python is not charged on it).
    host = HostOverhead(op_s=10e-6, backward_op_s=5e-6, module_s=2e-6)
    fwd = ((0.0, 10.0, 0.0, 0.0, 0.0), (0.0, 100.0, 5.0, 0.0, 0.0))
    bwd = ((0.0, 8.0, 0.0), (0.0, 90.0, 0.0))
    cost = StageCost(1e-6, 2e-6, 0.0, 0.0, fwd_ops=110.0, fwd_layers=fwd, bwd_layers=bwd)
    kinds = ["embedding", "moe_block"]
    mcore = get_framework("megatron-lm[transformer_impl=local]").host_captured(cost, kinds)
    sc21 = get_framework("megatron-lm-torch-ddp").host_captured(cost, kinds)
    ref = with_jit_fuser(sc21, kinds)  # Megatron-Core's jit_fuser calls (test_jit_fuser_host)
    extra = (
        layered_work(host, "F", mcore.forward_parts(())).host_s
        - layered_work(host, "F", ref.forward_parts(())).host_s
    )
    assert extra == pytest.approx(124.0 * 2.78 / 0.55 * 2e-6)
    assert mcore.fwd_ops == ref.fwd_ops
    assert [x[1] for x in mcore.bwd_layers] == [x[1] for x in ref.bwd_layers]

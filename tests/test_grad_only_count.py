"""The router's expert-bias count runs once per micro-batch under recompute (sim.compute.
router_fused GRAD_ONLY, sim.compute.recompute_modules NOGRAD, LayerProfile.full_recompute_s):
Megatron's checkpoint runs the first forward under torch.no_grad() and ``_apply_expert_bias``
only counts with gradients enabled (NVIDIA/Megatron-LM@d98e8a64 router.py line 740,
tensor_parallel/random.py lines 616 and 658), so forward + recompute count once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.decoder import layer_kernels
from sim.compute.decoder_shape import DecoderShape
from sim.compute.moe_shape import MoEShape
from sim.compute.recompute_modules import NOGRAD, module_parts
from sim.compute.router_fused import BIAS_COUNT
from sim.engine.stage_cost import StageCost
from sim.memory.stash import stash
from sim.trace.schema import LayerProfile

# A MoE layer of 64 tokens (b = 1, s = 64, one rank), 8 experts, top-2, bf16.
R, E = 64, 8
COUNT_BYTES = R * E * 1 + 2 * 4 * E  # the bool map read, the fp32 counts read and written


def _model(fused: bool) -> DecoderShape:
    moe = MoEShape(32, E, 2, 16, router_expert_bias=True, router_fused=fused)
    return DecoderShape(layers=2, hidden=32, heads=4, seq_len=R, vocab=128, ffn_hidden=64, moe=moe)


@pytest.mark.parametrize("fused", [True, False])
def test_bias_count_runs_once_per_microbatch_under_recompute(fused):
    m = _model(fused)
    fwd = layer_kernels("moe_block", m, 1, 2)[0]
    parts = {name: kernels for name, _, kernels in module_parts("moe_block", m, 1, 2)}
    count = [k for k in fwd if k.name == BIAS_COUNT]
    # the unfused router's counted op writes int64 counts: r E + 8 E (sim.compute.router_unfused)
    assert [k.bytes for k in count] == [COUNT_BYTES if fused else R * E + 8 * E]
    # selective recompute of the MoE layer re-runs the router but not its count ...
    assert "router_topk" in [k.name for k in parts["moe"]]
    assert BIAS_COUNT not in [k.name for k in parts["moe"]]
    # ... and full recompute re-runs the forward less the NOGRAD part, which is the count
    assert list(parts[NOGRAD]) == count
    # without the bias there is no such part (the unfused router's configuration without it)
    plain = replace(m, moe=replace(m.moe, router_expert_bias=False))
    assert NOGRAD not in {n for n, _, _ in module_parts("moe_block", plain, 1, 2)}


def test_full_recompute_adds_the_forward_less_the_count():
    # one MoE layer: forward 1.0 s of which the count takes 0.01 s; full recompute adds 0.99 s
    layer = LayerProfile("moe_block.0", 1.0, 2.0, 10.0, 100.0, 4.0,
                         recompute_parts=(("moe", 50.0, 0.4), (NOGRAD, 0.0, 0.01)))  # fmt: skip

    class Ctx:
        layers = (layer,)
        layer_inputs = (4.0,)
        act_bytes = 100.0

    assert stash(Ctx(), full=[0]).recompute_s == pytest.approx(0.99)
    cost = StageCost.from_layers((layer,), 0.0)
    assert [p.device_s for p in cost.recompute_parts((0,))] == [pytest.approx(0.99)]
    assert cost.fwd_s == 1.0  # the forward keeps it

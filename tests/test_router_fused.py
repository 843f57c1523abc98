"""The fused MoE router's random logits and balancing-loss kernels (sim.compute.router_fused):
their bytes by hand, where moe_fwd / moe_bwd place them, and the flags that switch them on."""

from __future__ import annotations

from dataclasses import replace

from sim.compute.moe import moe_bwd, moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.compute.router_fused import fused_extra_bwd, fused_extra_fwd
from sim.runs.decoder_express import decoder_shape
from sim.runs.megatron_args import read_megatron


def test_kernel_bytes_by_hand():
    # r = 2 tokens, E = 4 experts, bf16 logits (L = 2): r E = 8 elements.
    fwd = fused_extra_fwd(2, 4, 2, aux_loss=True, random_logits=True)
    # clone 2L, normal L, scores L + 4 + 4 + 1, token counts 1, loss 4 (bytes per element)
    assert [k.bytes for k in fwd] == [32.0, 16.0, 88.0, 8.0, 32.0]
    # loss grad 4, score grad 4 + 4 + L, the logits' two gradients summed 3L
    assert [k.bytes for k in fused_extra_bwd(2, 4, 2, aux_loss=True)] == [32.0, 80.0, 48.0]
    assert fused_extra_fwd(2, 4, 2, aux_loss=False, random_logits=False) == []
    assert fused_extra_bwd(2, 4, 2, aux_loss=False) == []


def test_moe_layer_runs_them_with_the_fused_router_only():
    base = MoEShape(64, 8, 2, 32)
    on = replace(base, aux_loss=True, random_logits=True)
    names = [k.name for k in moe_fwd(on, 16, 16, (4.0,) * 8, 2)]
    plain = [k.name for k in moe_fwd(base, 16, 16, (4.0,) * 8, 2)]
    assert len(names) - len(plain) == 5
    # the random logits come before the top-k, the loss after it
    assert names.index("router_topk[random_normal]") < names.index("router_topk")
    assert names.index("router_topk") < names.index("router_topk[aux_scores]")
    dx_on, _ = moe_bwd(on, 16, 16, (4.0,) * 8, 2)
    dx, _ = moe_bwd(base, 16, 16, (4.0,) * 8, 2)
    assert len(dx_on) - len(dx) == 3
    # the unfused router's counted ops already hold them (sim.compute.router_unfused)
    eager = replace(on, router_fused=False)
    eager_names = {k.name for k in moe_fwd(eager, 16, 16, (4.0,) * 8, 2)}
    assert not eager_names & {"router_topk[random_normal]", "router_topk[aux_scores]"}


def test_flags_switch_them_on():
    moe = {
        "num-layers": 2, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
        "micro-batch-size": 1, "global-batch-size": 8, "bf16": True, "vocab-size": 1000,
        "num-experts": 8, "moe-router-topk": 2, "moe-ffn-hidden-size": 32,
        "moe-grouped-gemm": True, "moe-router-fusion": True,
    }  # fmt: skip

    def shape(**flags):
        run = read_megatron(moe | flags, name="t", source="<test>", num_gpus=8, gpu="B200")
        assert not [n for n in run.args if n.status == "unmapped"]
        return decoder_shape(run.shape, 128, "flash").moe

    assert (shape().aux_loss, shape().random_logits) == (False, False)  # coefficient 0
    on = shape(**{"moe-aux-loss-coeff": "1e-3", "moe-router-force-load-balancing": True})
    assert (on.aux_loss, on.random_logits) == (True, True)
    off = shape(**{"moe-aux-loss-coeff": "1e-3", "moe-router-load-balancing-type": "none"})
    assert not off.aux_loss

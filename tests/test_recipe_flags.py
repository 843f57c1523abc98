"""Megatron-Bridge recipe flags that change a step's work: the output layer in MXFP8
(``fp8_output_proj``, sim.runs.precision_flags), the per-token loss's gradient scaling
(``calculate_per_token_loss``, sim.framework.per_token_loss) and a CUDA graph of the attention
taking GPT-OSS's attention host ops with it (sim.framework.cuda_graphs)."""

from __future__ import annotations

import pytest

from sim.compute.cast_bytes import cast_bytes_per_element
from sim.compute.decoder import DecoderShape, layer_kernels
from sim.compute.precision import get_recipe
from sim.compute.precision_rules import LayerRules, LowPrecision
from sim.compute.quantize import quantize_layer
from sim.hardware.loader import load_hardware
from sim.runs.bridge_recipes import recipe_flags
from sim.runs.megatron_args import read_megatron

GB200 = load_hardware("gb200-nvl72").gpus[0].compute
MXFP8 = get_recipe("mxfp8")
SHAPE = DecoderShape(2, 256, 4, 128, 1024, 512)
ARGS = {"num-layers": 2, "hidden-size": 256, "num-attention-heads": 4, "seq-length": 128,
        "vocab-size": 1024, "bf16": True, "fp8-format": "e4m3", "fp8-recipe": "mxfp8",
        "global-batch-size": 8}  # fmt: skip


def test_fp8_output_proj_runs_the_logits_gemms_in_mxfp8_with_their_casts():
    flags = recipe_flags({"precision_other": "fp8_output_proj=True"})
    assert flags == {"fp8-output-proj": True}
    run = read_megatron(ARGS | flags, name="h", source="t", gpu="GB200", num_gpus=8)
    assert dict(run.precision_options) == {"fp8_output_proj": True}
    rules = LayerRules.default(MXFP8, head=True)
    assert LowPrecision(MXFP8, rules).layer_low("head", 0, 2)
    assert not LowPrecision(MXFP8, LayerRules.default(MXFP8)).layer_low("head", 0, 2)
    b, d = 1, 2
    fwd, din, dw = quantize_layer(layer_kernels("head", SHAPE, b, d), MXFP8,
                                  GB200.low_rate("mxfp8"), rules)  # fmt: skip
    gemms = [k for k in (*fwd, *din, *dw) if k.kind == "gemm"]
    assert gemms and {k.precision for k in gemms} == {"mxfp8"}
    # one cast of the head's input (b*s x h, both usages: MXFP8 runs the wgrad low) forward,
    # one of the logits' gradient (b*s x V) in the input-gradient phase
    per = cast_bytes_per_element(MXFP8, 2, GB200.low_rate("mxfp8").non_tn)
    casts = {k.name: k.bytes for k in (*fwd, *din) if k.name.startswith("quantize")}
    assert sorted(casts.values()) == pytest.approx(sorted([128 * 256 * per, 128 * 1024 * per]))


def test_per_token_loss_moves_the_gradient_scaling_to_the_step():
    from sim.framework.per_token_loss import FINALIZE_PASSES
    from sim.framework.registry import get_framework

    flags = recipe_flags({"calculate_per_token_loss": "True"})
    assert flags == {"calculate-per-token-loss": True}
    run = read_megatron(ARGS | flags, name="p", source="t", gpu="GB200", num_gpus=8)
    assert ("per_token_loss", "true") in run.framework_options
    plain, per_token = get_framework("megatron-lm"), get_framework("megatron-lm[per_token_loss]")
    # Megatron-LM's passes (2, 2): zero + NaN check always, the 1/w pre-scaling with w > 1;
    # per-token: no pre-scaling, the finalize's read + write at any width
    assert plain.step_work().passes(1) == 2.0 and plain.step_work().passes(8) == 4.0
    assert per_token.step_work().passes(1) == per_token.step_work().passes(8) == 2 + FINALIZE_PASSES


def test_an_attention_graph_takes_gpt_oss_attention_ops_whole():
    from dataclasses import replace

    from sim.engine.stage_cost import StageCost
    from sim.framework.cuda_graphs import captured
    from sim.parallel.layer_host import attention_host_ops
    from sim.trace.schema import LayerProfile

    gpt_oss = replace(SHAPE, rope_unfused=True, attn_bias=True)
    layer = LayerProfile("l0", 1.0, 2.0, 0.0, 0.0, 0.0, fwd_ops=200.0, bwd_ops=150.0)
    # two rotated tensors of 15 / 11 ops and the bias's 1 / 2 (sim.compute.gptoss_host)
    assert attention_host_ops(layer, "moe_block", gpt_oss) == (31.0, 24.0)
    assert attention_host_ops(layer, "moe_block", SHAPE) == (0.0, 0.0)
    assert attention_host_ops(layer, "moe", gpt_oss) == (0.0, 0.0)  # no attention half
    cost = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((1.0, 200.0, 0.0, 0.0, 0.0),),
                     bwd_layers=((2.0, 150.0, 0.0),), grouped_ops=((40.0, 30.0),),
                     attn_ops=((31.0, 24.0),))  # fmt: skip
    # attn: the attention's own ops go whole, half of the other (200-40-31, 150-30-24, less
    # the router region's 38 / 29.5 that moe_router captures: sim.framework.cuda_graphs) ops,
    # the experts' all stay; moe_router alone: the attention's stay whole, the experts' too
    a = captured(cost, ["moe_block"], "transformer_engine", ("attn", "moe_router"))
    assert (a.fwd_ops, a.bwd_ops) == ((129 - 38) / 2 + 40, (96 - 29.5) / 2 + 30)
    r = captured(cost, ["moe_block"], "transformer_engine", ("moe_router",))
    assert (r.fwd_ops, r.bwd_ops) == (129 - 38 + 40 + 31, 96 - 29.5 + 30 + 24)

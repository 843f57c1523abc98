"""What a low-precision recipe keeps in 16 bits besides whole blocks (sim.compute.precision_rules,
sim.runs.precision_flags): the MTP depths (Megatron-Bridge's keep_mtp_spec_in_bf16), named
linear layers (a TE quantization config's bf16 matchers) and the last layers of a hybrid stack
(--num-layers-at-end-in-bf16), as Megatron-Bridge's Nemotron 3 Super NVFP4 recipe sets them."""

from __future__ import annotations

from sim.compute.decoder import DecoderShape, layer_kernels, layer_names
from sim.compute.kernels import gemm
from sim.compute.low_precision_act import recipe_input_savings
from sim.compute.moe_shape import MoEShape
from sim.compute.precision import get_recipe
from sim.compute.precision_rules import LayerRules, LowPrecision
from sim.compute.quantize import layer_index, quantize_for, quantize_layer
from sim.compute.ssm import MambaShape
from sim.hardware.loader import load_hardware
from sim.runs.bridge_recipes import recipe_flags
from sim.runs.megatron_args import read_megatron

GB300 = load_hardware("gb300-nvl72").gpus[0].compute
NVFP4 = get_recipe("nvfp4")
HYBRID = DecoderShape(4, 256, 4, 128, 1024, 512, kv_heads=2, pattern="MEM*", mtp_layers=1,
                      mamba=MambaShape(8, 32, 16, 1, 4, 64),
                      moe=MoEShape(256, 8, 2, 128, shared_ffn=256, gated=False, latent=64))  # fmt: skip
SUPER_ROW = {
    "first_last_layers_bf16": "True (start=0, end=14)",
    "precision_other": "quant_recipe=load_quantization_recipe(\"'src/megatron/bridge/perf_recipes/"
    "nemotronh/te_quant.cfg'\",); keep_mtp_spec_in_bf16=True",
}


def _precisions(kind: str, rules: LayerRules) -> dict[str, str]:
    rows = (1.0,) * 8 if kind in ("moe", "mtp") else ()
    fwd = quantize_layer(layer_kernels(kind, HYBRID, 1, 2, rows=rows), NVFP4,
                         GB300.low_rate("nvfp4"), rules)[0]  # fmt: skip
    return {k.name.split("[")[0]: k.precision for k in fwd if k.kind == "gemm"}


def test_super_nvfp4_keeps_attention_latent_mtp_and_the_last_layers_in_bf16():
    flags = recipe_flags(SUPER_ROW)
    assert flags["num-layers-at-end-in-bf16"] == "14" and flags["keep-mtp-spec-in-bf16"]
    run = read_megatron({"num-layers": 4, "hidden-size": 256, "num-attention-heads": 4,
                         "seq-length": 128, "vocab-size": 1024, "bf16": True,
                         "fp4-format": "e2m1", "global-batch-size": 8,
                         **flags | {"num-layers-at-end-in-bf16": "1"}},
                        name="s", source="t", gpu="GB300", num_gpus=8)  # fmt: skip
    opts = dict(run.precision_options)
    assert opts == {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 0,
                    "num_layers_at_end_in_bf16": 1, "mtp_bf16": True,
                    "bf16_linears": ["qkv", "proj", "latent_down", "latent_up"],
                    "mxfp8_linears": ["out_proj"]}  # fmt: skip
    rules = LayerRules.default(NVFP4, True, 0, 1, mtp=False, keep16=tuple(opts["bf16_linears"]))
    low = LowPrecision(NVFP4, rules)
    # the stack M E M *: the last layer (attention.3) and the MTP depth in 16 bits
    runs_low = [low.layer_low(k, layer_index(n), HYBRID.layers) for n, k in layer_names(HYBRID)]
    assert runs_low == [False, True, True, True, False, False, False]
    # in a low layer, the latent projections stay in bf16 and the experts go to NVFP4
    moe = _precisions("moe", rules)
    assert moe["latent_down"] == moe["latent_up"] == ""
    assert moe["expert_up"] == moe["expert_down"] == moe["shared_up"] == "nvfp4"
    mamba = _precisions("mamba", rules)
    assert mamba["in_proj"] == mamba["out_proj"] == "nvfp4" and mamba["ssd_chunk_scan"] == ""
    assert set(_precisions("attention", rules).values()) == {""}  # qkv and proj kept
    assert _precisions("moe", LayerRules())["latent_down"] == "nvfp4"  # TE linears otherwise


def test_te_quant_cfg_runs_mamba_out_proj_in_mxfp8_under_nvfp4():
    """te_quant.cfg's mxfp8 matcher '*mixer.out_proj': under NVFP4 Mamba's out_proj GEMMs run
    in MXFP8 (1-byte operands) with MXFP8 casts, in_proj stays NVFP4 (half-byte operands).
    Hand-computed bytes of a GEMM ``[m, k] @ [k, n]``: ``(m*k + k*n) * q + m*n * 2``."""
    fwd = [gemm("in_proj", 4, 6, 8, 2), gemm("out_proj", 4, 3, 8, 2)]
    kernels = (fwd, [gemm("d_out_proj_in", 4, 8, 3, 2)], [gemm("d_out_proj_w", 8, 3, 4, 2)])
    low = LowPrecision(NVFP4, LayerRules.default(NVFP4, mxfp8=("out_proj",)))
    f, dx, dw = quantize_for(kernels, low, GB300)
    by = {k.name: k for k in f + dx + dw}
    assert by["in_proj"].precision == "nvfp4" and by["in_proj"].bytes == (32 + 48) * 0.5 + 48
    assert by["out_proj"].precision == "mxfp8" and by["out_proj"].bytes == (32 + 24) * 1 + 24
    assert by["d_out_proj_in"].precision == by["d_out_proj_w"].precision == "mxfp8"
    assert {"quantize_in_proj", "quantize_out_proj", "quantize_dgrad_out_proj"} <= set(by)
    # the MXFP8 recipe itself takes no mxfp8 matchers: nothing to move
    assert LayerRules.default(get_recipe("mxfp8"), mxfp8=("out_proj",)).mxfp8 == ()


def test_mxfp8_out_proj_saves_its_input_at_mxfp8_size_under_nvfp4():
    """A Mamba layer (2 heads x 4, 8 tokens, hidden 16) under NVFP4 with out_proj in MXFP8:
    in_proj's 8 x 16 input saved at 0.5 + 1/16 bytes instead of 2, out_proj's 8 x 8 at 1 + 1/32."""
    m = DecoderShape(1, 16, 2, 8, 32, 16, pattern="M", mamba=MambaShape(2, 4, 4, 1, 4, 8))
    mixed = LowPrecision(NVFP4, LayerRules(mxfp8=("out_proj",)))
    assert recipe_input_savings("mamba", m, 1, 2, mixed) == 128 * 1.4375 + 64 * (2 - 1.03125)
    plain = LowPrecision(NVFP4, LayerRules())
    assert recipe_input_savings("mamba", m, 1, 2, plain) == (128 + 64) * 1.4375

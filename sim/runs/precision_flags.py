"""What a low-precision run keeps in 16 bits, from its flags: ``training.precision_options``'
``first_last_layers_bf16`` (with the counts), ``mtp_bf16`` and ``bf16_linears``
(:class:`~sim.config.PrecisionOptions`).

* ``--first-last-layers-bf16``, ``--num-layers-at-start-in-bf16``,
  ``--num-layers-at-end-in-bf16`` (Megatron-LM; default 1 and 1): the first and last layers of
  the decoder, a hybrid model's Mamba, attention and MoE layers counted alike, run outside the
  FP8/FP4 context (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/fp4_utils.py:247-263``
  ``get_fp4_context``, ``fp8_utils.py:711-724`` ``is_first_last_bf16_layer``; the hybrid stack
  asks per layer number, ``models/hybrid/hybrid_block.py:128-130``);
* ``keep-mtp-spec-in-bf16`` (Megatron-Bridge's model field ``keep_mtp_spec_in_bf16``,
  NVIDIA-NeMo/Megatron-Bridge@067f987df0 ``src/megatron/bridge/models/hybrid/
  hybrid_provider.py:167``, set by the Nemotron 3 performance recipes, e.g.
  ``perf_recipes/nemotronh/gb300/nemotronh.py:540``): the MTP depths in 16 bits;
* ``--fp8-dot-product-attention`` (Megatron-LM; Megatron-Bridge's ``fp8_dot_product_attention``,
  set by the GPT-OSS MXFP8 recipes for GB200/GB300, NVIDIA-NeMo/Megatron-Bridge@067f987df0
  ``perf_recipes/gpt_oss/common.py:44``): the attention core in FP8 too
  (:class:`~sim.compute.precision_rules.LayerRules`, ``attention``);
* ``fp8-output-proj`` (Megatron-Bridge's model field ``fp8_output_proj``, Megatron-Core's
  ``TransformerConfig.fp8_output_proj`` from NVIDIA/Megatron-LM@d0b3b775, the megatron-core of
  Megatron-Bridge v0.5.0 (26.06) and later; set by the GB200/GB300 MXFP8 recipes of GPT-OSS
  120B, ``perf_recipes/gpt_oss/common.py:28``, and DeepSeek-V3, ``perf_recipes/deepseek/
  common.py:71``, NVIDIA-NeMo/Megatron-Bridge@067f987df0; traced from 26.06 on): the output
  layer's GEMMs in MXFP8 (:class:`~sim.compute.precision_rules.LayerRules`, ``head``); only
  with the MXFP8 recipe (Megatron-Core refuses it otherwise);
* ``te-version`` (the pseudo-flag of a Bridge row's container, :mod:`sim.runs.bridge_software`):
  ``te_version``, what a recipe's version-dependent kernels are;
* ``quant-recipe`` (Megatron-Bridge's ``quant_recipe=load_quantization_recipe(<file>)``): a
  Transformer Engine quantization config whose ``bf16`` matchers keep modules in 16 bits and
  whose ``mxfp8`` matchers run modules in MXFP8 under another recipe (``mxfp8_linears``),
  known files in :data:`QUANT_RECIPES`.
"""

from __future__ import annotations

from typing import Any

from sim.compute.precision import HIGH_PRECISION
from sim.runs.bridge_software import TE_FLAG
from sim.runs.megatron_reading import Reading
from sim.runs.record import ArgNote

NEMOTRON_TE_QUANT = (
    ("qkv", "proj", "latent_down", "latent_up"),
    True,
    "Megatron-Bridge's Nemotron 3 NVFP4 config (NVIDIA-NeMo/Megatron-Bridge@067f987df0 "
    "src/megatron/bridge/perf_recipes/nemotronh/te_quant.cfg): bf16 matchers '*.linear_qkv', "
    "'*.linear_proj', '*mlp.fc[12]_latent_proj', 'mtp.*' kept in 16 bits, its mxfp8 matcher "
    "'*mixer.out_proj' (Mamba's output projection) in MXFP8",
    ("out_proj",),
)
QUANT_RECIPES: dict[str, tuple[tuple[str, ...], bool, str, tuple[str, ...]]] = {
    "nemotronh/te_quant.cfg": NEMOTRON_TE_QUANT,
}
"""A quantization config (its path's tail) -> (linear layers in 16 bits, MTP in 16 bits, what
it says and what is approximated, linear layers in MXFP8)."""


def precision_flags(r: Reading, precision: str) -> dict[str, Any]:
    """The ``training.precision_options`` fields ``r``'s flags set for a run in ``precision``
    (module doc); {} in 16 bits."""
    out: dict[str, Any] = {}
    low = precision not in HIGH_PRECISION
    if r.switch("first-last-layers-bf16") and low:
        out["first_last_layers_bf16"] = True
        out["num_layers_at_start_in_bf16"] = r.int("num-layers-at-start-in-bf16", 1)
        out["num_layers_at_end_in_bf16"] = r.int("num-layers-at-end-in-bf16", 1)
    for flag in ("first-last-layers-bf16", "num-layers-at-start-in-bf16",
                 "num-layers-at-end-in-bf16"):  # fmt: skip
        r.mapped(flag, "training.precision_options: first and last layers in 16 bits")
    if r.switch("fp8-dot-product-attention") and low:
        out["fp8_attention"] = True
    r.mapped("fp8-dot-product-attention", "training.precision_options.fp8_attention")
    if r.switch("fp8-output-proj") and precision.endswith("mxfp8"):
        out["fp8_output_proj"] = True
    r.mapped("fp8-output-proj", "training.precision_options.fp8_output_proj (MXFP8 only)")
    if r.switch("keep-mtp-spec-in-bf16") and low:
        out["mtp_bf16"] = True
    r.mapped("keep-mtp-spec-in-bf16", "training.precision_options.mtp_bf16")
    te = r.text(TE_FLAG)
    if te and low:
        out["te_version"] = te
    r.mapped(TE_FLAG, "training.precision_options.te_version (the container's)")
    path = r.text("quant-recipe")
    if path and low:
        known = next((v for k, v in QUANT_RECIPES.items() if path.strip("'\"").endswith(k)), None)
        if known is None:
            r.unmapped("quant-recipe", "unknown quantization config: its modules run the recipe")
            return out
        linears, mtp, what, mx = known
        out["bf16_linears"] = list(linears)
        if mx and not precision.endswith("mxfp8"):
            out["mxfp8_linears"] = list(mx)
        out["mtp_bf16"] = out.get("mtp_bf16", False) or mtp
        r.notes.append(ArgNote("quant-recipe", path, "approximated", what))
    return out

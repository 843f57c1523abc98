"""A measured-data CSV row's model as Megatron-LM flags, for
:func:`sim.runs.measured_csv.row_run`: the shape columns (or the model's published shape,
:mod:`sim.runs.model_shapes`), the MLA ranks, and the traits a model's name implies that the
columns cannot say (:data:`NAMED_TRAITS`); and the cell readers the CSV reader shares."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sim.runs.model_shapes import shape_flags

MLA_RANKS = {
    "q-lora-rank": 1536, "kv-lora-rank": 512, "qk-head-dim": 128, "qk-pos-emb-head-dim": 64,
    "v-head-dim": 128,
}  # fmt: skip
"""MLA ranks of DeepSeek-V2, DeepSeek-V3 and Kimi K2 (their Hugging Face ``config.json``:
``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
``v_head_dim``; ``examples/hf/deepseek-v{2,3}-config.json``)."""
NAMED_TRAITS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("qwen3", {"qk-layernorm": True, "moe-router-load-balancing-type": "aux_loss",
               "moe-aux-loss-coeff": "1e-3"}),
    ("deepseekv3", {"moe-router-load-balancing-type": "seq_aux_loss",
                    "moe-aux-loss-coeff": "1e-4", "moe-router-enable-expert-bias": True}),
    ("kimi_k2", {"moe-router-load-balancing-type": "seq_aux_loss", "moe-aux-loss-coeff": "1e-3",
                 "moe-router-enable-expert-bias": True}),
    ("tokendrop", {"moe-expert-capacity-factor": "1.0"}),
    ("w/ mtp", {"mtp-num-layers": "1"}),
    ("gpt oss", {"window-size": "128 0", "window-attn-skip-freq": "2", "softmax-type":
                 "learnable", "add-qkv-bias": True, "add-bias-linear": True,
                 "activation-func-clamp-value": "7.0", "position-embedding-type": "yarn",
                 "yarn-rotary-scaling-factor": "32.0"}),
)  # fmt: skip
"""Traits the columns cannot say, by a (lower-case) part of the model name: Qwen3's QK-norm
(``Qwen3Config``: q_norm and k_norm), token-drop rows (a capacity factor), DeepSeek-V3 with its
MTP layer, GPT-OSS's attention (examples/hf/gpt-oss-120b-config.json: ``sliding_window`` 128
on every other layer, ``layer_types`` starting with a windowed one, ``attention_bias``, a
learned sink per head; NeMo ``gpt_oss.py`` GPTOSSConfig: ``window_size (128, 0)``,
``window_attn_skip_freq 2``, ``softmax_type learnable``, ``add_qkv_bias``) and its biased
experts (``add_bias_linear``, HF ``GptOssExperts`` ``down_proj_bias``: :mod:`sim.compute.moe`,
``MoEShape.bias``) with their clamped GLU (HF ``swiglu_limit`` 7.0; the Bridge's
``activation_func_clamp_value = 7.0``: :mod:`sim.compute.glu_clamp`) and its YaRN rotary
embedding (HF ``rope_scaling`` yarn, factor 32; the bridge's ``position_embedding_type =
"yarn"``, ``yarn_rotary_scaling_factor = 32.0``: :mod:`sim.compute.rope_unfused`). The MoE
routers' balancing losses (:mod:`sim.compute.router_fused`; read only with experts) as the
Bridge's model bridges set them (NVIDIA-NeMo/Megatron-Bridge@067f987
``src/megatron/bridge/models/qwen/qwen3_moe_bridge.py`` lines 64-65: ``aux_loss`` 1e-3;
``deepseek/deepseek_v3_bridge.py`` lines 68-71: ``seq_aux_loss``, HF ``aux_loss_alpha`` else
1e-4; ``kimi/kimi_bridge.py`` lines 60 and 86: ``seq_aux_loss`` 1e-3); GPT-OSS's performance
recipes set the coefficient to 0 (``perf_recipes/gpt_oss/common.py`` line 89). The DeepSeek-V3
and Kimi K2 bridges also set ``moe_router_enable_expert_bias = True`` (``deepseek_v3_bridge.py``
line 74, ``kimi_bridge.py`` line 62): the step's expert-bias update
(:mod:`sim.parallel.router_bias`); the Qwen3-MoE and GPT-OSS bridges leave it off."""


def cell_float(v: Any) -> float | None:
    """A cell as a finite float, or None (empty, text, NaN, infinite)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def cell_int(v: Any) -> int | None:
    """A cell as an integer, or None (not a finite whole number)."""
    x = cell_float(v)
    return int(x) if x is not None and x == int(x) else None


def known_shape(row: pd.Series) -> dict[str, Any] | None:
    """The published shape of a row whose shape columns are empty (:mod:`sim.runs.model_shapes`)."""
    if cell_int(row.get("layers")) is not None and cell_int(row.get("hidden")) is not None:
        return None
    return shape_flags(str(row.get("model", "")))


def row_shape_flags(row: pd.Series) -> dict[str, Any]:
    """Megatron-LM flags of a row's model: its published shape (:func:`known_shape`) or its
    shape columns (layers, widths, heads, GQA, experts, MLA), the Llama-like defaults the
    measured sources share (SwiGLU, untied embeddings, RoPE, RMSNorm), and the traits its
    name implies (:data:`NAMED_TRAITS`)."""
    known = known_shape(row)
    if known is not None:
        return known | (
            {"seq-length": cell_int(row.get("seq_len"))} if cell_int(row.get("seq_len")) else {}
        )
    f: dict[str, Any] = {}
    for col, flag in (("layers", "num-layers"), ("hidden", "hidden-size"),
                      ("ffn_hidden", "ffn-hidden-size"), ("heads", "num-attention-heads"),
                      ("seq_len", "seq-length"), ("vocab", "vocab-size"),
                      ("head_dim", "kv-channels")):  # fmt: skip
        if cell_int(row.get(col)) is not None:
            f[flag] = cell_int(row.get(col))
    kv, heads = cell_int(row.get("kv_heads")), cell_int(row.get("heads"))
    if kv and heads and kv < heads:
        f["group-query-attention"], f["num-query-groups"] = True, kv
    experts = cell_int(row.get("moe_experts"))
    if experts:
        f["num-experts"] = experts
        f["moe-router-topk"] = cell_int(row.get("moe_topk")) or 2
        f["moe-ffn-hidden-size"] = cell_int(row.get("moe_ffn_hidden")) or f.get("ffn-hidden-size")
        f["moe-shared-expert-intermediate-size"] = cell_int(row.get("moe_shared_ffn")) or 0
        dense, layers = cell_int(row.get("moe_dense_layers")) or 0, f.get("num-layers", 0)
        f["moe-layer-freq"] = f"([0]*{dense}+[1]*{max(0, layers - dense)})"
        f["moe-token-dispatcher-type"] = "alltoall"
    if str(row.get("attention", "")).lower() == "mla":
        f["multi-latent-attention"] = True
        f.update(MLA_RANKS)
    f.update({"swiglu": True, "untie-embeddings-and-output-weights": True,
              "position-embedding-type": "rope", "normalization": "RMSNorm"})  # fmt: skip
    name = str(row.get("model", "")).lower()
    for part, traits in NAMED_TRAITS:
        if part in name:
            f.update(traits)
    if "hybrid" in str(row.get("family", "")):
        f["is-hybrid-model"] = True
    return f

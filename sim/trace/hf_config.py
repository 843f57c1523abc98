"""A Hugging Face ``config.json`` of a decoder LM as a :class:`~sim.compute.decoder.DecoderShape`.

Read offline (plain JSON; ``transformers`` is not needed). Field names are those of
``transformers``' configuration classes:

* Llama-like (``llama``, ``mistral``, ``qwen2``, ``qwen3``): ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``,
  ``num_hidden_layers``, ``vocab_size``, an explicit ``head_dim`` where given (Qwen3: ``head_dim
  x heads`` need not be ``hidden``), ``tie_word_embeddings``; Qwen3 adds QK-norm
  (``Qwen3Attention.q_norm`` / ``k_norm``);
* Mixtral (``mixtral``): ``num_local_experts`` experts of width ``intermediate_size``,
  ``num_experts_per_tok``; every layer MoE;
* Qwen2-MoE / Qwen3-MoE (``qwen2_moe``, ``qwen3_moe``): ``num_experts`` of width
  ``moe_intermediate_size``, ``num_experts_per_tok``, Qwen2-MoE's one shared expert of width
  ``shared_expert_intermediate_size``, MoE every ``decoder_sparse_step`` layers except
  ``mlp_only_layers`` (only an empty list is supported); dense width ``intermediate_size``;
  Qwen3-MoE with QK-norm and ``head_dim``;
* DeepSeek-V2/V3 and Kimi K2 (``deepseek_v2``, ``deepseek_v3``, ``kimi_k2``): ``n_routed_experts``
  of width ``moe_intermediate_size``, ``n_shared_experts`` of the same width,
  ``num_experts_per_tok``, the first ``first_k_dense_replace`` layers dense (width
  ``intermediate_size``), MoE every ``moe_layer_freq``; MLA with ``q_lora_rank`` (None: no
  query compression), ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``; ``num_nextn_predict_layers`` multi-token-prediction depths when asked
  (``mtp=True``; Megatron trains them only with ``--mtp-num-layers``, off by default);
  ``topk_method: noaux_tc`` (DeepSeek-V3, Kimi K2: the gate's ``e_score_correction_bias``)
  is aux-loss-free balancing, Megatron-Core's router expert bias, which Megatron-Bridge's
  DeepSeek-V3 and Kimi bridges turn on (NVIDIA-NeMo/Megatron-Bridge@067f987df0
  ``src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py`` line 74,
  ``kimi/kimi_bridge.py`` line 62; ``deepseek/common.py`` line 47 maps the gate's
  ``e_score_correction_bias`` onto the router's ``expert_bias``): ``MoEShape.router_expert_bias``;
* GPT-OSS (``gpt_oss``, ``GptOssConfig``): ``head_dim``, ``attention_bias``, attention sinks,
  ``layer_types`` (``sliding_attention`` / ``full_attention``; default alternating, sliding
  first) with window ``sliding_window``; ``num_local_experts`` biased experts of width
  ``intermediate_size``, ``num_experts_per_tok`` (``experts_per_token``), a clamped GLU with
  ``swiglu_limit`` (:mod:`sim.compute.glu_clamp`); YaRN ``rope_scaling`` applied unfused
  (:mod:`sim.compute.rope_unfused`); every layer MoE;
* Nemotron-H / Nemotron 3 (``nemotron_h``): the layers of ``hybrid_override_pattern``
  (``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE); Mamba-2 ``mamba_num_heads``,
  ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``, ``conv_kernel``, ``chunk_size``;
  attention ``head_dim`` (``attention_head_dim``), no rotary embedding (Megatron-Bridge's
  Nemotron-H provider: ``position_embedding_type = "none"``); squared-ReLU MLPs of width
  ``intermediate_size`` (``mlp_hidden_act: relu2``: up and down only); MoE layers with
  ``n_routed_experts`` of width ``moe_intermediate_size`` (squared ReLU) and shared experts of
  total width ``moe_shared_expert_intermediate_size``, their router with an expert bias
  (``nemotron_h_bridge.py`` line 312 sets ``moe_router_enable_expert_bias``; line 425 maps
  the checkpoint's ``mixer.gate.e_score_correction_bias`` onto it).

A config states the model, not the training run: the sequence length (``max_position_embeddings``
is the model's limit) and LoRA (:func:`read_adapter_config`, PEFT's ``adapter_config.json``) come
from the caller. Bad fields raise :class:`~sim.trace.hf_checks.ConfigError` naming the field
(zero or negative expert counts, a top-k above them, a negative ``kv_lora_rank``,
``moe_layer_freq`` 0, a negative ``first_k_dense_replace``, a pattern that does not match the
layers, ...); :func:`read_config` turns it into an ``InputError`` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.compute.decoder import DecoderShape
from sim.compute.lora import TARGETS, LoRAShape
from sim.compute.mla import MLAShape
from sim.compute.moe_shape import MoEShape
from sim.compute.rope_unfused import yarn_concentration
from sim.compute.ssm import MambaShape
from sim.errors import InputError
from sim.trace.hf_checks import (
    MAX_EXPERTS,
    ConfigError,
    check_sizes,
    head_dim,
    non_negative,
    parameter_count,
    positive,
)

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", *MLA_TYPES, "gpt_oss")
HYBRID_TYPES = ("nemotron_h",)
SUPPORTED = LLAMA_LIKE + MOE_TYPES + HYBRID_TYPES
OTHER_MODELS = (
    "; another model: profile it with sim profile --model FILE.py:FUNC, a BERT encoder with "
    "sim profile --kind bert (docs/guides/own-model.md)"
)
"""What to do with a ``config.json`` of a model_type the reader does not know."""
QK_NORM = ("qwen3", "qwen3_moe")
LAYER_TYPES = {"sliding_attention": "S", "full_attention": "F"}

__all__ = ["SUPPORTED", "check_sizes", "parameter_count", "read_adapter_config", "read_config"]


def _moe(cfg: dict[str, Any], experts_key: str, width_key: str, **kw: Any) -> MoEShape:
    """A MoE shape from the config's expert count, top-k and width (fields checked)."""
    e = positive(cfg, experts_key, most=MAX_EXPERTS)
    k_key = next((k for k in ("num_experts_per_tok", "experts_per_token") if k in cfg), None)
    k = positive(cfg, k_key or "num_experts_per_tok")
    if k > e:
        raise ConfigError(f"{k_key} {k} is above the {e} experts ({experts_key})", k_key or "")
    return MoEShape(cfg["hidden_size"], e, k, positive(cfg, width_key), **kw)


def _qwen_moe(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    if cfg.get("mlp_only_layers"):
        raise ConfigError("mlp_only_layers other than [] are not supported", "mlp_only_layers")
    shared = non_negative(cfg, "shared_expert_intermediate_size") if kind == "qwen2_moe" else 0
    moe = _moe(cfg, "num_experts", "moe_intermediate_size", shared_ffn=shared)
    return {"moe": moe, "moe_every": positive(cfg, "decoder_sparse_step", 1)}


def _deepseek(cfg: dict[str, Any], mtp: bool) -> dict[str, Any]:
    width = positive(cfg, "moe_intermediate_size")
    shared = non_negative(cfg, "n_shared_experts") * width
    mla = MLAShape(
        non_negative(cfg, "q_lora_rank"),
        positive(cfg, "kv_lora_rank"),
        positive(cfg, "qk_nope_head_dim"),
        positive(cfg, "qk_rope_head_dim"),
        positive(cfg, "v_head_dim"),
    )
    bias = cfg.get("topk_method") == "noaux_tc"  # e_score_correction_bias (module doc)
    moe = _moe(cfg, "n_routed_experts", "moe_intermediate_size", shared_ffn=shared,
               router_expert_bias=bias)  # fmt: skip
    return {
        "moe": moe,
        "dense_layers": non_negative(cfg, "first_k_dense_replace"),
        "moe_every": positive(cfg, "moe_layer_freq", 1),
        "mla": mla,
        "kv_heads": None,
        "mtp_layers": non_negative(cfg, "num_nextn_predict_layers") if mtp else 0,
    }


def _gpt_oss(cfg: dict[str, Any], n: int) -> dict[str, Any]:
    types = cfg.get("layer_types") or ["sliding_attention", "full_attention"]
    if not isinstance(types, list) or any(t not in LAYER_TYPES for t in types):
        raise ConfigError(f"layer_types must list {' or '.join(LAYER_TYPES)}", "layer_types")
    return {
        "moe": _moe(
            cfg,
            "num_local_experts",
            "intermediate_size",
            bias=True,
            clamp=bool(cfg.get("swiglu_limit")),
        ),  # clamped GLU: glu_clamp
        "attn_bias": bool(cfg.get("attention_bias", True)),
        "sinks": True,
        "window": non_negative(cfg, "sliding_window"),
        "window_pattern": "".join(LAYER_TYPES[t] for t in types),
        "rope_unfused": _yarn_scaled(cfg),
    }


def _yarn_scaled(cfg: dict[str, Any]) -> bool:
    """YaRN ``rope_scaling`` with a factor whose concentration is not 1 and no ``mscale``
    overrides: Megatron-Core applies it unfused (:mod:`sim.compute.rope_unfused`)."""
    rope = cfg.get("rope_scaling") or {}
    if not isinstance(rope, dict) or rope.get("rope_type", rope.get("type")) != "yarn":
        return False
    if rope.get("mscale") is not None and rope.get("mscale_all_dim") is not None:
        return False
    return yarn_concentration(float(rope.get("factor") or 1.0)) != 1.0


def _nemotron_h(cfg: dict[str, Any], n: int) -> dict[str, Any]:
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != n or set(pattern) - set("M*-E"):
        raise ConfigError(
            f"hybrid_override_pattern must be {n} characters of M, *, - and E "
            f"(num_hidden_layers), got {pattern!r}",
            "hybrid_override_pattern",
        )
    try:
        mamba = MambaShape(
            positive(cfg, "mamba_num_heads"),
            positive(cfg, "mamba_head_dim"),
            positive(cfg, "ssm_state_size"),
            positive(cfg, "n_groups", 1),
            positive(cfg, "conv_kernel", 4),
            positive(cfg, "chunk_size", 128),
        )
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(str(exc), "n_groups") from None
    out: dict[str, Any] = {"pattern": pattern, "mamba": mamba, "rotary": False}
    out["gated_mlp"] = cfg.get("mlp_hidden_act", "relu2") not in ("relu2", "relu")
    if "E" in pattern:
        shared = non_negative(cfg, "moe_shared_expert_intermediate_size")
        out["moe"] = _moe(
            cfg, "n_routed_experts", "moe_intermediate_size", shared_ffn=shared, gated=False,
            router_expert_bias=True,
        )  # fmt: skip
    return out


def _family(cfg: dict[str, Any], kind: str, n: int, mtp: bool) -> dict[str, Any]:
    if kind == "mixtral":
        return {"moe": _moe(cfg, "num_local_experts", "intermediate_size")}
    if kind in ("qwen2_moe", "qwen3_moe"):
        return _qwen_moe(cfg, kind)
    if kind in MLA_TYPES:
        return _deepseek(cfg, mtp)
    if kind == "gpt_oss":
        return _gpt_oss(cfg, n)
    if kind in HYBRID_TYPES:
        return _nemotron_h(cfg, n)
    return {}


def shape_from_config(
    cfg: dict[str, Any],
    seq_len: int,
    *,
    layers: int | None = None,
    attention: str = "flash",
    mtp: bool = False,
    lora: LoRAShape | None = None,
) -> DecoderShape:
    """The :class:`DecoderShape` of a parsed ``config.json`` at training length ``seq_len``
    (module doc). ``layers`` overrides ``num_hidden_layers``: a trimmed model, as benchmarks
    run (the first ``layers`` of a hybrid pattern); ``mtp`` adds DeepSeek-V3's
    multi-token-prediction depths; ``lora`` trains adapters on the frozen model.

    Raises:
        ConfigError: an unsupported ``model_type`` or a missing or invalid field (named).
        ValueError: a shape the fields do not make consistent.
    """
    kind = cfg.get("model_type")
    if kind not in SUPPORTED:
        raise ConfigError(
            f"model_type {kind!r} is not supported; use one of {', '.join(SUPPORTED)}"
            + OTHER_MODELS,
            "model_type",
        )
    n = positive(cfg, "num_hidden_layers")
    kv = cfg.get("num_key_value_heads")
    shape: dict[str, Any] = {
        "hidden": positive(cfg, "hidden_size"),
        "heads": positive(cfg, "num_attention_heads"),
        "vocab": positive(cfg, "vocab_size"),
        "ffn_hidden": positive(cfg, "intermediate_size"),
        "kv_heads": None if kv is None else positive(cfg, "num_key_value_heads"),
        "head_dim": head_dim(cfg),
        "qk_norm": kind in QK_NORM,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        **_family(cfg, kind, n, mtp),
    }
    trimmed = layers or n
    if shape.get("pattern"):
        shape["pattern"] = shape["pattern"][:trimmed]
    return DecoderShape(layers=trimmed, seq_len=seq_len, attention=attention, lora=lora, **shape)


def _load(path: str | Path) -> dict[str, Any]:
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not a readable JSON file: {exc}", file=str(path)) from None
    if not isinstance(cfg, dict):
        raise InputError("must be a JSON object", file=str(path))
    return cfg


def read_config(path: str | Path, seq_len: int, **kw: Any) -> DecoderShape:
    """:func:`shape_from_config` of the ``config.json`` at ``path``.

    Raises:
        InputError: unreadable JSON, bad sizes (:func:`check_sizes`), an unsupported or
            invalid field: naming the file and the field.
    """
    cfg = _load(path)
    if cfg.get("model_type") not in SUPPORTED:
        raise InputError(
            f"model_type {cfg.get('model_type')!r} is not supported; use one of "
            f"{', '.join(SUPPORTED)}" + OTHER_MODELS,
            file=str(path),
            field="model_type",
        )
    check_sizes(cfg, str(path))
    try:
        return shape_from_config(cfg, seq_len, **kw)
    except ConfigError as exc:
        raise InputError(str(exc), file=str(path), field=exc.field) from None
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc), file=str(path), field="model_type") from None


def read_adapter_config(path: str | Path) -> LoRAShape:
    """The LoRA of a PEFT ``adapter_config.json`` (``peft_type: LORA``, ``r``,
    ``target_modules``: a list of module names, or ``all-linear``).

    Raises:
        InputError: not a LoRA config, a bad ``r``, or targets other than
            :data:`~sim.compute.lora.TARGETS`, naming the field.
    """
    cfg = _load(path)
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise InputError("only LoRA adapters are modelled", file=str(path), field="peft_type")
    targets = cfg.get("target_modules") or ["q_proj", "v_proj"]
    if targets == "all-linear":
        targets = list(TARGETS)
    if isinstance(targets, str) or any(t not in TARGETS for t in targets):
        raise InputError(
            f"target_modules must list module names of {', '.join(TARGETS)} or be all-linear",
            file=str(path),
            field="target_modules",
        )
    try:
        return LoRAShape(positive(cfg, "r"), tuple(targets))
    except ConfigError as exc:
        raise InputError(str(exc), file=str(path), field=exc.field) from None


def is_supported(path: str | Path) -> bool:
    """Whether ``path`` is a readable ``config.json`` of a model type this module reads."""
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("model_type") in SUPPORTED

"""A Hugging Face ``config.json`` of a decoder LM as a :class:`~sim.compute.decoder.DecoderShape`.

Read offline (plain JSON; ``transformers`` is not needed). Field names are those of
``transformers``' configuration classes:

* Llama-like (``llama``, ``mistral``, ``qwen2``, ``qwen3``): ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``,
  ``num_hidden_layers``, ``vocab_size``;
* Mixtral (``mixtral``, ``MixtralConfig``): ``num_local_experts`` experts of width
  ``intermediate_size``, ``num_experts_per_tok``; every layer MoE;
* Qwen2-MoE (``qwen2_moe``, ``Qwen2MoeConfig``): ``num_experts`` of width
  ``moe_intermediate_size``, ``num_experts_per_tok``, one shared expert of width
  ``shared_expert_intermediate_size``, MoE every ``decoder_sparse_step`` layers except
  ``mlp_only_layers`` (only an empty list is supported); dense width ``intermediate_size``;
* DeepSeek-V2/V3 (``deepseek_v2``, ``deepseek_v3``): ``n_routed_experts`` of width
  ``moe_intermediate_size``, ``n_shared_experts`` shared experts of the same width,
  ``num_experts_per_tok``, the first ``first_k_dense_replace`` layers dense (width
  ``intermediate_size``), MoE every ``moe_layer_freq``; MLA with ``q_lora_rank`` (None: no
  query compression), ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``. DeepSeek-V3's multi-token-prediction module (``num_nextn_predict_layers``) is
  not modelled (the report's 671B excludes it).

The training sequence length is not in a config (``max_position_embeddings`` is the model's
limit): the caller gives it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.compute.decoder import DecoderShape
from sim.compute.mla import MLAShape
from sim.compute.moe import MoEShape
from sim.errors import InputError

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
MOE_TYPES = ("mixtral", "qwen2_moe", "deepseek_v2", "deepseek_v3")
SUPPORTED = LLAMA_LIKE + MOE_TYPES


def _moe(cfg: dict[str, Any], kind: str, h: int) -> tuple[MoEShape, int, int]:
    """``(moe, dense_layers, moe_every)`` of a MoE config."""
    if kind == "mixtral":
        moe = MoEShape(
            h, cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["intermediate_size"]
        )
        return moe, 0, 1
    if kind == "qwen2_moe":
        if cfg.get("mlp_only_layers"):
            raise ValueError("mlp_only_layers other than [] are not supported")
        moe = MoEShape(
            h,
            cfg["num_experts"],
            cfg["num_experts_per_tok"],
            cfg["moe_intermediate_size"],
            shared_ffn=cfg.get("shared_expert_intermediate_size", 0),
        )
        return moe, 0, cfg.get("decoder_sparse_step", 1)
    width = cfg["moe_intermediate_size"]
    moe = MoEShape(
        h,
        cfg["n_routed_experts"],
        cfg["num_experts_per_tok"],
        width,
        shared_ffn=(cfg.get("n_shared_experts") or 0) * width,
    )
    return moe, cfg.get("first_k_dense_replace", 0), cfg.get("moe_layer_freq", 1)


def _mla(cfg: dict[str, Any]) -> MLAShape:
    return MLAShape(
        cfg.get("q_lora_rank") or 0,
        cfg["kv_lora_rank"],
        cfg["qk_nope_head_dim"],
        cfg["qk_rope_head_dim"],
        cfg["v_head_dim"],
    )


def shape_from_config(
    cfg: dict[str, Any], seq_len: int, *, layers: int | None = None, attention: str = "flash"
) -> DecoderShape:
    """The :class:`DecoderShape` of a parsed ``config.json`` at training length ``seq_len``
    (``layers`` overrides ``num_hidden_layers``: a trimmed model, as benchmarks run).

    Raises:
        ValueError: an unsupported ``model_type`` or a missing/invalid field (KeyError is
            turned into ValueError naming the field).
    """
    kind = cfg.get("model_type")
    if kind not in SUPPORTED:
        raise ValueError(f"model_type {kind!r} is not supported; use one of {', '.join(SUPPORTED)}")
    try:
        h, a = cfg["hidden_size"], cfg["num_attention_heads"]
        moe, dense, every = _moe(cfg, kind, h) if kind in MOE_TYPES else (None, 0, 1)
        return DecoderShape(
            layers=layers or cfg["num_hidden_layers"],
            hidden=h,
            heads=a,
            seq_len=seq_len,
            vocab=cfg["vocab_size"],
            ffn_hidden=cfg["intermediate_size"],
            kv_heads=None if kind.startswith("deepseek") else cfg.get("num_key_value_heads"),
            attention=attention,
            mla=_mla(cfg) if kind.startswith("deepseek") else None,
            moe=moe,
            dense_layers=dense,
            moe_every=every,
        )
    except KeyError as exc:
        raise ValueError(f"missing field {exc.args[0]!r}") from None


SIZES = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
)
"""Sizes a Llama-like config must give as positive integers (``num_key_value_heads`` may be
absent: then it equals the heads)."""
MAX_PARAMETERS = 10**13
"""Largest model accepted (an assumption, 10x beyond the largest published dense models): a
config beyond it is a typo, not a model."""


def parameter_count(cfg: dict[str, Any]) -> int:
    """Parameters of a Llama-like decoder from its ``config.json`` sizes (embedding; per layer
    the q/k/v/o projections with grouped KV heads, the gated MLP's three matrices and two
    norms; the final norm; an untied LM head).

    Example (Llama-2-7B: 6.74 B):
        >>> parameter_count(dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        ...     num_attention_heads=32, vocab_size=32000))
        6738415616
    """
    h, i, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    v = cfg["vocab_size"]
    layer = 2 * h * h + 2 * h * (h // heads) * kv + 3 * h * i + 2 * h
    head = 0 if cfg.get("tie_word_embeddings") else v * h
    return v * h + n * layer + h + head


def check_sizes(data: dict[str, Any], file: str) -> None:
    """The sizes of a Llama-like config, before ``transformers`` builds anything.

    Raises:
        InputError: naming the field: a size missing or not a positive integer, heads not
            dividing the hidden size, KV heads not dividing the heads, or a model beyond
            :data:`MAX_PARAMETERS`.
    """
    for key in SIZES:
        v = data.get(key)
        if v is None and key in ("num_key_value_heads", "max_position_embeddings"):
            continue
        if key not in data:
            raise InputError(f"missing field {key!r} (a positive integer)", file=file, field=key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", file=file, field=key)
    h, heads = data["hidden_size"], data["num_attention_heads"]
    kv = (
        heads
        if str(data.get("model_type", "")).startswith("deepseek")
        else data.get("num_key_value_heads") or heads
    )  # DeepSeek's MLA has no KV-head groups
    if h % heads:
        raise InputError(
            f"hidden_size {h} is not a multiple of num_attention_heads {heads}",
            file=file,
            field="num_attention_heads",
        )
    if heads % kv:
        raise InputError(
            f"num_key_value_heads {kv} must divide num_attention_heads {heads} (each KV head "
            "serves a group of query heads)",
            file=file,
            field="num_key_value_heads",
        )
    n = parameter_count(data)
    if n > MAX_PARAMETERS:
        largest = max((k for k in SIZES if isinstance(data.get(k), int)), key=lambda k: data[k])
        raise InputError(
            f"describes {n:.3g} parameters, more than the {MAX_PARAMETERS:.0e} accepted; check "
            f"its sizes ({largest} = {data[largest]:,})",
            file=file,
            field=largest,
        )


def read_config(path: str | Path, seq_len: int, **kw: Any) -> DecoderShape:
    """:func:`shape_from_config` of the ``config.json`` at ``path``.

    Raises:
        InputError: unreadable JSON, bad sizes (:func:`check_sizes`, naming the field) or an
            unsupported / incomplete config (naming the file).
    """
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not a readable config.json: {exc}", file=str(path)) from None
    if not isinstance(cfg, dict):
        raise InputError("a config.json must be a JSON object", file=str(path))
    if cfg.get("model_type") not in SUPPORTED:
        raise InputError(
            f"model_type {cfg.get('model_type')!r} is not supported; use one of "
            f"{', '.join(SUPPORTED)}",
            file=str(path),
            field="model_type",
        )
    check_sizes(cfg, str(path))
    try:
        return shape_from_config(cfg, seq_len, **kw)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc), file=str(path), field="model_type") from None


def is_supported(path: str | Path) -> bool:
    """Whether ``path`` is a readable ``config.json`` of a model type this module reads."""
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("model_type") in SUPPORTED

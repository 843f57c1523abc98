"""Checks of a Hugging Face ``config.json`` before pipesim or ``transformers`` builds anything.

:class:`ConfigError` names the config field at fault; :func:`positive` and :func:`non_negative`
read one field; :func:`check_sizes` checks a Llama-like config's sizes and its parameter count
(:func:`parameter_count`) against :data:`MAX_PARAMETERS`.
"""

from __future__ import annotations

import difflib
from typing import Any

from sim.errors import InputError

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
MAX_EXPERTS = 65536
"""Most routed experts accepted per layer (an assumption: 128x the largest published counts,
Kimi K2's 384 and Nemotron 3 Super's 512): a config beyond it is a typo."""


class ConfigError(ValueError):
    """A config field that cannot be read as a model; ``field`` names it."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _near(cfg: dict[str, Any], key: str) -> str:
    """``" (the config has 'num_hidden_layer': a misspelling of it?)"`` for a config key
    close to the missing ``key`` (a hand-written config's typo), else empty."""
    close = difflib.get_close_matches(key, [k for k in cfg if isinstance(k, str)], n=1, cutoff=0.8)
    return f" (the config has {close[0]!r}: a misspelling of it?)" if close else ""


def positive(cfg: dict[str, Any], key: str, default: Any = ..., most: int | None = None) -> int:
    """``cfg[key]`` as a positive integer (``default`` when absent, if given; at most
    ``most``).

    Raises:
        ConfigError: missing, not a positive integer, or above ``most``, naming ``key``.
    """
    if key not in cfg or cfg[key] is None:
        if default is ...:
            raise ConfigError(f"missing field {key!r} (a positive integer){_near(cfg, key)}", key)
        return default
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{key} must be a positive integer, got {v!r}", key)
    if most is not None and v > most:
        raise ConfigError(f"{key} {v:,} is beyond the {most:,} accepted; check the config", key)
    return v


def non_negative(cfg: dict[str, Any], key: str, default: int = 0) -> int:
    """``cfg[key]`` as an integer >= 0 (``default`` when absent or null).

    Raises:
        ConfigError: not an integer >= 0, naming ``key``.
    """
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{key} must be an integer >= 0, got {v!r}", key)
    return v


def head_dim(cfg: dict[str, Any]) -> int | None:
    """The config's explicit per-head width (``head_dim``, Nemotron-H-8B's
    ``attention_head_dim``), or None when it derives from ``hidden_size / heads``.

    Raises:
        ConfigError: present but not a positive integer.
    """
    for key in ("head_dim", "attention_head_dim"):
        if cfg.get(key) is not None:
            return positive(cfg, key)
    return None


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
    hd = cfg.get("head_dim") or h // heads
    layer = 2 * h * heads * hd + 2 * h * hd * kv + 3 * h * i + 2 * h
    head = 0 if cfg.get("tie_word_embeddings") else v * h
    return v * h + n * layer + h + head


def check_sizes(data: dict[str, Any], file: str) -> None:
    """The sizes of a Llama-like config, before ``transformers`` builds anything.

    Raises:
        InputError: naming the field: a size missing or not a positive integer, heads not
            dividing the hidden size (without an explicit ``head_dim``), KV heads not dividing
            the heads, or a model beyond :data:`MAX_PARAMETERS`.
    """
    for key in SIZES:
        v = data.get(key)
        near = _near(data, key) if key not in data else ""
        if near:  # a typo of an optional one too: not MHA
            raise InputError(f"missing field {key!r}{near}", file=file, field=key)
        if v is None and key in ("num_key_value_heads", "max_position_embeddings"):
            continue
        if key not in data:
            raise InputError(
                f"missing field {key!r} (a positive integer): every config.json of a Llama-like "
                f"decoder has it (model_type {data.get('model_type')!r}); use the model's whole "
                "config.json as published, or, for a model without it, profile the model as a "
                "function, --model FILE.py:FUNC (docs/guides/own-model.md)",
                file=file,
                field=key,
            )
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", file=file, field=key)
    h, heads = data["hidden_size"], data["num_attention_heads"]
    kv = (
        heads
        if str(data.get("model_type", "")).startswith("deepseek")
        else data.get("num_key_value_heads") or heads
    )  # DeepSeek's MLA has no KV-head groups
    if h % heads and not data.get("head_dim"):
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

"""Hugging Face decoder models from a local ``config.json``: random weights, nothing downloaded.

``sim profile --model path/to/config.json --seq-len 128 -b 4`` builds the model with
``AutoModelForCausalLM.from_config`` (``transformers`` is an optional extra:
``pip install -e '.[hf]'``) and exposes it as a layer chain :class:`HFChain`:
``embed, layer0 ... layer{N-1}, norm, lm_head``. Each decoder layer computes its rotary
embeddings from the sequence length of its input (the model's shared ``rotary_emb``; it has no
parameters), and attention is SDPA with no mask, i.e. causal, so one tensor ``[b, s, hidden]``
flows between layers and the chain cuts anywhere.

Supported: decoders laid out like Llama (``model.embed_tokens``, ``model.layers``,
``model.norm``, ``model.rotary_emb``, ``lm_head``): Llama, Mistral, Qwen2/3 and the like.
Models that scale the embeddings in their own forward (Gemma) are not reproduced exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sim.errors import InputError
from sim.trace.hf_config import check_sizes, parameter_count

LAYOUT = ("model.embed_tokens", "model.layers", "model.norm", "model.rotary_emb", "lm_head")


class _Embed(nn.Module):
    def __init__(self, embed: nn.Module):
        super().__init__()
        self.embed = embed

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids)


class _Decoder(nn.Module):
    """One decoder layer with its rotary embedding and causal SDPA: ``[b, s, h] -> [b, s, h]``."""

    def __init__(self, layer: nn.Module, rotary: nn.Module):
        super().__init__()
        self.layer = layer
        self.rotary = rotary  # shared by every layer; buffers only (inv_freq), no parameters
        self.positions: torch.Tensor | None = None  # a context-parallel rank's token positions

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.positions is not None:
            pos = self.positions.to(h.device).unsqueeze(0)
        else:
            pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        out = self.layer(
            h, attention_mask=None, position_ids=pos, position_embeddings=self.rotary(h, pos)
        )
        return out[0] if isinstance(out, tuple) else out


class HFChain(nn.Module):
    """A Llama-layout ``*ForCausalLM`` as a chain of top-level children (see module doc)."""

    def __init__(self, model: Any):
        super().__init__()
        inner = model.model
        self.embed = _Embed(inner.embed_tokens)
        for i, layer in enumerate(inner.layers):
            self.add_module(f"layer{i}", _Decoder(layer, inner.rotary_emb))
        self.norm = inner.norm
        self.lm_head = model.lm_head

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = ids
        for layer in self.children():
            x = layer(x)
        return x


def _available_bytes() -> float:
    """Memory the OS can give now (``MemAvailable``, proc(5)); infinite where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


def check_fits(cfg: Any, file: str) -> None:
    """A model built for real (not under fake tensors) must fit in this machine's memory.

    Raises:
        InputError: its fp32 weights (``from_config`` initialises in fp32) need more than the
            memory available; ``--for-gpu`` analyses it without memory.
    """
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(torch.empty(0), FakeTensor):
        return
    need = 4.0 * parameter_count(cfg.to_dict())
    have = _available_bytes()
    if need > have:
        raise InputError(
            f"{need / 2**30:.1f} GiB of fp32 weights to build with random weights, but "
            f"{have / 2**30:.1f} GiB are available here; analyse it with --for-gpu (fake "
            "tensors, no memory)",
            file=file,
            field="--model",
        )


def load_config(path: str | Path) -> Any:
    """A ``transformers`` config from a local ``config.json`` (no download).

    Raises:
        InputError: transformers is absent, the file is not JSON, has no known
            ``model_type``, or bad sizes (``sim.trace.hf_config.check_sizes``).
    """
    try:
        import transformers
    except ImportError:
        raise InputError(
            "Hugging Face models need transformers: pip install -e '.[hf]'", field="--model"
        ) from None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(
            f"not a readable config.json: {exc}", file=str(path), field="--model"
        ) from None
    kind = data.pop("model_type", None) if isinstance(data, dict) else None
    if not isinstance(kind, str):
        raise InputError('missing (e.g. "model_type": "llama")', file=str(path), field="model_type")
    check_sizes({"model_type": kind, **data}, str(path))
    try:
        return transformers.AutoConfig.for_model(kind, **data)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"model_type {kind!r}: {exc}", file=str(path), field="model_type"
        ) from None


def build(config: str, seq_len: int = 128, microbatch_size: int = 1):
    """``(HFChain, ids [b, s], targets [b, s])`` for the config at ``config``, random weights.

    Raises:
        InputError: see :func:`load_config`; the architecture is not laid out like Llama.
    """
    from transformers import AutoModelForCausalLM

    cfg = load_config(config)
    limit = getattr(cfg, "max_position_embeddings", None)
    if limit is not None and seq_len > limit:
        raise InputError(
            f"{seq_len} tokens, but the model's max_position_embeddings is {limit}",
            field="--seq-len",
        )
    check_fits(cfg, config)
    cfg._attn_implementation = "sdpa"
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    except (ValueError, KeyError) as exc:
        raise InputError(
            f"no causal-LM model for this config: {exc}", file=config, field="model_type"
        ) from None
    missing = [p for p in LAYOUT if _get(model, p) is None]
    if missing:
        raise InputError(
            f"{type(model).__name__} is not laid out like Llama (missing "
            f"{missing}); supported: decoders with {', '.join(LAYOUT)}",
            file=config,
            field="model_type",
        )
    ids = torch.randint(0, cfg.vocab_size, (microbatch_size, seq_len + 1))
    return HFChain(model), ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of ``logits [b, s, V]`` against ``targets [b, s]`` (fp32)."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

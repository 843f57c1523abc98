"""Context parallelism for Hugging Face decoders: each of ``cp`` ranks holds part of every
sequence, attention all-gathers the keys and values.

Megatron-LM / TransformerEngine split a sequence of ``s`` tokens into ``2cp`` chunks and give
rank ``i`` chunks ``i`` and ``2cp-1-i`` (the causal mask then gives every rank the same work:
:mod:`sim.tensor.context`). Every layer but attention is token-wise, so it runs on the rank's
``s/cp`` tokens unchanged (rotary embeddings at the tokens' global positions,
:attr:`backends.torch.hf._Decoder.positions`). Attention here is the ``all_gather`` variant
(``--cp-comm-type all_gather``; Llama 3, arXiv:2407.21783 §3.3.2): the rank's keys and values
are all-gathered over the group (``torch.distributed.nn.functional.all_gather``: the backward
reduce-scatters their gradients), and its queries attend to the keys at global positions not
after their own (the causal mask by position). torch's own context-parallel API
(``torch.distributed.tensor.experimental.context_parallel``) dispatches the CUDA SDPA kernels
(flash, efficient, cuDNN) only, so it does not run on CPU; this module is the CPU replay's.

Registered as the ``transformers`` attention implementation ``"cp_all_gather"``
(:func:`install`); the rank's group and positions are module state set by :func:`set_rank`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn.functional as F

NAME = "cp_all_gather"
_STATE: dict[str, Any] = {}


def positions(seq_len: int, cp: int, rank: int) -> torch.Tensor:
    """Global positions of rank ``rank``'s tokens: chunks ``rank`` and ``2cp-1-rank`` of ``2cp``.

    Raises:
        ValueError: ``2cp`` does not divide ``seq_len``.
    """
    if seq_len % (2 * cp):
        raise ValueError(f"seq_len {seq_len} must be divisible by 2 x cp = {2 * cp}")
    c = seq_len // (2 * cp)
    lo, hi = rank * c, (2 * cp - 1 - rank) * c
    return torch.cat([torch.arange(lo, lo + c), torch.arange(hi, hi + c)])


def set_rank(seq_len: int, cp: int, rank: int, group=None) -> torch.Tensor:
    """Set this process's context-parallel rank; returns its token positions."""
    _STATE.update(
        seq_len=seq_len,
        cp=cp,
        rank=rank,
        group=group,
        q=positions(seq_len, cp, rank),
        k=torch.cat([positions(seq_len, cp, r) for r in range(cp)]),
    )
    return _STATE["q"]


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """``query [b, a, t, d]``, ``key``/``value [b, g, t, d]`` of the rank's ``t`` tokens ->
    ``[b, t, a, d]`` attending to every rank's keys (module doc)."""
    cp = _STATE["cp"]
    keys = torch.cat(dist_nn.all_gather(key.contiguous(), group=_STATE["group"]), dim=2)
    vals = torch.cat(dist_nn.all_gather(value.contiguous(), group=_STATE["group"]), dim=2)
    rep = query.shape[1] // keys.shape[1]
    keys, vals = keys.repeat_interleave(rep, dim=1), vals.repeat_interleave(rep, dim=1)
    mask = _STATE["q"][:, None] >= _STATE["k"][None, :]
    assert keys.shape[2] == cp * query.shape[2]
    out = F.scaled_dot_product_attention(query, keys, vals, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def install(chain: torch.nn.Module) -> None:
    """Register :func:`attention` with ``transformers`` and switch ``chain``'s decoder layers
    to it."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention)
    for module in chain.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = NAME


def set_positions(chain: torch.nn.Module, pos: torch.Tensor | None) -> None:
    """Give every decoder layer of ``chain`` the rank's token positions (None: 0..t-1)."""
    for module in chain.modules():
        if hasattr(module, "positions") and hasattr(module, "rotary"):
            setattr(module, "positions", pos)  # noqa: B010 (hf._Decoder's plain attribute)


__all__ = ["NAME", "attention", "dist", "install", "positions", "set_positions", "set_rank"]

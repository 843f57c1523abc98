"""Context parallelism for Hugging Face decoders: each of ``cp`` ranks holds part of every
sequence; attention all-gathers the keys and values, or passes them around a ring.

Megatron-LM / TransformerEngine split a sequence of ``s`` tokens into ``2cp`` chunks and give
rank ``i`` chunks ``i`` and ``2cp-1-i`` (the causal mask then gives every rank the same work:
:mod:`sim.parallel.context`). Every layer but attention is token-wise, so it runs on the rank's
``s/cp`` tokens unchanged (rotary embeddings at the tokens' global positions,
:attr:`backends.torch.models.hf._Decoder.positions`). Attention here is the ``all_gather`` variant
(``--cp-comm-type all_gather``; Llama 3, arXiv:2407.21783 §3.3.2): the rank's keys and values
are all-gathered over the group (``torch.distributed.nn.functional.all_gather``: the backward
reduce-scatters their gradients), and its queries attend to the keys at global positions not
after their own (the causal mask by position). torch's own context-parallel API
(``torch.distributed.tensor.experimental.context_parallel``) dispatches the CUDA SDPA kernels
(flash, efficient, cuDNN) only, so it does not run on CPU; this module is the CPU replay's.
The ``p2p`` variant (ring attention, TransformerEngine's default) is
:mod:`backends.torch.parallel.ring_attention`: key/value blocks sent around the ring with ``isend``
/ ``irecv`` while each block's attention runs, merged by the online softmax. The ``a2a`` variant
(DeepSpeed-Ulysses, Jacobs et al. arXiv:2309.14509 §3.1; TE's ``--cp-comm-type a2a``) is
:func:`ulysses`: an all-to-all turns the rank's ``s/cp`` tokens of all heads into all ``s``
tokens of ``a/cp`` heads for Q, K and V, attention runs on whole sequences, and a second
all-to-all turns the output back (autograd: the backward runs the transposed exchanges).

Registered as the ``transformers`` attention implementations ``"cp_all_gather"``,
``"cp_p2p"`` and ``"cp_a2a"`` (:func:`install`, :data:`NAMES`); the rank's group and positions are
module state set by :func:`set_rank`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn.functional as F

from backends.torch.parallel.ring_attention import ring_attention

NAME = "cp_all_gather"
NAMES = {"all_gather": NAME, "p2p": "cp_p2p", "a2a": "cp_a2a"}
"""``transformers`` attention implementation of each ``context_parallel_comm``."""
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
        blocks=torch.stack([positions(seq_len, cp, r) for r in range(cp)]),
    )
    _STATE["k"] = _STATE["blocks"].flatten()
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


def ring(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """``p2p``: ``query [b, a, t, d]``, ``key``/``value [b, g, t, d]`` -> ``[b, t, a, d]`` by
    :func:`backends.torch.parallel.ring_attention.ring_attention` over the rank's CP group."""
    group = _STATE["group"]
    out = ring_attention(
        query, key, value, _STATE["q"], _STATE["blocks"], scaling, group, _STATE["rank"]
    )
    return out.transpose(1, 2).contiguous(), None


def _heads_to_tokens(x: torch.Tensor, cp: int, group) -> torch.Tensor:
    """``[b, H, t, d]`` (the rank's tokens, every head) -> ``[b, H/cp, cp*t, d]`` (every rank's
    tokens in rank order, the rank's ``H/cp`` heads)."""
    b, h, t, d = x.shape
    send = x.transpose(0, 1).contiguous()  # head group j goes to rank j
    recv = dist_nn.all_to_all_single(torch.empty_like(send), send, group=group)
    return recv.view(cp, h // cp, b, t, d).permute(2, 1, 0, 3, 4).reshape(b, h // cp, cp * t, d)


def _tokens_to_heads(y: torch.Tensor, cp: int, group) -> torch.Tensor:
    """The inverse of :func:`_heads_to_tokens`: ``[b, H/cp, cp*t, d]`` -> ``[b, H, t, d]``."""
    b, hc, st, d = y.shape
    send = y.view(b, hc, cp, st // cp, d).permute(2, 1, 0, 3, 4).contiguous()
    recv = dist_nn.all_to_all_single(torch.empty_like(send), send, group=group)
    return recv.reshape(cp * hc, b, st // cp, d).transpose(0, 1)


def ulysses(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """``a2a``: ``query [b, a, t, d]``, ``key``/``value [b, g, t, d]`` -> ``[b, t, a, d]``
    (module doc). Key heads that do not split over ``cp`` are repeated to ``a`` first; query
    head group ``i`` then meets key head group ``i`` (``g/cp`` heads serve ``a/cp``)."""
    cp, group = _STATE["cp"], _STATE["group"]
    if key.shape[1] % cp:
        rep = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    q, k, v = (_heads_to_tokens(x, cp, group) for x in (query, key, value))
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    pos = _STATE["k"]  # every rank's positions, rank by rank: the order of the tokens now
    mask = pos[:, None] >= pos[None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
    return _tokens_to_heads(out, cp, group).transpose(1, 2).contiguous(), None


def install(chain: torch.nn.Module, comm: str = "all_gather") -> None:
    """Register the attention of ``comm`` (``all_gather``: :func:`attention`; ``p2p``:
    :func:`ring`; ``a2a``: :func:`ulysses`) with ``transformers`` and switch ``chain``'s decoder
    layers to it.

    Raises:
        ValueError: another ``comm``.
    """
    from transformers import AttentionInterface

    impls = {"all_gather": attention, "p2p": ring, "a2a": ulysses}
    if comm not in impls:
        raise ValueError(f"context-parallel comm {comm!r}: the replay runs {sorted(impls)}")
    AttentionInterface.register(NAMES[comm], impls[comm])
    for module in chain.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = NAMES[comm]


def set_positions(chain: torch.nn.Module, pos: torch.Tensor | None) -> None:
    """Give every decoder layer of ``chain`` the rank's token positions (None: 0..t-1)."""
    for module in chain.modules():
        if hasattr(module, "positions") and hasattr(module, "rotary"):
            setattr(module, "positions", pos)  # noqa: B010 (hf._Decoder's plain attribute)


__all__ = [
    "NAME",
    "NAMES",
    "attention",
    "dist",
    "install",
    "positions",
    "ring",
    "set_positions",
    "set_rank",
    "ulysses",
]

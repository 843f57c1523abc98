"""Context parallelism: the sequence split over ``cp`` ranks, and what attention exchanges.

Megatron-LM's context parallelism (``--context-parallel-size``, ``--cp-comm-type``; the
attention itself is TransformerEngine's ``attn_forward_func_with_cp`` in
``transformer_engine/pytorch/attention``): every rank holds ``s/cp`` tokens of each sequence
for every layer (load-balanced for the causal mask: chunks ``i`` and ``2cp-1-i`` of ``2cp``),
so every token-wise kernel and every activation shrinks ``cp`` times; attention needs the keys
and values of the whole sequence (its share of the causal work is ``1/cp``,
:func:`~sim.compute.attention.attention_fwd`). Three ways to get them (per layer, one rank,
``kv`` = bytes of its keys and values, ``t = b*s/cp`` tokens):

* ``p2p`` (ring attention; Liu et al. arXiv:2310.01889; TE's default): ``cp - 1`` steps; in
  each every rank sends its current KV chunk (``kv`` bytes) to the next rank of the ring
  while it computes attention on the chunk it holds, so a step costs
  ``max(transfer, attention/cp)`` and only the excess is exposed; the last of the ``cp``
  attention steps sends nothing. Backward (the ring reversed): ``cp`` exchanges, one beside
  each step's kernels, as ``AttnFuncWithCPAndKVP2P.backward`` issues them (NVIDIA/
  TransformerEngine v2.9 ``transformer_engine/pytorch/attention/dot_product_attention/
  context_parallel.py`` lines 2102-2138, the same in v2.7 and v2.16): step 0 sends KV
  (``kv``), steps ``1 .. cp-2`` KV and the partial dKV together (``2*kv``, one buffer of the
  KV dtype, lines 2034-2038), step ``cp - 1`` the dKV alone (``kv``). Each is issued before
  its step's kernels and waited for after them (lines 2344-2346, "wait until dKV is
  received"), the last one too, so the last dKV hop hides under the last step like the
  others; after the loop no exchange is left (the reversed ring ends with each rank holding
  its own KV's gradient). Under FP8 attention (``fp8_dot_product_attention``) the last
  exchange is an all-to-all of the per-step dKV instead (lines 2110-2128): not modelled.
* ``all_gather`` (Llama 3, Dubey et al. arXiv:2407.21783, §3.3.2): an all-gather of KV
  (``cp*kv`` bytes out) before attention, a reduce-scatter of dKV in the backward; not
  overlapped (an assumption: TE overlaps part of it with the local chunk's attention).
* ``a2a`` (DeepSpeed-Ulysses, Jacobs et al. arXiv:2309.14509): all-to-alls of Q, K, V before
  attention (each rank ends up with the whole sequence for ``a/cp`` heads) and of the output
  after; backward the same for dO and dQ, dK, dV (TE >= 2.8 sends only dO on the output side).
  One all-to-all per tensor, as TE issues them (``flash_attn_a2a_communicate`` loops over
  ``[q, k, v]`` calling ``all_to_all_single`` for each; TransformerEngine v2.11
  ``context_parallel.py``); the copies around them are :mod:`sim.parallel.context_kernels`',
  and their overlap with the next tensor's all-to-all is not modelled (serial: an upper
  bound). Heads must divide by ``cp``.

Gradients of every weight are all-reduced over the ``dp*cp`` ranks (Megatron's
``data_parallel_group_with_cp``): the context-parallel ranks are, for the optimizer, more
data-parallel ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

COMM_TYPES = ("p2p", "all_gather", "a2a")


@dataclass(frozen=True)
class AttentionDims:
    """Per-token widths of one rank's attention tensors.

    Attributes:
        q: query width (``a/t * d_qk``).
        k: key width (``kv_heads/t * d_qk``; MLA: ``a/t * d_qk``).
        v: value width.
        o: output width (``a/t * d_v``).
        heads: query heads on the rank (``a/t``).
    """

    q: int
    k: int
    v: int
    o: int
    heads: int


@dataclass(frozen=True)
class ContextComm:
    """The context-parallel exchanges of one attention layer, one micro-batch, one rank.

    Attributes:
        kind: ``p2p``, ``all_gather`` or ``a2a``.
        fwd: ``(collective, bytes, count)``: ``ring`` (bytes each rank sends per step,
            ``count`` steps), ``all_gather`` (output bytes), ``alltoall`` (bytes each rank
            sends in all, split evenly over the others; one per tensor: Q, K, V, O forward,
            dO, dQ, dK, dV backward).
        bwd: the same in the backward.
    """

    kind: str
    fwd: tuple[tuple[str, float, int], ...]
    bwd: tuple[tuple[str, float, int], ...]


def check_cp(cp: int, seq_len: int, heads: int, tp: int, kind: str) -> str:
    """Why ``cp`` ranks cannot split this attention, or ``""``."""
    if kind not in COMM_TYPES:
        return f"context-parallel comm must be one of {', '.join(COMM_TYPES)}, got {kind!r}"
    if cp < 1 or seq_len % (2 * cp if cp > 1 else 1):
        return f"context_parallel {cp} needs seq_len {seq_len} divisible by 2 x {cp} (causal load balance)"
    if kind == "a2a" and (heads // tp) % cp:
        return f"a2a context parallelism needs the {heads // tp} heads per rank divisible by {cp}"
    return ""


def context_comm(dims: AttentionDims, t: int, cp: int, d: int, kind: str) -> ContextComm:
    """The exchanges of one attention layer on one of ``cp`` ranks holding ``t`` tokens
    (module doc).

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind not in COMM_TYPES:
        raise ValueError(f"context-parallel comm must be one of {', '.join(COMM_TYPES)}")
    if cp == 1:
        return ContextComm(kind, (), ())
    kv = float(t * (dims.k + dims.v) * d)
    if kind == "p2p":
        middle = (("ring", 2 * kv, cp - 2),) if cp > 2 else ()
        bwd = (("ring", kv, 1), *middle, ("ring", kv, 1))  # KV, KV + dKV, dKV (module doc)
        return ContextComm(kind, (("ring", kv, cp - 1),), bwd)
    if kind == "all_gather":
        return ContextComm(kind, (("all_gather", cp * kv, 1),), (("reduce_scatter", cp * kv, 1),))
    q, k, v, o = (("alltoall", float(t * w * d) * (cp - 1) / cp, 1) for w in
                  (dims.q, dims.k, dims.v, dims.o))  # fmt: skip
    return ContextComm(kind, (q, k, v, o), (o, q, k, v))

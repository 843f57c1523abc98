"""The memory-bound kernels Transformer Engine's context parallelism adds around attention.

Each attention layer of a context-parallel rank (``t = b*s/cp`` tokens; ``Q``, ``K``, ``V``,
``O`` the bytes of its query, key, value and output tensors, ``t * width * d`` with the widths
of :class:`~sim.parallel.context.AttentionDims`) runs, besides the attention kernels and the
exchanges of :mod:`sim.parallel.context`, copies and merges that move whole tensors through
HBM. As Megatron-Core calls TE (``qkv_format="sbhd"``, bf16/fp16 attention; the source is
NVIDIA/TransformerEngine v2.11 ``transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py``, the release of SimuMax's B200 runs and of Bridge's 26.x images):

* ``a2a`` (``AttnFuncWithCPAndQKVOA2A`` through ``flash_attn_a2a_communicate``): before the
  all-to-all each of Q, K, V is split by heads and made contiguous
  (``x.view(..., cp, np//cp, hn).movedim(-3, 0).contiguous()``: one copy), after it its
  ``2*cp`` sequence chunks are put back in order (``reorder_seq_chunks_for_a2a_before_attn``:
  with ``seq_dim = 0`` the ``movedim`` is a no-op, the ``index_select`` one copy). The
  output goes the other way: ``index_select`` of its chunks (``reorder_seq_chunks_for_a2a_
  after_attn``), all-to-all, ``movedim(0, -3).movedim(0, 0).contiguous()``. The backward does
  the same to dO (as Q) and to dQ, dK, dV (as O). So every tensor is copied twice on each
  side: forward ``4*(Q + K + V + O)`` bytes read and written in 8 kernels, backward the same.
* ``p2p`` (``AttnFuncWithCPAndKVP2P``, ring attention): the forward packs K and V into the
  send buffer (``torch.cat((k.view(-1), v.view(-1)))``: ``2*KV``), and merges the ``cp`` partial
  outputs by their log-sum-exps: ``flash_attn_fwd_out_correction_init`` for step 0 (reads the
  step's output, writes ``out``: ``2*O``), then per later step
  ``flash_attn_fwd_softmax_lse_correction`` (``b*heads*t`` fp32 statistics, three passes) and
  ``flash_attn_fwd_out_correction`` (reads the step's output and ``out``, writes ``out``:
  ``3*O``). The backward copies K and V into its ring buffer (``p2p_comm_buffers[0][0].
  copy_(kv)``: ``2*KV``) and per step updates dQ, dK, dV from the step's gradients: step 0
  copies (``2*(Q + KV)``), later steps add (``3*(Q + KV)``). With the load-balanced causal
  split a later step covers, on half of the ranks' steps, the second half of the queries and,
  on the other half, the first half of the keys (TE's ``i <= rank`` branches), so a later
  step's merge moves on average ``3/4`` of the full tensors' bytes; that mean over the ring's
  ranks is used (every rank then does the same).
* ``all_gather`` (``AttnFuncWithCPAndKVAllGather``): the gathered K and V (``cp*KV``) are put
  in sequence order (``index_select`` of their ``2*cp`` chunks: ``2*cp*KV``); each of the
  rank's two query chunks attends to the keys before it and writes its half of the output
  (``out[i].copy_``: ``2*O`` in all). The backward zeroes the full-sequence dK, dV (``cp*KV``
  written), gathers and reorders K, V again (``2*cp*KV``), copies each chunk's dQ (``2*Q``),
  adds each chunk's dK, dV over the keys it saw (chunks ``r`` and ``2cp-1-r`` of ``2cp`` see
  ``(r+1) + (2cp-r)`` chunks: ``3*cp*KV*(2cp+1)/(2cp)``) and reorders dK, dV back before the
  reduce-scatter (``2*cp*KV``). With ``sbhd`` the ``select(...).contiguous()`` and
  ``movedim(0, 0).contiguous()`` of its chunks copy nothing.

Nothing here is fitted: byte counts follow the code above, and the kernels run at the preset's
HBM rate like every memory-bound kernel (:func:`sim.compute.kernels.kernel_time_s`).
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem
from sim.parallel.context import AttentionDims

LATER_STEP_SHARE = 0.75
"""Mean share of the full tensors a ring step after the first merges (module doc: half of the
steps cover half the queries, half cover half the keys, over the load-balanced causal split)."""
LSE_BYTES = 4
"""fp32 log-sum-exp statistics (``softmax_lse``)."""


def context_kernels(
    dims: AttentionDims, t: int, cp: int, d: int, kind: str
) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, backward)`` memory-bound kernels TE's context parallelism of ``kind`` adds
    to one attention layer of a rank holding ``t`` tokens, ``d`` bytes per element (module doc;
    ``[]`` for ``cp == 1``).

    Raises:
        ValueError: ``kind`` not ``p2p``, ``all_gather`` or ``a2a``.

    Example (``t = 4`` tokens, Q and O 8 wide, K and V 2, bf16; Ulysses copies each of the
    ``4*20*2 = 160`` bytes of Q, K, V, O twice on each side, reading and writing):
        >>> f, b = context_kernels(AttentionDims(8, 2, 2, 8, 1), 4, 2, 2, "a2a")
        >>> len(f), sum(k.bytes for k in f), sum(k.bytes for k in b)
        (8, 640.0, 640.0)
    """
    if cp == 1:
        return [], []
    q, k, v, o = (float(t * w * d) for w in (dims.q, dims.k, dims.v, dims.o))
    if kind == "a2a":
        return _a2a((q, k, v), (o,), ""), _a2a((o,), (q, k, v), "_bwd")
    if kind == "p2p":
        return _p2p_fwd(k + v, o, float(t * dims.heads * LSE_BYTES), cp), _p2p_bwd(q, k, v, cp)
    if kind == "all_gather":
        return _ag_fwd(k, v, o, cp), _ag_bwd(q, k, v, cp)
    raise ValueError(f"context-parallel comm must be p2p, all_gather or a2a, got {kind!r}")


def _a2a(before: tuple[float, ...], after: tuple[float, ...], tag: str) -> list[Kernel]:
    """Two copies (read and write) of each tensor sent before attention (Q, K, V forward; dO
    backward) and of each sent after it (O forward; dQ, dK, dV backward)."""
    out = [mem(f"cp_a2a_split{tag}", 2 * x) for x in before]
    out += [mem(f"cp_a2a_reorder{tag}", 2 * x) for x in before]
    out += [mem(f"cp_a2a_reorder_out{tag}", 2 * x) for x in after]
    out += [mem(f"cp_a2a_merge_out{tag}", 2 * x) for x in after]
    return out


def _p2p_fwd(kv: float, o: float, lse: float, cp: int) -> list[Kernel]:
    out = [mem("cp_kv_pack", 2 * kv), mem("cp_out_correction_init", 2 * o)]
    for _ in range(cp - 1):
        out.append(mem("cp_lse_correction", 3 * lse))
        out.append(mem("cp_out_correction", 3 * o * LATER_STEP_SHARE))
    return out


def _p2p_bwd(q: float, k: float, v: float, cp: int) -> list[Kernel]:
    out = [mem("cp_kv_buffer_copy", 2 * (k + v))]
    out += [mem("cp_dq_copy", 2 * q), mem("cp_dk_copy", 2 * k), mem("cp_dv_copy", 2 * v)]
    for _ in range(cp - 1):
        out += [mem(f"cp_{n}_add", 3 * x * LATER_STEP_SHARE) for n, x in (("dq", q), ("dk", k),
                                                                         ("dv", v))]  # fmt: skip
    return out


def _ag_fwd(k: float, v: float, o: float, cp: int) -> list[Kernel]:
    out = [mem("cp_ag_reorder_k", 2 * cp * k), mem("cp_ag_reorder_v", 2 * cp * v)]
    return out + [mem("cp_ag_out_copy", o), mem("cp_ag_out_copy", o)]


def _ag_bwd(q: float, k: float, v: float, cp: int) -> list[Kernel]:
    seen = (2 * cp + 1) / (2 * cp)  # the two chunks' key prefixes, of the full sequence
    out = [mem("cp_ag_zero_dk", cp * k), mem("cp_ag_zero_dv", cp * v)]
    out += [mem("cp_ag_reorder_k_bwd", 2 * cp * k), mem("cp_ag_reorder_v_bwd", 2 * cp * v)]
    out += [mem("cp_ag_dq_copy", q), mem("cp_ag_dq_copy", q)]
    out += [mem(f"cp_ag_{n}_add", 3 * cp * x * seen / 2) for n, x in (("dk", k), ("dv", v))
            for _ in range(2)]  # fmt: skip
    return out + [mem("cp_ag_reorder_dk", 2 * cp * k), mem("cp_ag_reorder_dv", 2 * cp * v)]

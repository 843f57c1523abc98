"""Ring attention (context parallelism ``p2p``): keys and values travel around the CP ring.

Each of ``cp`` ranks holds the queries, keys and values of its ``t = s/cp`` tokens (chunks
``rank`` and ``2cp-1-rank`` of the sequence, :func:`backends.torch.parallel.context.positions`).
Forward, ``cp`` steps: in step ``j`` the rank holds the key/value block of rank
``(rank - j) mod cp``, starts sending it to rank ``rank+1`` and receiving the next one from
``rank-1`` (``isend``/``irecv``: the exchange runs while it computes), computes its queries'
attention on the block under the causal mask by global position, and merges it into the output
with the online softmax (a running log-sum-exp per query: Milakov & Gimelshein
arXiv:1805.02867; the block merge of FlashAttention-2, Dao arXiv:2307.08691 §3.1; the ring of
Liu et al. arXiv:2310.01889 §3). Backward (FlashAttention-2's, §3.2, with the saved
log-sum-exp): the key/value blocks go around the ring again with their gradient accumulators;
each rank adds its queries' share to the block's ``dK, dV`` and passes them on with the block,
so after ``cp`` steps every rank holds the gradient of its own keys and values, and its ``dQ``
locally. This is TransformerEngine's ``AttnFuncWithCPAndKVP2P``
(``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``) without
its fused kernels: ``cp - 1`` key/value sends forward, ``cp - 1`` key/value and ``cp`` gradient
sends backward (the simulator counts ``cp - 1`` steps of ``2 x kv`` bytes, :mod:`sim.parallel.
context`). Grouped-query attention: the ``g`` key heads travel, each serves ``a/g`` query
heads. Math kernels only (CPU): ``softmax(QK^T * scale) V`` per block, fp32 log-sum-exp.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

NEG_INF = float("-inf")


KV_TAG, GRAD_TAG = 0, 1
"""Message tags of the key/value blocks and of their gradients (both in flight at once)."""


def _exchange(
    send: torch.Tensor, group, rank: int, cp: int, tag: int = KV_TAG
) -> tuple[list, torch.Tensor]:
    """Start sending ``send`` to ring rank ``rank+1`` and receiving a tensor like it from
    ``rank-1``; ``(requests, receive buffer)``."""
    recv = torch.empty_like(send)
    nxt, prev = (rank + 1) % cp, (rank - 1) % cp
    if group is not None:
        nxt, prev = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prev)
    ops = [
        dist.P2POp(dist.isend, send.contiguous(), nxt, group, tag),
        dist.P2POp(dist.irecv, recv, prev, group, tag),
    ]
    return dist.batch_isend_irecv(ops), recv


def _wait(reqs: list) -> None:
    for r in reqs:
        r.wait()


def _scores(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor, scale: float):
    """``q [b, a, t, d]``, ``k [b, a, tk, d]`` -> masked scores ``[b, a, t, tk]``."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    return s.masked_fill(~allowed, NEG_INF)


def _block_forward(q, k, v, allowed, scale):
    """One block: ``(out [b, a, t, d] normalised by the block's sum, lse [b, a, t])``; rows
    with no allowed key have ``out = 0`` and ``lse = -inf``."""
    s = _scores(q, k, allowed, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    return torch.matmul(p, v), lse


def _merge(out, lse, o_b, lse_b):
    """Online softmax: the output over both key sets from each one's normalised output and
    log-sum-exp (``lse`` finite: every query sees its own key in the first block)."""
    if out is None:
        return o_b, lse_b
    new = torch.logaddexp(lse, lse_b)
    out = out * torch.exp(lse - new).unsqueeze(-1) + o_b * torch.exp(lse_b - new).unsqueeze(-1)
    return out, new


class RingAttention(torch.autograd.Function):
    """``RingAttention.apply(q, k, v, q_pos, block_pos, scale, group, rank)`` (module doc).

    Args:
        q: ``[b, a, t, d]`` the rank's queries.
        k, v: ``[b, g, t, d]`` its keys and values (``g`` divides ``a``).
        q_pos: ``[t]`` global positions of its tokens.
        block_pos: ``[cp, t]`` global positions of every rank's tokens.
        scale: the softmax scale (``1/sqrt(d)`` usually).
        group: the CP process group (None: the default group, ranks ``0..cp-1``).
        rank: this rank's index in it.

    Returns:
        ``[b, a, t, d]`` attention output.
    """

    @staticmethod
    def forward(ctx, q, k, v, q_pos, block_pos, scale, group, rank):  # type: ignore[override]
        cp, rep = block_pos.shape[0], q.shape[1] // k.shape[1]
        out = lse = None
        block = torch.stack([k, v])
        for j in range(cp):
            src = (rank - j) % cp
            if j < cp - 1:
                reqs, nxt = _exchange(block, group, rank, cp)
            allowed = q_pos[:, None] >= block_pos[src][None, :]
            kk, vv = (x.repeat_interleave(rep, dim=1) for x in block)
            out, lse = _merge(out, lse, *_block_forward(q, kk, vv, allowed, scale))
            if j < cp - 1:
                _wait(reqs)
                block = nxt
        ctx.save_for_backward(q, k, v, out, lse, q_pos, block_pos)
        ctx.scale, ctx.group, ctx.rank = scale, group, rank
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, out, lse, q_pos, block_pos = ctx.saved_tensors
        scale, group, rank = ctx.scale, ctx.group, ctx.rank
        cp, rep = block_pos.shape[0], q.shape[1] // k.shape[1]
        delta = (dout * out).sum(-1, keepdim=True)  # FlashAttention-2's D = rowsum(dO * O)
        dq = torch.zeros_like(q)
        block = torch.stack([k, v])
        dblock = torch.zeros_like(block)
        for j in range(cp):
            src = (rank - j) % cp
            if j < cp - 1:
                reqs, nxt = _exchange(block, group, rank, cp)
            allowed = q_pos[:, None] >= block_pos[src][None, :]
            kk, vv = (x.repeat_interleave(rep, dim=1) for x in block)
            p = torch.exp(_scores(q, kk, allowed, scale) - lse.unsqueeze(-1))
            dv = torch.matmul(p.transpose(-1, -2), dout)
            ds = p * (torch.matmul(dout, vv.transpose(-1, -2)) - delta)
            dq += torch.matmul(ds, kk) * scale
            dk = torch.matmul(ds.transpose(-1, -2), q) * scale
            b, g, tk, d = k.shape
            dblock += torch.stack([dk, dv]).view(2, b, g, rep, tk, d).sum(3)
            dreqs, dnxt = _exchange(
                dblock, group, rank, cp, GRAD_TAG
            )  # the block's gradient moves on
            if j < cp - 1:
                _wait(reqs)
                block = nxt
            _wait(dreqs)
            dblock = dnxt
        return dq, dblock[0], dblock[1], None, None, None, None, None


def ring_attention(q, k, v, q_pos, block_pos, scale=None, group=None, rank=0) -> torch.Tensor:
    """:class:`RingAttention` with ``scale`` defaulting to ``1/sqrt(d)``."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return RingAttention.apply(q, k, v, q_pos, block_pos, scale, group, rank)

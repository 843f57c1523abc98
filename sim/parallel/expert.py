"""Expert parallelism: which rank holds which experts, the rows they compute, the all-to-all
traffic between ranks, and the expert weights' share of a rank's memory.

Megatron-LM (``megatron/core/transformer/moe``; ``parallel_state.py``, rank order
``tp-cp-ep-dp-pp``): an expert-parallel (EP) group of ``ep`` ranks splits the ``E`` experts of
every MoE layer, rank ``j`` holding the contiguous experts ``j*E/ep .. (j+1)*E/ep - 1``
(``local_expert_indices``). The EP group is carved out of the data-parallel (and
context-parallel) ranks: each of its ranks processes its own tokens through the dense part
and exchanges routed tokens with the others. Expert weights are therefore replicated only over
the ``dp*cp/ep`` ranks that hold the same experts (the *expert-data-parallel* group), which
all-reduce their gradients; the dense weights over all ``dp*cp``.

With the ``alltoall`` dispatcher (``token_dispatcher.py``) a MoE layer's forward runs:
permute, **dispatch** all-to-all (rank ``i`` sends rank ``j`` the rows of its tokens routed to
``j``'s experts, ``h*d`` bytes each, plus their fp32 probabilities), with expert tensor
parallelism ``t`` an all-gather of the received rows over the tensor ranks, the experts, a
reduce-scatter back, the **combine** all-to-all (the transposed traffic, no probabilities),
unpermute. The backward runs the same collectives with the gradients (the combine's gradient
goes the dispatch way and vice versa): per MoE layer two all-to-alls forward and two backward.

Per-pair bytes (the engine times every pair on its route, :mod:`sim.comm.alltoall`): with
shares ``w_e`` of routed assignments per expert (:mod:`sim.compute.routing`) and ``r`` tokens
routed per tensor rank, rank ``i`` sends rank ``j`` ``r*k*W_j`` rows, ``W_j`` the summed share of
``j``'s experts (capped at each expert's capacity with a capacity factor, padded to it with
``pad_to_capacity``); ``i = j`` stays local.

With the ``allgather`` dispatcher (``MoEAllGatherTokenDispatcher``, NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/moe/token_dispatcher.py`` lines 233-370; routing
``...+allgather``, :mod:`sim.compute.routing`) every rank gathers all tokens of its TP x EP
group, with their routing map (one byte per expert) and fp32 probabilities
(``gather_from_sequence_parallel_region``), keeps those routed to its experts, and
reduce-scatters the ``[tokens, h]`` outputs back (``reduce_scatter_to_sequence_parallel_region``):
rank ``i`` sends every other rank all its ``r`` rows (``r*(h*d + E*(4 + 1))`` bytes) in the
dispatch and ``r`` partial rows (``r*h*d``) in the combine, whatever the routing. The experts
compute the same rows. The exchange is timed over the EP ranks of one tensor rank with the
``tp`` tensor ranks' tokens folded into it (``r*tp`` rows per pair): exact at ``tp = 1``, the
TP part of the TP x EP gather otherwise.

A capacity that drops nothing keeps the deduplicating flex dispatchers' ``routed`` copies
(:attr:`ExpertPlan.routed`): under balanced routing every expert's share fits a capacity factor
>= 1, and with ``pad_to_capacity`` HybridEP still dispatches each token by its routing map,
padding only the permuted rows it hands the experts (``num_permuted_tokens = capacity x EP x
local experts``; NVIDIA/Megatron-LM@d98e8a64 ``token_dispatcher.py`` lines 1113-1127, 1149-1160).
Approximation: the pairs stay the padded rows (what the ``alltoall`` dispatcher sends), so a
deduplicating dispatcher's bytes count the padding too (``capacity / share``, 1.10 at factor
1.1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.compute.moe_shape import PROB_BYTES, MoEShape
from sim.compute.routing import Routing, capacity

Matrix = tuple[tuple[float, ...], ...]


def check_ep(moe: MoEShape, ep: int) -> str:
    """Why ``ep`` ranks cannot split ``moe``'s experts, or ``""``."""
    if ep < 1 or moe.experts % ep:
        return f"expert_parallel {ep} must divide the {moe.experts} experts"
    return ""


def local_experts(moe: MoEShape, ep: int, rank: int) -> range:
    """The experts EP rank ``rank`` holds (contiguous, module doc)."""
    n = moe.experts // ep
    return range(rank * n, (rank + 1) * n)


def _kept(moe: MoEShape, r: int, loads: tuple[float, ...]) -> list[float]:
    """Rows one source of ``r`` tokens sends each expert (capacity applied)."""
    sent = [r * moe.top_k * w for w in loads]
    if moe.capacity_factor is None:
        return sent
    cap = float(capacity(r, moe.experts, moe.top_k, moe.capacity_factor))
    return [cap if moe.pad_to_capacity else min(x, cap) for x in sent]


@dataclass(frozen=True)
class ExpertPlan:
    """What expert parallelism does to one MoE layer for one micro-batch.

    Attributes:
        ep: expert-parallel size.
        rows: rows each EP rank's local experts compute, per rank (over all its tensor
            ranks' tokens: expert tensor parallelism splits the GEMMs, not the rows).
        dispatch: bytes rank ``i`` sends rank ``j`` in the dispatch all-to-all (diagonal 0).
        combine: bytes of the combine all-to-all (``dispatch`` transposed, no probabilities).
        routed: ``(experts, top_k)`` where the two matrices are the copies of balanced, dropless
            top-k routing over contiguous experts (what a deduplicating dispatcher needs:
            :mod:`sim.comm.ep_dispatch`); None with another routing, a capacity or the
            ``allgather`` dispatcher.
    """

    ep: int
    rows: tuple[tuple[float, ...], ...]
    dispatch: Matrix
    combine: Matrix
    routed: tuple[int, int] | None = None

    @property
    def busiest(self) -> int:
        """The EP rank whose experts compute the most rows (it sets the layer's time)."""
        totals = [sum(r) for r in self.rows]
        return totals.index(max(totals))

    def sent_bytes(self, rank: int) -> float:
        """Bytes ``rank`` sends in one dispatch all-to-all (to other ranks)."""
        return sum(self.dispatch[rank])


def expert_plan(moe: MoEShape, routing: Routing, r: int, ep: int, tp: int, d: int) -> ExpertPlan:
    """The rows, and the all-to-all bytes per pair, of one MoE layer (module doc).

    Args:
        moe: the layer.
        routing: shares of routed tokens per expert.
        r: tokens each tensor rank routes (``b*s/(cp*t)`` with sequence parallelism).
        ep: expert-parallel size.
        tp: tensor-parallel size: ``ep*tp`` sources route to each expert.
        d: bytes per element of the hidden state.

    Raises:
        ValueError: ``ep`` does not divide the experts (:func:`check_ep`); routing errors.
    """
    why = check_ep(moe, ep)
    if why:
        raise ValueError(why)
    kept = _kept(moe, r, routing.loads(moe.experts))
    rows = tuple(tuple(ep * tp * kept[e] for e in local_experts(moe, ep, j)) for j in range(ep))
    to_rank = [sum(kept[e] for e in local_experts(moe, ep, j)) for j in range(ep)]
    row_bytes = moe.row_width * d  # the latent width with --moe-latent-size
    if routing.dispatcher == "allgather":
        return ExpertPlan(ep, rows, *_allgather(moe, r * tp, ep, row_bytes))
    dispatch = tuple(
        tuple(0.0 if i == j else to_rank[j] * (row_bytes + PROB_BYTES) for j in range(ep))
        for i in range(ep)
    )
    combine = tuple(
        tuple(0.0 if i == j else to_rank[i] * row_bytes for j in range(ep)) for i in range(ep)
    )
    sent = _kept(replace(moe, capacity_factor=None), r, routing.loads(moe.experts))
    dropless = all(k >= x for k, x in zip(kept, sent, strict=True))  # module doc, "capacity"
    plain = routing.kind == "balanced" and dropless
    return ExpertPlan(ep, rows, dispatch, combine, (moe.experts, moe.top_k) if plain else None)


def _allgather(moe: MoEShape, r: int, ep: int, row_bytes: float) -> tuple[Matrix, Matrix]:
    """``(dispatch, combine)`` of the ``allgather`` dispatcher (module doc): ``r`` rows from
    every rank to every other one (with the routing map and probabilities), ``r`` partial rows
    back."""
    out = r * (row_bytes + moe.experts * (PROB_BYTES + 1))
    dispatch = tuple(tuple(0.0 if i == j else out for j in range(ep)) for i in range(ep))
    combine = tuple(tuple(0.0 if i == j else r * row_bytes for j in range(ep)) for i in range(ep))
    return dispatch, combine


def expert_param_share(moe: MoEShape, ep: int, tp: int) -> float:
    """Fraction of a MoE layer's routed-expert parameters one rank holds: ``1/(ep*tp)``."""
    return 1.0 / (ep * tp)

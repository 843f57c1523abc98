"""The all-to-all dispatcher's second permutation: received rows sorted by local expert and back.

Megatron-Core's ``alltoall`` token dispatcher (``MoEAlltoAllTokenDispatcher``) permutes a rank's
tokens into expert order (:func:`sim.compute.moe.moe_fwd` step 3), exchanges them, and then
holds its received rows ordered by *source rank*, then expert: ``[tp x ep ranks, local
experts]`` chunks. With more than one local expert it sorts them by local expert before the
grouped GEMM and back after it (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/moe/token_dispatcher.py``: ``dispatch_postprocess`` lines 753-793,
"Permutation 2: Sort tokens by local expert", ``sort_chunks_by_idxs(global_input_tokens,
..., probs=global_probs, fused=moe_permute_fusion)``; ``combine_preprocess`` lines 805-823,
"Unpermutation 2", the inverse sort of the experts' output without probabilities). Dropless,
that is Transformer Engine's ``moe_sort_chunks_by_index(_with_probs)`` (``moe_utils.py``
lines 628-670, TE >= 2.1); with every expert padded to its capacity, a
``view(...).transpose(0, 1).contiguous()`` copy of the same rows. The flex dispatchers
(DeepEP, HybridEP) return rows already in local-expert order and run neither.

Each sort reads and writes every received row (``rows * w * d`` bytes each way), the
dispatch-side one also its fp32 probability (``4`` bytes each way); its backward is the inverse
sort of the gradient, the same bytes (autograd of ``moe_sort_chunks_by_index``: the gradient
sorted by the inverse map). Timed as memory-bound kernels at the HBM rate
(:func:`sim.compute.kernels.kernel_time_s`); Transformer Engine's permutation kernels of the
same module are measured below it (:data:`sim.compute.measured.PERMUTE_BPS`), so this is a lower
bound.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem
from sim.hardware.formats import FP32_BYTES

PROB_BYTES = FP32_BYTES
"""fp32 routing probabilities sorted with the dispatched rows (``global_probs``)."""


def sort_bytes(rows: float, w: int, d: int, probs: bool) -> float:
    """Bytes one sort moves: every row read and written, with its fp32 probability when
    ``probs`` (module doc).

    Example: 3 rows of width 4 in bf16, with probabilities: ``2 * 3 * (4 * 2 + 4) = 72``.

    >>> sort_bytes(3, 4, 2, True), sort_bytes(3, 4, 2, False)
    (72.0, 48.0)
    """
    return 2.0 * rows * (w * d + (PROB_BYTES if probs else 0))


def sorts_by_expert(local_experts: int, sort: bool) -> bool:
    """Whether the dispatcher sorts: ``sort`` (the all-to-all dispatcher) and more than one
    local expert (``if self.num_local_experts > 1``, module doc)."""
    return sort and local_experts > 1


def sort_fwd(rows: float, w: int, d: int) -> tuple[Kernel, Kernel]:
    """``(sort, unsort)`` of a forward: before the experts (rows and probabilities) and after
    them (rows only)."""
    return (mem("sort_by_expert", sort_bytes(rows, w, d, True)),
            mem("unsort_by_expert", sort_bytes(rows, w, d, False)))  # fmt: skip


def sort_bwd(rows: float, w: int, d: int) -> tuple[Kernel, Kernel]:
    """``(unsort backward, sort backward)``, in the order the backward runs them (module doc:
    each the inverse sort of its gradient, the forward's bytes)."""
    return (mem("unsort_by_expert_bwd", sort_bytes(rows, w, d, False)),
            mem("sort_by_expert_bwd", sort_bytes(rows, w, d, True)))  # fmt: skip

"""The stash of Megatron's combined 1F1B step: a forward and a backward layer by layer.

With ``overlap_moe_expert_parallel_comm`` Megatron-Core runs a backward and the next forward
as one step (:mod:`sim.schedules.combined`), and that step interleaves them layer by layer
(NVIDIA/Megatron-LM@d98e8a64dd ``megatron/core/models/common/model_chunk_schedule_plan.py``,
``TransformerModelChunkSchedulePlan.run``, 499-640): the forward's pre-process (embedding) and
the backward's post-process (output layer and loss), then ``forward_layer[i]`` with
``backward_layer[L-1-i]`` for each ``i`` (``TransformerLayerSchedulePlan.run``), the
backward's layer state released after its pair (``b_layer.release_state()``), then the
forward's post-process and the backward's pre-process. So the forward's stash grows by a layer
while the backward's shrinks by one: at step ``t`` the forward holds its layers ``0..t`` and
the backward its layers ``0..m-1-t`` (:func:`overlapped_stash_peak`), about one stash and a
layer, not the two whole stashes of a forward run before the backward.

A stage's stash is spread over its layers in proportion to their saved bytes
(:func:`layer_shares`, the trace's ``act_bytes``: the recompute and offload policies keep the
same fraction of each, an assumption where a policy chooses layers).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.plan import StagePlan
from sim.trace.schema import LayerProfile


def overlapped_stash_peak(fwd: Sequence[float], bwd: Sequence[float]) -> float:
    """The largest stash the two micro-batches of a combined step hold, bytes.

    Args:
        fwd: the forward's kept bytes per layer, in forward order.
        bwd: the backward's kept bytes per layer, in forward order (it runs them last first).

    Example:
        >>> overlapped_stash_peak([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])  # a stash and a layer
        4.0
    """
    n, m = len(fwd), len(bwd)
    best = 0.0
    for t in range(max(n, m, 1)):
        best = max(best, sum(fwd[: min(t + 1, n)]) + sum(bwd[: max(m - t, 0)]))
    return best


def layer_shares(layers: Sequence[LayerProfile]) -> tuple[float, ...]:
    """Each layer's fraction of the stage's saved bytes (equal shares when none saves)."""
    total = sum(x.act_bytes for x in layers)
    if total <= 0:
        return tuple(1.0 / len(layers) for _ in layers) if layers else ()
    return tuple(x.act_bytes / total for x in layers)


def kept_bytes(plan: StagePlan) -> float:
    """Bytes of a micro-batch's stash the stage keeps from its forward to its backward (the
    engine's forward charge without the rebuilt bytes it drops at the end)."""
    return plan.fwd_alloc_bytes - plan.rebuild_bytes


def pair_delta(fwd: StagePlan, bwd: StagePlan) -> float:
    """What a combined step holds less than the forward's whole stash added to the
    backward's (``<= 0``), from the plans' ``layer_shares``; 0 when either has none."""
    if not fwd.layer_shares or not bwd.layer_shares:
        return 0.0
    kf, kb = kept_bytes(fwd), kept_bytes(bwd)
    peak = overlapped_stash_peak(
        [kf * s for s in fwd.layer_shares], [kb * s for s in bwd.layer_shares]
    )
    return min(0.0, peak - kf - kb)

"""Lower bounds over every split of one tensor rank's layers into contiguous pipeline stages,
for :mod:`sim.plan.bounds` (its module doc gives the argument): :class:`RankTotals` (the rank's
trace summed, and grouped by layer kind), :func:`weighted_bound` (the largest stage's bytes)
and :func:`min_bottleneck_s` (the largest stage's seconds). Pure arithmetic: no trace, no
hardware."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from sim.memory.states import StateBytes


@dataclass(frozen=True)
class RankTotals:
    """One tensor rank's trace summed over its layers (a stage holds a contiguous part).

    Attributes:
        params: parameters (count).
        act_bytes: activation bytes stashed per micro-batch.
        compute_s: forward + backward seconds per micro-batch.
        max_layer_s: the largest layer's forward + backward seconds.
        layers: the number of layers.
        state: model-state bytes per parameter.
        groups: ``((params, act_bytes, count), ...)``: the layers grouped by their parameters
            and stash (a GPT trace has a few kinds: embedding, block, head).
        layer_recompute_s: per mode, each layer's forward seconds recomputed per micro-batch by
            ``recompute:full`` (every block's forward, :mod:`sim.memory.recompute`) and
            ``recompute:selective`` (the attention core's share).
        layer_seconds: per layer, ``fwd_s + bwd_s``.
        layer_comm: per layer, its tensor-parallel collectives ``((kind, bytes, count), ...)``
            of the forward and the backward (:func:`sim.parallel.megatron.aggregate`).
        layer_recompute_comm: per layer, the collectives full recompute runs again (a
            block's forward's: Megatron's ``CheckpointFunction`` re-runs the forward, its
            all-reduces included; :attr:`~sim.engine.stage_cost.StageCost.tp_recompute`).
        trainable_params: trainable parameters (count: ``params`` but for LoRA's frozen
            weights, :attr:`~sim.trace.schema.LayerProfile.trainable`); their gradients are
            what the optimizer step's transient scales with (:mod:`sim.memory.step_moment`).
    """

    params: float
    act_bytes: float
    compute_s: float
    max_layer_s: float
    layers: int
    state: StateBytes
    groups: tuple[tuple[float, float, int], ...] = ()
    layer_recompute_s: tuple[tuple[str, tuple[float, ...]], ...] = ()
    layer_seconds: tuple[float, ...] = ()
    layer_comm: tuple[tuple[tuple[str, float, int], ...], ...] = ()
    layer_recompute_comm: tuple[tuple[tuple[str, float, int], ...], ...] = ()
    trainable_params: float = 0.0


def weighted_bound(tot: RankTotals, per_param: float, in_flight: tuple[int, ...]) -> float:
    """A lower bound of ``max_s (per_param x P_s + n_s x A_s)`` over every split of the layers
    into stages, for stages that keep ``n_s`` stashes (policy ``none``), in bytes.

    For any weights ``lambda_s >= 0`` summing to 1 the largest stage is at least the weighted
    mean, and a layer placed on stage ``s`` adds ``lambda_s x (per_param x P_l + n_s x A_l)``
    to it, at least its minimum over ``s``: ``sum over layers of min_s``, whatever the split.
    The weights ``lambda_s ~ 1 / (per_param x P + n_s x A)`` equalise the stages of a uniform
    model (1F1B keeps ``p - s`` stashes on stage ``s``).
    """
    inv = [1.0 / max(per_param * tot.params + n * tot.act_bytes, 1e-30) for n in in_flight]
    lam = [x / sum(inv) for x in inv]
    return sum(
        count
        * min(ls * (per_param * params + n * act) for ls, n in zip(lam, in_flight, strict=True))
        for params, act, count in tot.groups
    )


def min_bottleneck_s(work: Sequence[float], parts: int, *, steps: int = 40) -> float:
    """A lower bound of the smallest largest part of any split of ``work`` (non-negative) into
    ``parts`` contiguous parts (a part's value: the sum of its items), within
    ``total / 2**steps`` of it: the mean and the largest item if greedy packing fits ``parts``
    parts under that, else a bisection between a cap it does not fit under (returned) and one
    it fits under. The largest item when ``parts >= len(work)``.

    Example:
        >>> round(min_bottleneck_s([1.0, 1.0, 1.0, 1.0, 1.0], 2), 9)  # 3 + 2 layers
        3.0
        >>> min_bottleneck_s([4.0, 1.0, 1.0, 1.0, 1.0], 2)  # 4 | 1 + 1 + 1 + 1
        4.0
    """
    n = len(work)
    lo = max(max(work), sum(work) / parts)
    if parts >= n:
        return max(work)
    prefix = [0.0]
    for x in work:
        prefix.append(prefix[-1] + x)

    def fits(cap: float) -> bool:
        start = 0
        for _ in range(parts):
            start = bisect_right(prefix, prefix[start] + cap, lo=start) - 1
            if start >= n:
                return True
        return False

    if fits(lo):
        return lo
    hi = prefix[-1]
    for _ in range(steps):
        mid = (lo + hi) / 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return lo

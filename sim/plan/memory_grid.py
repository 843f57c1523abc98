"""``sim memory``: every configuration's peak per pipeline rank, without simulating time, and
what to change when one does not fit.

:func:`grid_memory` runs the rank memory model (:func:`sim.point.memory.point_memory`, the
planner's memory bound) over a grid's points; :func:`advise` names, for a configuration that
does not fit, the category that overflows on its tightest GPU and the first single change of
:data:`CHANGES` that fits, each tried with the same model:

1. ``dist_opt``: shard the optimizer state over the data-parallel replicas (Megatron's
   distributed optimizer; with data parallelism, and the policy's recompute kept);
2. ``recompute``: full activation recompute of every layer (``recompute:full``, or
   ``dist_opt:recompute``);
3. ``smaller b``: half the micro-batch size, twice the micro-batches (same global batch);
4. ``more tp``: twice the tensor-parallel size, half the data-parallel width (same GPUs);
5. ``more pp``: twice the pipeline depth, half the data-parallel width (same GPUs).

The order is the usual cost order: sharding states costs a reduce-scatter and an all-gather
instead of an all-reduce, recompute a third more compute, a smaller micro-batch less efficient
kernels, more tensor or pipeline ranks more communication and bubbles (an assumption: the
throughput is ``sim run``'s to judge).

Speed, with the same numbers: each point is resolved once (``known``, shared by the grid and
the advice); a change is first bounded without the allocator replay
(:func:`~sim.point.memory.point_memory` with ``replay=False``: the replay's margin is at least
0) and ruled out when that bound does not fit, which most changes that do not fit are; the
grid's points and their advice can be computed ahead in worker processes (``jobs``,
:mod:`sim.plan.memory_jobs`). ``experiments/dgx1.yaml``: 174 points, 83 with advice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from sim.errors import InputError
from sim.memory.rank_memory import CATEGORIES, RankMemory
from sim.plan.memory_jobs import ahead
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.memory import PointMemory, point_memory

GIB = 2.0**30


@dataclass(frozen=True)
class Advice:
    """What to change for a configuration that does not fit.

    Attributes:
        category: the largest category on the tightest GPU (what overflows).
        over_bytes: how far its device bytes exceed the capacity.
        change: the first change of :data:`CHANGES` that fits (``""``: none does).
        point: the configuration with that change (None: none fits).
        device_bytes: the changed configuration's tightest device bytes.
        state_bytes: the model state (weights, gradients, optimizer) on the tightest GPU.
        capacity_bytes: that GPU's usable capacity.
    """

    category: str
    over_bytes: float
    change: str = ""
    point: PointConfig | None = None
    device_bytes: float = 0.0
    state_bytes: float = field(default=0.0, compare=False)
    capacity_bytes: float = field(default=0.0, compare=False)

    def text(self) -> str:
        """One line for the table and the CSV; when no single change fits, what would: the
        model-parallel width the model state needs (:meth:`floor`)."""
        head = f"{self.over_bytes / GIB:.2f} GiB over capacity (largest category: {self.category})"
        if self.point is None:
            return f"{head}; no single change of dist_opt, recompute, b, tp, pp fits" + self.floor()
        return f"{head}; fits with {self.change} ({self.device_bytes / GIB:.2f} GiB)"

    def floor(self) -> str:
        """What the model state alone asks, for a configuration no single change fits: when
        it exceeds the capacity, ``k = ceil(state / capacity)``, the least factor of more
        GPUs over which tp x pp must split the layers (or ZeRO / dist_opt the state) before
        anything else fits; an estimate that assumes the state divides evenly over them
        (the embedding and output layers do not) and leaves no room for activations, so a
        lower bound. Else: the state fits, and changes must be combined."""
        if not self.capacity_bytes:
            return ""
        state = (
            f"the model state (weights, gradients, optimizer) is {self.state_bytes / GIB:.2f} GiB"
        )
        if self.state_bytes <= self.capacity_bytes:
            return f"; {state} of {self.capacity_bytes / GIB:.2f}: combine changes"
        k = math.ceil(self.state_bytes / self.capacity_bytes)
        return (f"; {state}, {self.state_bytes / self.capacity_bytes:.1f}x the "
                f"{self.capacity_bytes / GIB:.2f} GiB: split it over at least {k}x the GPUs "
                "(tp x pp, or dist_opt / ZeRO over dp; an estimate: states split evenly)")  # fmt: skip


@dataclass(frozen=True)
class GridMemory:
    """One configuration's answer: its ranks' peaks (``memory``; None when it cannot be
    resolved, ``error`` says why) and, when it does not fit, :class:`Advice`."""

    point: PointConfig
    memory: PointMemory | None
    error: str = ""
    advice: Advice | None = None


def overflowing(rank: RankMemory) -> str:
    """The largest category of ``rank``'s peak."""
    return max(CATEGORIES, key=lambda c: rank.by_category.get(c, 0.0))


def _policy(point: PointConfig, dist: bool, recompute: bool) -> str | None:
    name = point.memory_policy
    has_dist, has_rec = name.startswith("dist_opt"), "recompute" in name
    if name not in ("none", "dist_opt", "dist_opt:recompute", "recompute", "recompute:full"):
        return None
    dist, recompute = dist or has_dist, recompute or has_rec
    if dist:
        return "dist_opt:recompute" if recompute else "dist_opt"
    return "recompute:full" if recompute else "none"


def _with(point: PointConfig, **changes) -> PointConfig | None:
    data = point.model_dump()
    data.update(changes)
    try:
        return PointConfig(**data)
    except ValueError:
        return None


def _dist(p: PointConfig) -> PointConfig | None:
    policy = _policy(p, True, False)
    if policy is None or policy == p.memory_policy or p.dp_width * p.context_parallel < 2:
        return None
    return _with(p, memory_policy=policy)


def _recompute(p: PointConfig) -> PointConfig | None:
    policy = _policy(p, False, True)
    return None if policy is None or policy == p.memory_policy else _with(p, memory_policy=policy)


def _smaller_b(p: PointConfig) -> PointConfig | None:
    if p.microbatch_size % 2:
        return None
    return _with(p, microbatch_size=p.microbatch_size // 2, microbatches=p.microbatches * 2)


def _more_tp(p: PointConfig) -> PointConfig | None:
    if p.dp_width % 2:
        return None
    m = p.microbatches * 2  # the same global batch over half the replicas
    return _with(p, tensor_parallel=p.tensor_parallel * 2, dp_width=p.dp_width // 2, microbatches=m)


def _more_pp(p: PointConfig) -> PointConfig | None:
    if p.dp_width % 2:
        return None
    m = p.microbatches * 2  # the same global batch over half the replicas
    return _with(p, stages=p.stages * 2, dp_width=p.dp_width // 2, microbatches=m)


CHANGES: tuple[tuple[str, Callable[[PointConfig], PointConfig | None]], ...] = (
    ("dist_opt", _dist),
    ("recompute", _recompute),
    ("half the micro-batch size", _smaller_b),
    ("twice the tensor-parallel size", _more_tp),
    ("twice the pipeline depth", _more_pp),
)
"""The single changes :func:`advise` tries, in order (module doc)."""


Known = dict[PointConfig, "PointMemory | None"]
"""Points already answered (None: not resolvable), shared by :func:`advise` calls."""
Over = set[PointConfig]
"""Changed points ruled out by their lower bound (:func:`_fitting`), shared likewise."""


def _memory(prep: Prepared, point: PointConfig, known: Known) -> PointMemory | None:
    if point not in known:
        try:
            known[point] = point_memory(prep, point)
        except InputError:
            known[point] = None
    return known[point]


def _fitting(prep: Prepared, point: PointConfig, known: Known, over: Over) -> PointMemory | None:
    """``point``'s peaks when it fits, else None. A point not answered yet is bounded first
    (:func:`~sim.point.memory.point_memory` with ``replay=False``, a lower bound of every
    rank's bytes): when the bound does not fit, neither does the point, and it goes in
    ``over`` without its allocator replays (module doc)."""
    if point in over:
        return None
    if point not in known:
        try:
            if not point_memory(prep, point, replay=False).fits:
                over.add(point)
                return None
        except InputError:
            known[point] = None
            return None
    pm = _memory(prep, point, known)
    return pm if pm is not None and pm.fits else None


def advise(
    prep: Prepared, memory: PointMemory, known: Known | None = None, over: Over | None = None
) -> Advice:
    """What overflows on ``memory``'s tightest GPU and the first change of :data:`CHANGES`
    that fits (module doc); ``known``, ``over``: answers to reuse (and fill)."""
    known = {} if known is None else known
    over = set() if over is None else over
    tight = memory.tightest
    state = sum(tight.by_category.get(c, 0.0) for c in ("weights", "gradients", "optimizer"))
    advice = Advice(overflowing(tight), -tight.headroom_bytes, state_bytes=state,
                    capacity_bytes=tight.capacity_bytes)  # fmt: skip
    for label, make in CHANGES:
        changed = make(memory.point)
        if changed is None:
            continue
        pm = _fitting(prep, changed, known, over)
        if pm is not None:
            dev = pm.tightest.device_bytes
            return Advice(advice.category, advice.over_bytes, label, changed, dev)
    return advice


def grid_memory(
    prep: Prepared,
    points: list[PointConfig],
    *,
    advice: bool = True,
    on_done: Callable[[int], None] | None = None,
    jobs: int = 1,
) -> list[GridMemory]:
    """Each point's peaks per pipeline rank (module doc), with :func:`advise` for those that
    do not fit (``advice=False``: none). Points that cannot be resolved carry the reason.
    ``on_done(n)``: called as each point is done (its advice included), for a progress bar.
    ``jobs``: worker processes computing the points and their advice ahead
    (:func:`sim.plan.memory_jobs.ahead`; the same answers)."""
    known: Known = {}
    over: Over = set()
    out = []
    with ahead(prep, points, jobs, partial(_memo_point, advice=advice)) as computed:
        for point, answer in zip(points, computed, strict=True):
            out.append(answer or _point(prep, point, known, over, advice))
            if on_done:
                on_done(len(out))
    return out


def _memo_point(prep: Prepared, point: PointConfig, memo: dict, advice: bool) -> GridMemory:
    """:func:`_point` with ``known`` and ``over`` kept in ``memo`` (a worker's,
    :func:`sim.plan.memory_jobs.ahead`)."""
    return _point(prep, point, memo.setdefault("known", {}), memo.setdefault("over", set()), advice)


def _point(
    prep: Prepared, point: PointConfig, known: Known, over: Over, advice: bool
) -> GridMemory:
    """One point of :func:`grid_memory` (``known``, ``over``: answers to reuse, filled by the
    advice of earlier points too)."""
    memory = known.get(point)
    if memory is None:
        try:
            memory = known[point] = point_memory(prep, point)
        except InputError as exc:
            known[point] = None
            return GridMemory(point, None, str(exc))
    if advice and not memory.fits:
        return GridMemory(point, memory, advice=advise(prep, memory, known, over))
    return GridMemory(point, memory)

"""The planner: which grid points to simulate, pruned by bounds (branch and bound).

Before simulating, every point gets the bounds of :mod:`sim.plan.bounds`:

1. **memory**: a point whose memory lower bound exceeds the largest GPU's capacity cannot fit;
   it is not simulated, and its row says ``fits = False`` with the error
   ``pruned: memory lower bound X GiB > capacity Y GiB``;
2. **throughput**: the others are simulated in descending order of their throughput upper
   bound, a batch at a time, so that the fastest configurations come first. Once a
   configuration of a model and memory policy fits, a point of that model and policy whose
   upper bound is below the best throughput found is not simulated: it cannot win (its row
   says ``pruned: throughput upper bound X samples/s < best Y samples/s``). The best is kept
   per policy, not per model, so the memory summary's "fastest per policy" and "largest model
   per policy" are those of an exhaustive sweep too.

Pruned rows carry no measurements, like the rows of points that could not be simulated, so
plots and summaries leave them out; the winner is the one an exhaustive sweep finds (ties
included: a point is pruned only when its bound is strictly below the best). When no point of
a model fits, its memory-pruned points are simulated after all, so that ``results.csv`` shows
their peaks and the GPU that overflows, as without pruning. ``sweep.prune:
false`` or ``sim run --exhaustive`` simulates every point.

Example::

    rows, stats = plan_points(prep, points, cache_dir=None, executor=LocalExecutor(prep, 2))
    print(stats.summary())
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.plan.bounds import BoundModel, PointBounds
from sim.plan.executors import Executor
from sim.plan.point_row import pruned_row
from sim.plan.rowcache import open_cache, run_points, stale_cache_note
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.rows import PRUNED, BestRows, ResultRow

BATCH_PER_JOB = 2
"""Points simulated per worker between two updates of the best throughput: more keeps the
workers busy, fewer prunes more."""

BOUND_SLACK = 1e-9
"""Relative slack on the throughput bound before it prunes: the simulator's float sums may round
a throughput equal to the bound a few ulps above it."""

GIB = 2**30


@dataclass
class PlanStats:
    """What the planner did with a grid (counts of points).

    Attributes:
        expanded: points of the grid (valid combinations).
        pruned_memory: not simulated: their memory lower bound exceeds the capacity (before
            or after resolving them).
        pruned_resolved: of those, how many were pruned once resolved (partitioned).
        pruned_bound: not simulated: their throughput upper bound is below the best found.
        simulated: simulated (or read from the cache).
        cached: of those, how many were read from the row cache (a rerun's reuse).
        prune: whether pruning was on.
    """

    expanded: int = 0
    pruned_memory: int = 0
    pruned_resolved: int = 0
    pruned_bound: int = 0
    simulated: int = 0
    cached: int = 0
    prune: bool = True

    def summary(self) -> str:
        """One line for the console."""
        reused = f" ({self.cached} of them read from the cache)" if self.cached else ""
        if not self.prune:
            return f"planner: exhaustive, {self.simulated} of {self.expanded} simulated{reused}"
        return (
            f"planner: {self.expanded} configuration{'' if self.expanded == 1 else 's'}, "
            f"{self.pruned_memory} pruned by the "
            f"memory lower bound ({self.pruned_resolved} once partitioned), {self.pruned_bound} by the throughput bound, "
            f"{self.simulated} simulated{reused}"
        )

    def add_cached(self, n: int) -> None:
        """Count ``n`` more rows read from the row cache."""
        self.cached += n

    def as_dict(self) -> dict:
        """For ``config.resolved.yaml`` (less ``cached``: a rerun writes the same file)."""
        return {k: v for k, v in self.__dict__.items() if k != "cached"}


def point_bounds(model: BoundModel, point: PointConfig) -> PointBounds | None:
    """The bounds of ``point``, or None when they cannot be computed (the point is then always
    simulated, and the simulator reports what is wrong with it: bad input in its ``error``,
    an unexpected exception as an internal error, :func:`sim.plan.point_row.point_row`)."""
    try:
        return model.bounds(point)
    except Exception:  # noqa: BLE001 - a bound is an optimisation; the simulation judges
        return None


def plan_points(
    prep: Prepared,
    points: list[PointConfig],
    *,
    cache_dir: Path | None,
    executor: Executor,
    prune: bool = True,
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    winners: BestRows | None = None,
) -> tuple[list[ResultRow], PlanStats]:
    """A row per point, in the order of ``points``, simulating only what can win.

    Args:
        prep: the loaded experiment.
        points: grid points (:func:`sim.plan.sweep.expand`).
        cache_dir: row cache (:func:`sim.plan.rowcache.run_points`); pruned rows are not cached.
        executor: where points are simulated (:mod:`sim.plan.executors`).
        prune: False: simulate every point (``--exhaustive``).
        jobs: workers of ``executor`` (sets the batch size).
        on_done: called with the number of rows finished so far.
        on_warning: called with each cache warning, and once when the cache's rows were made
            by another pipesim (:func:`~sim.plan.rowcache.stale_cache_note`).
        winners: filled with each model's best row and, where it was simulated here, its event
            log (:class:`~sim.point.rows.BestRows`), so the winner is not simulated again.

    Returns:
        The rows and :class:`PlanStats`.
    """
    with open_cache(cache_dir) if cache_dir else nullcontext() as cache:  # once per sweep
        note = stale_cache_note(cache) if cache is not None else None
        if note and on_warning:  # an upgrade made every row's key new: say why all rerun
            on_warning(note)
        return _plan(prep, points, cache, executor, prune, jobs, on_done, on_warning, winners)


def _plan(
    prep: Prepared,
    points: list[PointConfig],
    cache: Any,
    executor: Executor,
    prune: bool,
    jobs: int,
    on_done: Callable[[int], None] | None,
    on_warning: Callable[[str], None] | None,
    winners: BestRows | None,
) -> tuple[list[ResultRow], PlanStats]:
    """:func:`plan_points` with its row cache open (``cache``: a :class:`diskcache.Cache`
    from :func:`sim.plan.rowcache.open_cache`, or None)."""
    stats = PlanStats(expanded=len(points), prune=prune)
    if not prune:
        rows = run_points(
            prep,
            points,
            cache_dir=None,
            cache=cache,
            executor=executor,
            on_done=on_done,
            on_warning=on_warning,
            best=winners,
            on_cached=stats.add_cached,
        )
        stats.simulated = len(points)
        return rows, stats
    model = BoundModel(prep)
    bounds = [point_bounds(model, p) for p in points]
    out: list[ResultRow | None] = [None] * len(points)
    done = 0

    def finished(i: int, row: ResultRow) -> None:
        nonlocal done
        out[i] = row
        done += 1
        if on_done:
            on_done(done)

    todo = _fitting(prep, points, bounds, model.capacity_bytes, finished, stats)
    todo.sort(key=lambda i: (-_upper(bounds[i]), i))
    best: dict[tuple[str, str], float] = {}  # per (model, memory policy)
    size = max(1, jobs * BATCH_PER_JOB)
    queue = deque(todo)
    while queue:
        batch = _next_batch(prep, points, bounds, queue, size, best, finished, stats)
        if not batch:
            continue
        rows = run_points(
            prep,
            [points[i] for i in batch],
            cache_dir=None,
            cache=cache,
            executor=executor,
            on_done=_offset(on_done, done),
            on_warning=on_warning,
            screen=True,
            best=winners,
            on_cached=stats.add_cached,
        )
        for i, row in zip(batch, rows, strict=True):
            out[i] = row
            if row.ok and row.throughput_samples_per_s is not None:
                key = (row.model, row.memory_policy)
                best[key] = max(best.get(key, -1.0), row.throughput_samples_per_s)
        done += len(batch)
        screened = sum(r.error.startswith(PRUNED) for r in rows)
        stats.pruned_memory += screened
        stats.pruned_resolved += screened
        stats.simulated += len(batch) - screened
    _diagnose(prep, points, out, stats, cache, executor, on_warning)
    return out, stats  # type: ignore[return-value]


def _fitting(
    prep: Prepared,
    points: list[PointConfig],
    bounds: list[PointBounds | None],
    capacity_bytes: float,
    finished: Callable[[int, ResultRow], None],
    stats: PlanStats,
) -> list[int]:
    """The indices of the ``points`` whose memory lower bound fits in ``capacity_bytes`` (or
    that have no bound); each other one is ``finished`` as a pruned row and counted in
    ``stats.pruned_memory``."""
    todo = []
    for i, (p, b) in enumerate(zip(points, bounds, strict=True)):
        if b is not None and b.memory_bytes > capacity_bytes:
            cap = capacity_bytes
            reason = (
                f"memory lower bound {b.memory_bytes / GIB:.2f} GiB > capacity {cap / GIB:.2f} GiB"
            )
            finished(i, pruned_row(prep, p, reason))
            stats.pruned_memory += 1
        else:
            todo.append(i)
    return todo


def _next_batch(
    prep: Prepared,
    points: list[PointConfig],
    bounds: list[PointBounds | None],
    queue: deque[int],
    size: int,
    best: dict[tuple[str, str], float],
    finished: Callable[[int, ResultRow], None],
    stats: PlanStats,
) -> list[int]:
    """Up to ``size`` indices taken from the front of ``queue`` to simulate: each point whose
    throughput upper bound (samples/s, with :data:`BOUND_SLACK`) is below the ``best`` row of
    its model and memory policy so far is ``finished`` as a pruned row instead and counted in
    ``stats.pruned_bound``."""
    batch: list[int] = []
    while queue and len(batch) < size:
        i = queue.popleft()
        p, ub = points[i], _upper(bounds[i])
        key = (p.model, p.memory_policy)
        if ub * (1 + BOUND_SLACK) < best.get(key, -1.0):
            reason = (
                f"throughput upper bound {ub:.4g} samples/s < best "
                f"{best[key]:.4g} samples/s of {p.memory_policy}"
            )
            finished(i, pruned_row(prep, p, reason))
            stats.pruned_bound += 1
        else:
            batch.append(i)
    return batch


def _diagnose(prep, points, out, stats, cache, executor, on_warning) -> None:
    """Simulate the memory-pruned points of every model none of whose points fits, so that
    ``results.csv`` shows each one's peak memory and the GPU that overflows (what a user needs
    to change the grid), as an exhaustive sweep would."""
    fitting = {r.model for r in out if r is not None and r.ok}
    redo = [
        i
        for i, r in enumerate(out)
        if r is not None and r.model not in fitting and r.error.startswith(PRUNED)
    ]
    if not redo:
        return
    rows = run_points(
        prep,
        [points[i] for i in redo],
        cache_dir=None,
        cache=cache,
        executor=executor,
        on_warning=on_warning,
        on_cached=stats.add_cached,
    )
    stats.pruned_resolved -= sum("as partitioned" in out[i].error for i in redo)
    for i, row in zip(redo, rows, strict=True):
        out[i] = row
    stats.pruned_memory -= len(redo)
    stats.simulated += len(redo)


def _offset(on_done: Callable[[int], None] | None, base: int) -> Callable[[int], None] | None:
    """``on_done`` counting from ``base``: rows finished before this batch."""
    if on_done is None:
        return None
    return lambda n: on_done(base + n)


def _upper(b: PointBounds | None) -> float:
    return float("inf") if b is None else b.throughput_samples_per_s

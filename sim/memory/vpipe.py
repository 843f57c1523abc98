"""Policy ``vpipe`` (vPipe, Zhao et al., "vPipe: A Virtualized Acceleration System for Achieving
Efficient and Scalable Pipeline Parallel DNN Training", IEEE TPDS 33(3), 2022,
doi:10.1109/TPDS.2021.3094364; memory.md §5.5): per layer of every stage, keep its stash, swap it
to host memory or recompute it, with the layers repartitioned across the stages.

vPipe sits under a pipeline trainer (PipeDream's asynchronous 1F1B or GPipe's synchronous
schedule) and searches "a near-optimal layer partitioning and memory management plan" (abstract):
the partition and, for each layer, swap / recompute / keep, so that the pipeline's slowest stage,
its swaps and recomputes included, is as fast as can be while every stage fits its GPU. The
paper's text was not available to this project (memory.md §5.5 records it from secondary
sources), so pipesim implements that objective with its own estimates rather than vPipe's
online search:

* **Per stage** (:func:`~sim.memory.search.best_option`): the cheapest plan that fits among
  keeping everything; recomputing the ``k`` layers that save the most bytes per second of
  forward (every ``k``, with and without selective recompute of the rest); each with the
  smallest host swap of the remaining stash that brings the stage under its budget. Its cost
  is the seconds it adds per iteration: ``m`` recomputes and the swap time the compute does not
  hide (:func:`~sim.memory.estimate.swap_exposed_s`).
* **Repartition** (:meth:`VPipePolicy.repartition`): starting from the partition pipesim would
  choose (the memory-aware bottleneck partition, :mod:`sim.parallel.partition`), move a stage
  boundary by one layer at a time, taking the move that lowers the bottleneck most, until no
  move helps. A stage's time per iteration is ``m * (forward + backward)`` of its layers plus its
  plan's added seconds; while some stage fits no plan, a move must first lower how far the worst
  stage is over its budget. (vPipe moves layers live between GPUs as it re-plans; pipesim
  simulates the steady state the moves lead to.)

Model states stay on the GPU (vPipe manages activations); the weight versions PipeDream stashes
count against each stage's budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.memory.base import MemoryPolicy
from sim.memory.compose import describe, ms
from sim.memory.context import StageContext
from sim.memory.estimate import budget_bytes
from sim.memory.plan import StagePlan
from sim.memory.search import Option, best_option
from sim.memory.states import StateBytes, stage_state_bytes_per_param

Contexts = Callable[[tuple[int, ...]], Sequence[StageContext]]
"""``boundaries -> one StageContext per stage`` (one data-parallel replica)."""

MAX_MOVES = 10_000
"""A bound on the repartition's moves (each improves the bottleneck, so it ends well before)."""


def stage_cost(ctx: StageContext, opt: Option) -> tuple[float, float]:
    """``(bytes over budget, seconds per iteration)`` of the stage under ``opt``: how far its
    planned peak is above its budget (0 when it fits), and ``m * (fwd + bwd)`` of its layers
    plus the option's added seconds."""
    over = max(0.0, opt.peak_bytes - budget_bytes(ctx))
    return over, ctx.microbatches * (ctx.fwd_s + ctx.bwd_s) + opt.added_s


def _better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether bottleneck ``a`` beats ``b``: less over budget, or as little and faster."""
    if a[0] < b[0] * (1 - 1e-9) - 1.0:
        return True
    return a[0] <= b[0] + 1.0 and a[1] < b[1] * (1 - 1e-9)


def moves(boundaries: tuple[int, ...], n_layers: int) -> list[tuple[int, ...]]:
    """Every partition one boundary-by-one-layer away from ``boundaries`` (stages stay
    non-empty).

    Example:
        >>> moves((0, 2, 4), 6)
        [(0, 1, 4), (0, 3, 4), (0, 2, 3), (0, 2, 5)]
    """
    out = []
    edges = list(boundaries) + [n_layers]
    for j in range(1, len(boundaries)):
        for d in (-1, 1):
            b = boundaries[j] + d
            if edges[j - 1] < b < edges[j + 1]:
                out.append(boundaries[:j] + (b,) + boundaries[j + 1 :])
    return out


class VPipePolicy(MemoryPolicy):
    """vPipe: per-layer keep / swap / recompute, layers repartitioned (module doc)."""

    name = "vpipe"
    description = "per layer keep / swap to host / recompute, layers repartitioned (vPipe)"
    repartitions = True

    def plan(self, ctx: StageContext) -> StagePlan:
        opt = best_option(ctx)
        return describe(ctx, opt.plan, f"vpipe: {opt.label}", opt.added_s)

    def repartition(
        self, boundaries: tuple[int, ...], n_layers: int, contexts: Contexts
    ) -> tuple[tuple[int, ...], dict]:
        """The partition the local search ends at (module doc), and notes: the bottleneck
        seconds per iteration before and after, and the moves taken."""
        cache: dict[tuple[int, int, int], tuple[float, float]] = {}

        def bottleneck(b: tuple[int, ...]) -> tuple[float, float]:
            """``(most bytes any stage is over budget, slowest stage's seconds)``."""
            edges = list(b) + [n_layers]
            keys = [(s, edges[s], edges[s + 1]) for s in range(len(b))]
            todo = [s for s, k in enumerate(keys) if k not in cache]
            if todo:
                ctxs = contexts(b)
                for s in todo:
                    cache[keys[s]] = stage_cost(ctxs[s], best_option(ctxs[s]))
            return max(cache[k][0] for k in keys), max(cache[k][1] for k in keys)

        cur = tuple(boundaries)
        start = best = bottleneck(cur)
        taken = 0
        for _ in range(MAX_MOVES):
            cands = [(bottleneck(b), b) for b in moves(cur, n_layers)]
            if not cands:
                break
            cost, nxt = min(cands)
            if not _better(cost, best):
                break
            cur, best, taken = nxt, cost, taken + 1
        notes = {
            "repartition_moves": taken,
            "bottleneck_ms_before": ms(start[1]),
            "bottleneck_ms_after": ms(best[1]),
            "gib_over_budget_after": round(best[0] / 2**30, 3),
        }
        return cur, notes

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Every model state stays on the GPU (only stashes are swapped or recomputed)."""
        return stage_state_bytes_per_param(states, versions, version_bytes)

"""A point's peak memory per pipeline rank, without simulating it.

:func:`point_memory` resolves what memory depends on, as :func:`sim.point.simulate.resolve`
does (the framework's schedule and memory layout, the rank trace, the partition, the policy's
plans) but for one data-parallel replica and tensor rank only (the others are alike: the rank
trace is the busiest expert-parallel rank's), and gives each pipeline rank's peak by category
(:func:`sim.memory.rank_memory.rank_memory`). ``sim memory``, the planner's memory bound
(:mod:`sim.plan.bounds`) and the engine's charges at t = 0 (:func:`sim.memory.compose.
finalize_plans`) all count the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.memory.context import StageContext
from sim.memory.layer_work import with_framework_stash
from sim.memory.rank_memory import RankMemory, rank_memory
from sim.parallel.decoder_shard import DecoderShard
from sim.point.checked import checked_schedule, checked_shard
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.plans import layer_works, plan_contexts, stage_low_params, stepped
from sim.point.stages import stage_contexts
from sim.point.staging import stage_point
from sim.trace.shared import place_shared


@dataclass(frozen=True)
class PointMemory:
    """Each pipeline rank's peak of a point (rank 0 first).

    Attributes:
        point: the configuration.
        ranks: :class:`~sim.memory.rank_memory.RankMemory` per pipeline rank.
        boundaries: stage start-layer indices.
    """

    point: PointConfig
    ranks: tuple[RankMemory, ...]
    boundaries: tuple[int, ...]

    @property
    def tightest(self) -> RankMemory:
        """The rank with the least headroom (the first on ties)."""
        return min(self.ranks, key=lambda r: r.headroom_bytes)

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.ranks)


def point_memory(prep: Prepared, point: PointConfig, *, replay: bool = True) -> PointMemory:
    """Each pipeline rank's peak memory of ``point`` (module doc).

    ``replay=False``: a lower bound of each rank's bytes, cheaper, for ruling a point out (its
    ``fits`` False means the point does not fit): the allocator replay's margin
    (:func:`~sim.memory.tensor_program.allocator_margin_bytes`, at least 0) is taken as 0
    where the plans' other bytes cannot depend on it (FSDP's states, planned once, or a policy
    that does not plan to the capacity, :attr:`~sim.memory.base.MemoryPolicy.
    plans_to_capacity`); elsewhere the exact peaks.

    Raises:
        InputError: what :func:`~sim.point.simulate.resolve` raises for the point.
    """
    exp, topo, file = prep.exp, prep.topology, prep.file
    base = prep.traces[point.model]
    framework, schedule, policy = checked_schedule(point, topo, base, file)
    sharded = checked_shard(lambda: prep.rank_trace(point, point.microbatch_size), file)
    memory = framework.memory(
        base.dtype, topo.gpus[0].model, exp.memory, fsdp=framework.runs_fsdp(point.layout)
    )
    works = layer_works(sharded, point, memory)
    trace = framework.tie(
        with_framework_stash(sharded.trace, works), schedule, point.tensor_parallel
    )
    iterations = exp.training.iterations or schedule.steady_state_iterations()
    staged = stage_point(
        exp, topo, point, framework, schedule, schedule.program(iterations), trace, file
    )
    program, combined, in_flight = staged.program, staged.combined, staged.in_flight
    layout, boundaries = staged.layout, staged.boundaries
    ranks = [schedule.stage_rank(s) for s in range(schedule.num_stages)]
    trace, _ = place_shared(trace, boundaries, ranks)
    contexts = stage_contexts(
        topo,
        trace,
        boundaries,
        (layout.per_stage[0],),
        schedule,
        in_flight,
        exp,
        program,
        layout.job_gpus,
        sharded.expert_bytes if isinstance(sharded, DecoderShard) else (),
        point.expert_parallel,
        memory,
        works,
        (point.tensor_parallel, point.context_parallel),
        point.layout.expert_dp if point.expert_parallel > 1 else 0,
        combined,
    )[0]
    contexts = [_with_width(c, point) for c in contexts]
    low = (*stage_low_params(sharded, boundaries), topo.gpus[0].compute)
    bound = not replay and (framework.runs_fsdp(point.layout) or not policy.plans_to_capacity)
    plans = plan_contexts(
        exp, point, policy, framework, contexts, memory, trace.dtype, low,
        schedule.num_stages, file, mirror=False, replay=not bound,
    )  # fmt: skip
    by_rank: dict[int, list] = {}
    for ctx, plan in zip(contexts, plans, strict=True):
        by_rank.setdefault(schedule.stage_rank(ctx.stage), []).append((ctx, stepped(exp, plan)))
    out = tuple(rank_memory(by_rank[r]) for r in sorted(by_rank))
    return PointMemory(point, out, tuple(boundaries))


def _with_width(ctx: StageContext, point: PointConfig) -> StageContext:
    """A replica-0 context that still sees the point's data-parallel width (the contexts were
    built for one row of the placement)."""
    return replace(ctx, dp_width=point.layout.replicas)

"""Resolve and simulate one grid point: from (experiment, point) to an event log and metrics.

:func:`resolve` brings the trace to the point's micro-batch size and tensor-parallel shard,
partitions it into stages, places the stages on GPUs, builds the schedule's program and the
memory policy's plans (:mod:`sim.point.stages`); :func:`evaluate` runs the engine and computes
the metrics. Its result row and cache key are :mod:`sim.plan.point_row`'s. Inputs that cannot be
resolved raise :class:`~sim.errors.InputError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.config import ExperimentConfig
from sim.engine import SimInput, simulate
from sim.engine.periodic import Repeated, simulate_periodic
from sim.engine.stage_cost import DEFAULT_INPUT_SHARE, StageCost
from sim.errors import InputError
from sim.events import EventLog
from sim.framework.base import Framework
from sim.hardware.topology import Topology
from sim.memory.base import MemoryPolicy
from sim.memory.layer_work import with_framework_stash
from sim.memory.plan import StagePlan
from sim.metrics import Metrics, compute_metrics
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.rank import rank_trace
from sim.parallel.shard import ShardedTrace
from sim.point.checked import (
    checked_precision,
    checked_schedule,
    checked_shard,
)
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.mirroring import mirror_intended, simulated
from sim.point.overlap_costs import with_framework
from sim.point.plans import layer_works, memory_plans, repartition, stage_low_params
from sim.point.stage_costs import stage_costs, with_recompute_comm, with_recompute_syncs
from sim.point.stages import Grid
from sim.point.staging import stage_point
from sim.schedules.base import Schedule
from sim.trace.adapt import adapt_trace
from sim.trace.schema import Trace
from sim.trace.shared import place_shared


@dataclass
class Resolved:
    """A point with everything the engine needs, plus what the user may want to see.

    ``placement`` is the GPU of each ``[replica][rank]``; ``sim_input.placement`` that of each
    ``[replica][stage]`` (the same when ``v = 1``)."""

    point: PointConfig
    schedule: Schedule
    trace: Trace
    boundaries: tuple[int, ...]
    placement: Grid
    sim_input: SimInput
    iterations: int
    compute_notes: tuple[str, ...] = ()
    steady: bool = False
    """Whether its steady state may be simulated periodically (:mod:`sim.engine.periodic`):
    ``options.simulation`` asks for the symmetric shortcuts and the input is mirrored or has
    one replica and one tensor rank (nothing to mirror)."""


def resolve(
    exp: ExperimentConfig,
    point: PointConfig,
    topo: Topology,
    base_trace: Trace,
    *,
    file: str = "<experiment>",
    shared: Prepared | None = None,
) -> Resolved:
    """Resolve a point (see module doc). ``shared``: the prepared experiment ``base_trace``
    comes from, whose adapted and rank traces are computed once per key and reused
    (:meth:`~sim.point.experiment.Prepared.rank_trace`); without it they are derived here.

    Raises:
        InputError: unknown schedule or policy, m < p where the schedule needs m >= p, too
            many GPUs, more stages than layers, bad fixed boundaries or placement.
    """
    # Long: its steps are functions; left are their order and SimInput's fields.
    framework, schedule, policy = checked_schedule(point, topo, base_trace, file)
    sharded, notes = _rank_trace(exp, point, topo, base_trace, file, shared)
    memory = framework.memory(
        base_trace.dtype, topo.gpus[0].model, exp.memory, fsdp=framework.runs_fsdp(point.layout)
    )
    works = layer_works(sharded, point, memory)
    trace = with_framework_stash(sharded.trace, works)
    trace = framework.tie(trace, schedule, point.tensor_parallel)
    iterations = exp.training.iterations or schedule.steady_state_iterations()
    staged = stage_point(
        exp, topo, point, framework, schedule, schedule.shared_program(iterations), trace, file
    )
    program, combined, in_flight = staged.program, staged.combined, staged.in_flight
    layout, boundaries = staged.layout, staged.boundaries
    if policy.repartitions and exp.options.boundaries is None:
        boundaries, moved = repartition(
            policy,
            boundaries,
            (exp, point, topo, trace, schedule, program, in_flight, layout, memory, works),
        )
        notes = [*notes, moved]
    ranks = [schedule.stage_rank(s) for s in range(schedule.num_stages)]
    trace, tied = place_shared(trace, boundaries, ranks)
    plans, tensor_plans = memory_plans(
        exp,
        point,
        policy,
        framework,
        topo,
        trace,
        schedule,
        program,
        in_flight,
        boundaries,
        layout,
        sharded.expert_bytes if isinstance(sharded, DecoderShard) else (),
        file,
        memory,
        works,
        stage_low_params(sharded, boundaries),
        combined,
    )
    costs = _stage_costs(sharded, boundaries, plans, policy, framework, topo, file)
    if schedule.splits_backward and not all(c.has_split for c in costs):
        notes = [*notes, split_note(schedule.name)]
    sim_input = SimInput(
        topo,
        costs,
        program,
        point.microbatches,
        layout.per_stage,
        plans,
        tensor_groups=layout.stage_groups if point.tensor_parallel > 1 else (),
        tensor_plans=tensor_plans if point.tensor_parallel > 1 else (),
        layout=point.layout,
        overlap_pairs=point.ep_overlap or combined,
        combined_pairs=combined,
        dp_bucket_bytes=framework.bucket_bytes(trace, point.layout.replicas),
        runtime=replace(
            framework.runtime(topo, trace, point.tensor_parallel, point.virtual_stages, memory),
            tied_groups=framework.tied_grad_groups(tied, trace, memory),
        ),
        stragglers=tuple(sorted(exp.options.stragglers.items())),
    )
    sim_input, note = simulated(exp, point, sim_input)
    if note is not None:
        notes = [*notes, note]
    single = sim_input.dp_width == 1 and sim_input.tensor_parallel == 1
    return Resolved(
        point,
        schedule,
        trace,
        tuple(boundaries),
        layout.placement,
        sim_input,
        iterations,
        tuple(notes),
        steady=sim_input.mirrored or (single and mirror_intended(exp, point)),
    )


def _rank_trace(
    exp: ExperimentConfig,
    point: PointConfig,
    topo: Topology,
    base_trace: Trace,
    file: str,
    shared: Prepared | None,
) -> tuple[ShardedTrace | DecoderShard, list[str]]:
    """The point's trace on one rank (adapted to its micro-batch size, GPU and precision, then
    split: :func:`~sim.parallel.rank.rank_trace`), and the adaptation's notes; from
    ``shared``'s cache when given.

    Raises:
        InputError: what :func:`checked_precision` and :func:`checked_shard` raise.
    """
    if shared is not None:
        _, cached = shared.adapted(point.model, point.microbatch_size, point.precision)
        sharded = checked_shard(lambda: shared.rank_trace(point, point.microbatch_size), file)
        return sharded, list(cached)
    low = checked_precision(exp, point, file)
    trace, adapted = adapt_trace(base_trace, point.microbatch_size, topo.gpus[0].compute, low)
    return checked_shard(lambda: rank_trace(trace, point, *_gpu_model(topo)), file), list(adapted)


def _stage_costs(
    sharded: ShardedTrace | DecoderShard,
    boundaries: Sequence[int],
    plans: Sequence[Sequence[StagePlan]],
    policy: MemoryPolicy,
    framework: Framework,
    topo: Topology,
    file: str,
) -> tuple[StageCost, ...]:
    """Each stage's device work: its layers' times (:func:`stage_costs`), the policy's
    recompute collectives and syncs, and the framework's work around them
    (:func:`~sim.point.overlap_costs.with_framework`).

    Raises:
        InputError: the framework cannot run the stage (field ``framework``).
    """
    costs = with_recompute_comm(stage_costs(sharded, boundaries), sharded, boundaries, plans)
    costs = with_recompute_syncs(costs, sharded, boundaries, policy)
    try:
        return with_framework(costs, sharded, boundaries, plans, framework, topo.gpus[0].compute)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="framework") from None


def _gpu_model(topo: Topology):
    """The first GPU's compute model, tensor-parallel module overhead and host overhead."""
    gpu = topo.gpus[0]
    return gpu.compute, gpu.tp_module_overhead_s, topo.host(gpu.host).overhead


def split_note(schedule: str) -> str:
    """The note a result carries when a split-backward schedule runs on a trace without
    ``bwd_input_s`` / ``bwd_weight_s``."""
    return (
        f"assumption: {schedule} splits the backward into I and W but the trace has no "
        f"bwd_input_s/bwd_weight_s; I = {DEFAULT_INPUT_SHARE:g} x bwd_s, W = the rest"
    )


def evaluate(res: Resolved) -> tuple[Metrics, EventLog]:
    """Simulate a resolved point and compute its metrics."""
    log, repeated = _simulate(res)
    p = res.point
    metrics = compute_metrics(
        log,
        stages=p.stages,
        microbatches=p.microbatches,
        synchronous=res.schedule.synchronous,
        fill_microbatches=res.schedule.fill_microbatches(),
        samples_per_step=p.microbatches * p.microbatch_size * p.dp_width,
        tensor_parallel=p.tensor_parallel,
        repeated=repeated,
    )
    log.meta.update(
        boundaries=list(res.boundaries),
        placement=stage_placement_json(res),
        schedule=p.schedule,
        microbatches=p.microbatches,
        policy_notes=policy_notes(res),
        compute_notes=[
            *res.compute_notes,
            *([log.meta["periodic"]] if "periodic" in log.meta else []),
        ],
    )
    return metrics, log


def _simulate(res: Resolved) -> tuple[EventLog, Repeated | None]:
    """The engine's log of ``res``: a mirrored point (:mod:`sim.engine.symmetry`), or one with
    nothing to mirror where the shortcuts are asked for (:attr:`Resolved.steady`), runs its
    steady state periodically where it can (:mod:`sim.engine.periodic`), any other in full."""
    if res.steady:
        return simulate_periodic(res.sim_input, res.schedule)
    return simulate(res.sim_input), None


def placement_json(res: Resolved) -> list:
    """GPU per ``[replica][stage]``, or per ``[replica][stage][tensor rank]`` with tensor
    parallelism."""
    groups = res.sim_input.tensor_groups
    if groups:
        return [[list(g) for g in row] for row in groups]
    return [list(r) for r in res.placement]


def stage_placement_json(res: Resolved) -> list:
    """GPU per ``[replica][stage]`` over all ``p x v`` stage chunks (``[replica][stage][tensor
    rank]`` with tensor parallelism), for the plots' stage labels (:mod:`sim.report.scale`):
    :func:`placement_json` lists ranks, not chunks, without tensor parallelism, so a rank
    holding stages 0, 4, 8, 12 was labelled 'stage 0'."""
    groups = res.sim_input.tensor_groups
    if groups:
        return [[list(g) for g in row] for row in groups]
    return [list(r) for r in res.sim_input.placement]


def policy_notes(res: Resolved) -> dict:
    """The memory policy's notes per stage (replica 0; other replicas when they differ)."""
    out: dict = {"policy": res.point.memory_policy}
    for r, row in enumerate(res.sim_input.plans):
        for s, plan in enumerate(row):
            if plan.notes and (r == 0 or plan.notes != res.sim_input.plans[0][s].notes):
                out[f"s{s}" if r == 0 else f"r{r}s{s}"] = plan.notes
    return out

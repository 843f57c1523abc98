"""Evaluate one grid point: from (experiment, point) to a result row.

This is the pure function the sweep maps over: it resolves the point (trace at the
micro-batch size, partition, placement, schedule program, memory plans), runs the engine and
computes the metrics. Inputs that cannot be resolved raise :class:`~sim.errors.InputError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.compute.adapt import adapt_trace
from sim.config import ExperimentConfig, PointConfig
from sim.engine import SimInput, StageCost, simulate
from sim.errors import InputError
from sim.events import EventLog
from sim.framework.base import Framework
from sim.framework.registry import get_framework
from sim.hardware.topology import Topology
from sim.memory.base import StageContext
from sim.memory.compose import finalize_plans
from sim.memory.estimate import host_link_sharers
from sim.memory.registry import get_policy
from sim.memory.reserve import tensor_capacity_bytes
from sim.memory.states import stage_state_bytes_per_param, state_bytes, version_bytes_per_param
from sim.metrics import Metrics, compute_metrics
from sim.partition import partition, uniform_partition
from sim.placement import place
from sim.schedules.action import STEP, Program, flatten
from sim.schedules.analysis import peak_in_flight_per_stage
from sim.schedules.base import Schedule, ScheduleError
from sim.schedules.registry import get_schedule
from sim.tensor.decoder_shard import DecoderShard
from sim.tensor.groups import tensor_groups
from sim.tensor.megatron import aggregate
from sim.tensor.ops import aggregate as aggregate_groups
from sim.tensor.rank import rank_trace
from sim.tensor.shard import ShardedTrace
from sim.trace.schema import Trace, dtype_bytes
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
    placement: tuple[tuple[int, ...], ...]
    sim_input: SimInput
    iterations: int
    compute_notes: tuple[str, ...] = ()


def make_schedule(
    name: str,
    stages: int,
    microbatches: int,
    *,
    file: str = "<experiment>",
    field: str = "sweep.schedule",
    virtual_stages: int | None = None,
    framework: Framework | None = None,
) -> Schedule:
    """Instantiate a schedule as ``framework`` runs it (default: pipesim's torch rules),
    turning its errors into :class:`InputError`.

    Raises:
        InputError: an unknown name, a schedule the framework does not run, or a
            combination the schedule refuses.
    """
    cls = check_schedule_name(name, file=file, field=field)
    fw = framework or get_framework("pipesim")
    why = fw.schedule_reason(cls)
    if why:
        raise InputError(why, file=file, field=field)
    try:
        return fw.make_schedule(cls, stages, microbatches, virtual_stages)
    except ScheduleError as exc:
        raise InputError(str(exc), file=file, field="sweep.stages") from None


def point_framework(point: PointConfig, file: str = "<experiment>") -> Framework:
    """The framework profile of ``point``.

    Raises:
        InputError: an unknown name (field ``framework``), listing the valid ones.
    """
    try:
        return get_framework(point.framework)
    except KeyError as exc:
        raise InputError(str(exc), file=file, field="framework") from None


def check_schedule_name(
    name: str, *, file: str = "<experiment>", field: str = "sweep.schedule"
) -> type[Schedule]:
    """The schedule class of ``name``.

    Raises:
        InputError: an unknown name, listing the valid ones.
    """
    try:
        return get_schedule(name)
    except KeyError as exc:
        raise InputError(str(exc.args[0]), file=file, field=field) from None


def stage_contexts(
    topo: Topology,
    trace: Trace,
    boundaries,
    placement,
    schedule: Schedule,
    in_flight: list[int],
    exp: ExperimentConfig,
    program: Program | None = None,
    job_gpus: list[int] | None = None,
    expert_bytes: tuple[float, ...] = (),
    expert_parallel: int = 1,
) -> list[list[StageContext]]:
    """One :class:`StageContext` per ``[replica][stage]`` (``placement`` per stage; the
    stage chunks of one rank share its GPU; ``job_gpus``: every GPU of the job when
    ``placement`` is only part of it, e.g. one tensor rank of each stage; ``expert_bytes``:
    routed-expert parameter bytes per layer, :class:`~sim.tensor.decoder_shard.DecoderShard`)."""
    sb = state_bytes(trace.dtype, exp.training.optimizer)
    edges = list(boundaries) + [len(trace.layers)]
    orders = _stage_orders(program, schedule.microbatches) if program else None
    gpus = job_gpus if job_gpus is not None else [g for row in placement for g in row]
    sharers = host_link_sharers(topo, list(dict.fromkeys(f"gpu{g}" for g in gpus)))
    out = []
    for r, row in enumerate(placement):
        ctxs = []
        for s, g in enumerate(row):
            gpu = topo.gpu(g)
            layers = trace.layers[edges[s] : edges[s + 1]]
            params = sum(x.param_bytes for x in layers)
            expert = sum(expert_bytes[edges[s] : edges[s + 1]]) if expert_bytes else 0.0
            ctxs.append(
                StageContext(
                    stage=s,
                    stages=len(row),
                    replica=r,
                    dp_width=len(placement),
                    gpu=gpu.name,
                    host=gpu.host,
                    layers=trace.layers[edges[s] : edges[s + 1]],
                    in_flight=in_flight[s],
                    weight_versions=schedule.weight_versions(s),
                    state=sb,
                    dtype_bytes=dtype_bytes(trace.dtype),
                    capacity_bytes=gpu.memory_bytes,
                    topology=topo,
                    input_bytes=trace.layers[edges[s] - 1].out_bytes if s > 0 else 0.0,
                    microbatches=schedule.microbatches,
                    order=orders[s] if orders else (),
                    host_sharers=sharers.get(gpu.name, 1),
                    version_bytes=version_bytes_per_param(schedule.name, sb),
                    expert_share=expert / params if params else 0.0,
                    expert_parallel=expert_parallel,
                )
            )
        out.append(ctxs)
    return out


def _stage_orders(program: Program, m: int) -> list[tuple[str, ...]]:
    """Each stage's ops over one steady iteration (the middle one of the program)."""
    flat = [[a for a in flatten(rank) if a.op != STEP] for rank in program]
    its = max((a.microbatch // m for rank in flat for a in rank), default=0)
    it = (its + 1) // 2
    stages = sorted({a.stage for rank in flat for a in rank})
    return [
        tuple(a.op for rank in flat for a in rank if a.stage == s and a.microbatch // m == it)
        for s in stages
    ]


def choose_boundaries(
    topo: Topology,
    trace: Trace,
    schedule: Schedule,
    in_flight: list[int],
    placement,
    exp: ExperimentConfig,
    framework: Framework | None = None,
) -> tuple[int, ...]:
    """Stage boundaries: fixed, uniform (as ``framework`` places embedding and head:
    :meth:`~sim.framework.base.Framework.boundaries`), or the memory-aware optimal partition.

    With ``v`` stage chunks per rank, the ``p * v`` chunks are partitioned like stages (min
    bottleneck chunk); each chunk may use ``1/v`` of its GPU's capacity (an assumption: equal
    shares), and a boundary between two chunks on the same GPU costs no communication.
    ``placement`` is per ``[replica][stage]``."""
    p = schedule.num_stages
    v = schedule.virtual_stages
    if exp.options.boundaries is not None:
        if len(exp.options.boundaries) != p:
            raise InputError(
                f"has {len(exp.options.boundaries)} entries but stages is {p}",
                field="options.boundaries",
            )
        return tuple(exp.options.boundaries)
    if exp.options.partition == "uniform":
        if framework is None:
            return tuple(uniform_partition(len(trace.layers), p))
        return framework.boundaries(trace, p)
    sb = state_bytes(trace.dtype, exp.training.optimizer)
    per_byte = 1.0 / dtype_bytes(trace.dtype)
    vb = version_bytes_per_param(schedule.name, sb)

    def need(j: int, param_bytes: float, act_bytes: float) -> float:
        per_param = stage_state_bytes_per_param(sb, schedule.weight_versions(j), vb)
        return param_bytes * per_byte * per_param + act_bytes * in_flight[j]

    row = placement[0]
    bw = [
        math.inf
        if row[j] == row[j + 1]
        else topo.route_bandwidth_Bps(f"gpu{row[j]}", f"gpu{row[j + 1]}", nccl=True)
        for j in range(p - 1)
    ]
    caps = [tensor_capacity_bytes(topo.gpu(g)) / v for g in row]
    return partition(
        trace, p, bandwidth_Bps=bw or None, memory_capacity_bytes=caps, stage_memory_bytes=need
    ).boundaries


def resolve(
    exp: ExperimentConfig,
    point: PointConfig,
    topo: Topology,
    base_trace: Trace,
    *,
    file: str = "<experiment>",
) -> Resolved:
    """Resolve a point (see module doc).

    Raises:
        InputError: unknown schedule or policy, m < p where the schedule needs m >= p, too
            many GPUs, more stages than layers, bad fixed boundaries or placement.
    """
    framework = point_framework(point, file)
    schedule = make_schedule(
        point.schedule,
        point.stages,
        point.microbatches,
        file=file,
        virtual_stages=point.virtual_stages,
        framework=framework,
    )
    n, t, cp = schedule.num_stages, point.tensor_parallel, point.context_parallel
    if point.stages * point.dp_width * t * cp > topo.num_gpus:
        what = "stages x dp_width" + (" x tensor_parallel" if t > 1 else "")
        what += " x context_parallel" if cp > 1 else ""
        raise InputError(
            f"{what} = {point.stages * point.dp_width * t * cp} GPUs, but "
            f"{topo.name} has {topo.num_gpus}",
            file=file,
            field="sweep.stages",
        )
    if n > len(base_trace.layers):
        raise InputError(
            f"{n} stages ({point.stages} ranks x {point.virtual_stages} virtual stages) but "
            f"trace {base_trace.name} has {len(base_trace.layers)} layers",
            file=file,
            field="sweep.stages",
        )
    try:
        policy = get_policy(point.memory_policy)
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc.args[0]), file=file, field="sweep.memory_policy") from None
    trace, notes = adapt_trace(base_trace, point.microbatch_size, topo.gpus[0].compute)
    sharded = _shard(trace, point, topo, file)
    trace = framework.tie(sharded.trace, schedule, t)
    iterations = exp.training.iterations or schedule.steady_state_iterations()
    program = schedule.program(iterations)
    peaks = peak_in_flight_per_stage(program)
    in_flight = [peaks[s] for s in range(n)]
    grouped = t > 1 or cp > 1 or point.expert_parallel > 1
    groups = _tensor_groups(topo, point, file) if grouped else ()  # [replica][rank][tensor rank]
    placement = (
        tuple(tuple(g[0] for g in row) for row in groups)
        if groups
        else _placement(exp, topo, point, file)
    )
    ranks = [schedule.stage_rank(s) for s in range(n)]
    per_stage = tuple(tuple(row[ranks[s]] for s in range(n)) for row in placement)
    stage_groups = tuple(tuple(row[ranks[s]] for s in range(n)) for row in groups)
    try:
        boundaries = choose_boundaries(topo, trace, schedule, in_flight, per_stage, exp, framework)
    except InputError as exc:
        exc.file = exc.file or file
        raise
    trace, tied = place_shared(trace, boundaries, ranks)
    job = [g for row in groups for grp in row for g in grp] if groups else None
    flat_ctx = [
        c
        for k in range(t)
        for row in stage_contexts(
            topo,
            trace,
            boundaries,
            _rank(per_stage, stage_groups, k),
            schedule,
            in_flight,
            exp,
            program,
            job,
            sharded.expert_bytes if isinstance(sharded, DecoderShard) else (),
            point.expert_parallel,
        )
        for c in row
    ]
    try:
        flat = finalize_plans(flat_ctx, policy.plan_all(flat_ctx))
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.memory_policy") from None
    flat = framework.plans(flat, point.dp_width, state_bytes(trace.dtype, exp.training.optimizer))
    if not exp.training.optimizer_step:
        flat = [replace(p, optimizer_s=0.0) for p in flat]
    w = point.dp_width * cp  # the engine's replicas: data x context-parallel ranks
    per_rank = [flat[k * n * w : (k + 1) * n * w] for k in range(t)]
    plans = tuple(
        tuple(_once_per_gpu(schedule, s, per_rank[0][r * n + s]) for s in range(n))
        for r in range(w)
    )
    tensor_plans = (
        tuple(
            tuple(
                tuple(_once_per_gpu(schedule, s, per_rank[k][r * n + s]) for k in range(t))
                for s in range(n)
            )
            for r in range(w)
        )
        if groups
        else ()
    )
    costs = _with_recompute_comm(_stage_costs(sharded, boundaries), sharded, boundaries, plans)
    if schedule.splits_backward and not all(c.has_split for c in costs):
        notes = [*notes, split_note(schedule.name)]
    sim_input = SimInput(
        topo,
        costs,
        program,
        point.microbatches,
        per_stage,
        plans,
        tensor_groups=stage_groups if t > 1 else (),
        tensor_plans=tensor_plans if t > 1 else (),
        context_parallel=cp,
        expert_parallel=point.expert_parallel,
        overlap_pairs=point.ep_overlap,
        dp_bucket_bytes=framework.bucket_bytes(trace),
        runtime=replace(framework.runtime(topo, trace, t), tied_groups=tied),
    )
    return Resolved(
        point, schedule, trace, tuple(boundaries), placement, sim_input, iterations, tuple(notes)
    )


def _shard(
    trace: Trace, point: PointConfig, topo: Topology, file: str
) -> ShardedTrace | DecoderShard:
    """The trace on one rank (:func:`~sim.tensor.rank.rank_trace`: tensor, sequence, expert
    and context parallelism).

    Raises:
        InputError: the trace cannot be split as the point says (no model shape, heads ...).
    """
    try:
        gpu = topo.gpus[0]
        return rank_trace(trace, point, gpu.compute, gpu.tp_module_overhead_s)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.tensor_parallel") from None


def _tensor_groups(topo: Topology, point: PointConfig, file: str):
    """GPU per ``[replica][rank][tensor rank]``, the replicas being the ``dp * cp`` data- and
    context-parallel ranks (context rank innermost: :mod:`sim.engine.groups`)."""
    w = point.dp_width * point.context_parallel
    try:
        return tensor_groups(topo, point.stages, w, point.tensor_parallel)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.tensor_parallel") from None


def _rank(placement, groups, k: int):
    """GPU per ``[replica][stage]`` of tensor rank ``k`` (``placement`` without groups)."""
    if not groups:
        return placement
    return tuple(tuple(g[k] for g in row) for row in groups)


def _stage_costs(sharded: ShardedTrace | DecoderShard, boundaries) -> tuple[StageCost, ...]:
    """Each stage's compute, boundary bytes, tensor-parallel collectives and (decoder traces)
    expert- and context-parallel exchanges and expert share of its gradients."""
    layers = sharded.trace.layers
    edges = list(boundaries) + [len(layers)]
    out = []
    for s in range(len(boundaries)):
        lo, hi = edges[s], edges[s + 1]
        cost = StageCost.from_layers(layers[lo:hi], layers[lo - 1].out_bytes if s > 0 else 0.0)
        comm = sharded.comm[lo:hi]
        cost = replace(
            cost,
            tp_fwd=aggregate([op for c in comm for op in c.fwd]),
            tp_bwd=aggregate([op for c in comm for op in c.bwd]),
        )
        if isinstance(sharded, DecoderShard):
            ops = sharded.group[lo:hi]
            params = sum(x.param_bytes for x in layers[lo:hi])
            cost = replace(
                cost,
                group_fwd=aggregate_groups(op for f, _ in ops for op in f),
                group_bwd=aggregate_groups(op for _, b in ops for op in b),
                expert_grad_share=sum(sharded.expert_bytes[lo:hi]) / params if params else 0.0,
            )
        out.append(cost)
    return tuple(out)


def _with_recompute_comm(
    costs: tuple[StageCost, ...], sharded: ShardedTrace | DecoderShard, boundaries, plans
) -> tuple[StageCost, ...]:
    """Each stage's cost with the tensor-parallel collectives its recompute re-runs: those of
    the layers its memory plan (replica 0's) checkpoints fully (:attr:`StageCost.tp_recompute`)."""
    if sharded.tensor_parallel < 2:
        return costs
    out = []
    for s, cost in enumerate(costs):
        lo = boundaries[s]
        ops = [op for i in plans[0][s].recompute_layers for op in sharded.comm[lo + i].fwd]
        out.append(replace(cost, tp_recompute=aggregate(ops)) if ops else cost)
    return tuple(out)


def split_note(schedule: str) -> str:
    """The note a result carries when a split-backward schedule runs on a trace without
    ``bwd_input_s`` / ``bwd_weight_s``."""
    from sim.engine.inputs import DEFAULT_INPUT_SHARE

    return (
        f"assumption: {schedule} splits the backward into I and W but the trace has no "
        f"bwd_input_s/bwd_weight_s; I = {DEFAULT_INPUT_SHARE:g} x bwd_s, W = the rest"
    )


def _once_per_gpu(schedule: Schedule, stage: int, plan):
    """A stage chunk's plan, without the per-process charges (runtime reserve, allocator
    margin, working memory) unless it is its rank's first chunk: one process per GPU pays
    them once (an assumption for ``v > 1``; ``v = 1`` is unchanged)."""
    if schedule.virtual_stages == 1 or schedule.rank_stages(schedule.stage_rank(stage))[0] == stage:
        return plan
    return replace(plan, reserve_bytes=0.0, allocator_bytes=0.0, working_bytes=0.0)


def _placement(exp: ExperimentConfig, topo: Topology, point: PointConfig, file: str):
    fixed = exp.options.placement
    if fixed is None:
        return tuple(tuple(row) for row in place(topo, point.stages, point.dp_width))
    ok = len(fixed) == point.dp_width and all(len(r) == point.stages for r in fixed)
    flat = [g for r in fixed for g in r]
    if not ok or len(set(flat)) != len(flat) or any(not 0 <= g < topo.num_gpus for g in flat):
        raise InputError(
            f"must be {point.dp_width} rows of {point.stages} distinct GPU indices "
            f"in 0..{topo.num_gpus - 1}",
            file=file,
            field="options.placement",
        )
    return tuple(tuple(r) for r in fixed)


def evaluate(res: Resolved) -> tuple[Metrics, EventLog]:
    """Simulate a resolved point and compute its metrics."""
    log = simulate(res.sim_input)
    p = res.point
    metrics = compute_metrics(
        log,
        stages=p.stages,
        microbatches=p.microbatches,
        synchronous=res.schedule.synchronous,
        fill_microbatches=res.schedule.fill_microbatches(),
        samples_per_step=p.microbatches * p.microbatch_size * p.dp_width,
        tensor_parallel=p.tensor_parallel,
    )
    log.meta.update(
        boundaries=list(res.boundaries),
        placement=placement_json(res),
        schedule=p.schedule,
        microbatches=p.microbatches,
        policy_notes=policy_notes(res),
        compute_notes=list(res.compute_notes),
    )
    return metrics, log


def placement_json(res: Resolved) -> list:
    """GPU per ``[replica][stage]``, or per ``[replica][stage][tensor rank]`` with tensor
    parallelism."""
    groups = res.sim_input.tensor_groups
    if groups:
        return [[list(g) for g in row] for row in groups]
    return [list(r) for r in res.placement]


def policy_notes(res: Resolved) -> dict:
    """The memory policy's notes per stage (replica 0; other replicas when they differ)."""
    out: dict = {"policy": res.point.memory_policy}
    for r, row in enumerate(res.sim_input.plans):
        for s, plan in enumerate(row):
            if plan.notes and (r == 0 or plan.notes != res.sim_input.plans[0][s].notes):
                out[f"s{s}" if r == 0 else f"r{r}s{s}"] = plan.notes
    return out

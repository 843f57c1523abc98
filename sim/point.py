"""Evaluate one grid point: from (experiment, point) to a result row.

This is the pure function the sweep maps over: it resolves the point (trace at the
micro-batch size, partition, placement, schedule program, memory plans), runs the engine and
computes the metrics. Inputs that cannot be resolved raise :class:`~sim.errors.InputError`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.compute.adapt import adapt_trace
from sim.config import ExperimentConfig, PointConfig
from sim.engine import SimInput, StageCost, simulate
from sim.errors import InputError
from sim.events import EventLog
from sim.hardware.topology import Topology
from sim.memory.base import StageContext
from sim.memory.compose import finalize_plans
from sim.memory.estimate import host_link_sharers
from sim.memory.registry import get_policy
from sim.memory.reserve import tensor_capacity_bytes
from sim.memory.states import stage_state_bytes_per_param, state_bytes, version_bytes_per_param
from sim.metrics import Metrics, compute_metrics, iterations_needed
from sim.partition import partition, uniform_partition
from sim.placement import place
from sim.schedules.action import STEP, Program
from sim.schedules.analysis import peak_in_flight
from sim.schedules.base import Schedule, ScheduleError
from sim.schedules.registry import get_schedule
from sim.tensor.groups import tensor_groups
from sim.tensor.megatron import aggregate
from sim.tensor.shard import ShardedTrace, shard_trace
from sim.trace.schema import Trace, dtype_bytes


@dataclass
class Resolved:
    """A point with everything the engine needs, plus what the user may want to see."""

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
) -> Schedule:
    """Instantiate a schedule, turning its errors into :class:`InputError`."""
    try:
        cls = get_schedule(name)
    except KeyError as exc:
        raise InputError(str(exc.args[0]), file=file, field=field) from None
    try:
        return cls(stages, microbatches)
    except ScheduleError as exc:
        raise InputError(str(exc), file=file, field="sweep.stages") from None


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
) -> list[list[StageContext]]:
    """One :class:`StageContext` per ``[replica][stage]`` (``job_gpus``: every GPU of the job
    when ``placement`` is only part of it, e.g. one tensor rank of each stage)."""
    sb = state_bytes(trace.dtype, exp.training.optimizer)
    edges = list(boundaries) + [len(trace.layers)]
    orders = _stage_orders(program, schedule.microbatches) if program else None
    gpus = job_gpus if job_gpus is not None else [g for row in placement for g in row]
    sharers = host_link_sharers(topo, [f"gpu{g}" for g in gpus])
    out = []
    for r, row in enumerate(placement):
        ctxs = []
        for s, g in enumerate(row):
            gpu = topo.gpu(g)
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
                )
            )
        out.append(ctxs)
    return out


def _stage_orders(program: Program, m: int) -> list[tuple[str, ...]]:
    """Each rank's ops over one steady iteration (the middle one of the program)."""
    its = max((a.microbatch // m for rank in program for a in rank if a.op != STEP), default=0)
    it = (its + 1) // 2
    return [
        tuple(a.op for a in rank if a.op != STEP and a.microbatch // m == it) for rank in program
    ]


def choose_boundaries(
    topo: Topology,
    trace: Trace,
    schedule: Schedule,
    in_flight: list[int],
    placement,
    exp: ExperimentConfig,
) -> tuple[int, ...]:
    """Stage boundaries: fixed, uniform, or the memory-aware optimal partition."""
    p = schedule.stages
    if exp.options.boundaries is not None:
        if len(exp.options.boundaries) != p:
            raise InputError(
                f"has {len(exp.options.boundaries)} entries but stages is {p}",
                field="options.boundaries",
            )
        return tuple(exp.options.boundaries)
    if exp.options.partition == "uniform":
        return tuple(uniform_partition(len(trace.layers), p))
    sb = state_bytes(trace.dtype, exp.training.optimizer)
    per_byte = 1.0 / dtype_bytes(trace.dtype)
    vb = version_bytes_per_param(schedule.name, sb)

    def need(j: int, param_bytes: float, act_bytes: float) -> float:
        per_param = stage_state_bytes_per_param(sb, schedule.weight_versions(j), vb)
        return param_bytes * per_byte * per_param + act_bytes * in_flight[j]

    row = placement[0]
    bw = [
        topo.route_bandwidth_Bps(f"gpu{row[j]}", f"gpu{row[j + 1]}", nccl=True)
        for j in range(p - 1)
    ]
    caps = [tensor_capacity_bytes(topo.gpu(g)) for g in row]
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
    schedule = make_schedule(point.schedule, point.stages, point.microbatches, file=file)
    t = point.tensor_parallel
    if point.stages * point.dp_width * t > topo.num_gpus:
        what = "stages x dp_width" + (" x tensor_parallel" if t > 1 else "")
        raise InputError(
            f"{what} = {point.stages * point.dp_width * t} GPUs, but "
            f"{topo.name} has {topo.num_gpus}",
            file=file,
            field="sweep.stages",
        )
    if point.stages > len(base_trace.layers):
        raise InputError(
            f"{point.stages} stages but trace {base_trace.name} has "
            f"{len(base_trace.layers)} layers",
            file=file,
            field="sweep.stages",
        )
    try:
        policy = get_policy(point.memory_policy)
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc.args[0]), file=file, field="sweep.memory_policy") from None
    trace, notes = adapt_trace(base_trace, point.microbatch_size, topo.gpus[0].compute)
    sharded = _shard(trace, point, topo, file)
    trace = sharded.trace
    iterations = exp.training.iterations or iterations_needed(
        point.stages, point.microbatches, schedule.synchronous
    )
    program = schedule.program(iterations)
    in_flight = peak_in_flight(program)
    groups = _tensor_groups(topo, point, file) if t > 1 else ()
    placement = (
        tuple(tuple(g[0] for g in row) for row in groups)
        if groups
        else _placement(exp, topo, point, file)
    )
    try:
        boundaries = choose_boundaries(topo, trace, schedule, in_flight, placement, exp)
    except InputError as exc:
        exc.file = exc.file or file
        raise
    job = [g for row in groups for grp in row for g in grp] if groups else None
    flat_ctx = [
        c
        for k in range(t)
        for row in stage_contexts(
            topo,
            trace,
            boundaries,
            _rank(placement, groups, k),
            schedule,
            in_flight,
            exp,
            program,
            job,
        )
        for c in row
    ]
    try:
        flat = finalize_plans(flat_ctx, policy.plan_all(flat_ctx))
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.memory_policy") from None
    if not exp.training.optimizer_step:
        flat = [replace(p, optimizer_s=0.0) for p in flat]
    p, w = point.stages, point.dp_width
    per_rank = [flat[k * p * w : (k + 1) * p * w] for k in range(t)]
    plans = tuple(tuple(per_rank[0][r * p : (r + 1) * p]) for r in range(w))
    tensor_plans = (
        tuple(
            tuple(tuple(per_rank[k][r * p + s] for k in range(t)) for s in range(p))
            for r in range(w)
        )
        if groups
        else ()
    )
    costs = _stage_costs(sharded, boundaries)
    sim_input = SimInput(
        topo,
        costs,
        program,
        point.microbatches,
        placement,
        plans,
        tensor_groups=groups,
        tensor_plans=tensor_plans,
    )
    return Resolved(
        point, schedule, trace, tuple(boundaries), placement, sim_input, iterations, tuple(notes)
    )


def _shard(trace: Trace, point: PointConfig, topo: Topology, file: str) -> ShardedTrace:
    """The trace on one tensor rank (:func:`~sim.tensor.shard.shard_trace`).

    Raises:
        InputError: the trace cannot be split ``tensor_parallel`` ways (no model shape, heads).
    """
    try:
        return shard_trace(
            trace, point.tensor_parallel, point.sequence_parallel, topo.gpus[0].compute
        )
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.tensor_parallel") from None


def _tensor_groups(topo: Topology, point: PointConfig, file: str):
    try:
        return tensor_groups(topo, point.stages, point.dp_width, point.tensor_parallel)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.tensor_parallel") from None


def _rank(placement, groups, k: int):
    """GPU per ``[replica][stage]`` of tensor rank ``k`` (``placement`` without groups)."""
    if not groups:
        return placement
    return tuple(tuple(g[k] for g in row) for row in groups)


def _stage_costs(sharded: ShardedTrace, boundaries) -> tuple[StageCost, ...]:
    """Each stage's compute, boundary bytes and tensor-parallel collectives."""
    layers = sharded.trace.layers
    edges = list(boundaries) + [len(layers)]
    out = []
    for s in range(len(boundaries)):
        lo, hi = edges[s], edges[s + 1]
        cost = StageCost.from_layers(layers[lo:hi], layers[lo - 1].out_bytes if s > 0 else 0.0)
        if sharded.tensor_parallel > 1:
            comm = sharded.comm[lo:hi]
            cost = replace(
                cost,
                tp_fwd=aggregate([op for c in comm for op in c.fwd]),
                tp_bwd=aggregate([op for c in comm for op in c.bwd]),
            )
        out.append(cost)
    return tuple(out)


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

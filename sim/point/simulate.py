"""Resolve and simulate one grid point: from (experiment, point) to an event log and metrics.

:func:`resolve` brings the trace to the point's micro-batch size and tensor-parallel shard,
partitions it into stages, places the stages on GPUs, builds the schedule's program and the
memory policy's plans (:mod:`sim.point.stages`); :func:`evaluate` runs the engine and computes
the metrics. Its result row and cache key are :mod:`sim.plan.point_row`'s. Inputs that cannot be
resolved raise :class:`~sim.errors.InputError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sim.compute.megatron_ops import stage_tensors
from sim.compute.precision_rules import LowPrecision
from sim.compute.routing import parse_routing
from sim.config import MIRROR_ABOVE_GPUS, ExperimentConfig
from sim.engine import SimInput, simulate
from sim.engine.periodic import Repeated, simulate_periodic
from sim.engine.stage_cost import DEFAULT_INPUT_SHARE, StageCost
from sim.engine.symmetry import mirrored
from sim.errors import InputError
from sim.events import EventLog
from sim.framework.base import Framework
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.topology import Topology
from sim.memory.alike import plan_alike
from sim.memory.base import MemoryPolicy
from sim.memory.compose import finalize_plans, plan_to_fit
from sim.memory.context import StageContext
from sim.memory.framework_memory import PIPESIM_MEMORY, FrameworkMemory
from sim.memory.fsdp import FsdpSpec, FsdpStates
from sim.memory.layer_work import LayerWork, trace_work, with_framework_stash
from sim.memory.plan import StagePlan
from sim.memory.precision import precision_plan
from sim.metrics import Metrics, compute_metrics
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.megatron import aggregate
from sim.parallel.ops import aggregate as aggregate_groups
from sim.parallel.rank import rank_trace
from sim.parallel.shard import ShardedTrace, model_shape
from sim.point.config import PointConfig
from sim.point.experiment import Prepared, point_precision
from sim.point.overlap_costs import with_framework
from sim.point.stages import (
    Grid,
    Layout,
    make_schedule,
    stage_contexts,
)
from sim.point.staging import stage_point
from sim.schedules.action import Program
from sim.schedules.base import Schedule
from sim.trace.adapt import adapt_trace
from sim.trace.schema import Trace, dtype_bytes, layer_kind
from sim.trace.shared import place_shared
from sim.trace.t5 import is_t5, stage_tensors_t5


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
    framework = point_framework(point, file)
    schedule = make_schedule(
        point.schedule,
        point.stages,
        point.microbatches,
        file=file,
        virtual_stages=point.virtual_stages,
        framework=framework,
    )
    check_point_size(point, schedule, topo, base_trace, file)
    policy = point_policy(point, file)
    if shared is None:
        low = _precision(exp, point, file)
        trace, notes = adapt_trace(base_trace, point.microbatch_size, topo.gpus[0].compute, low)
        sharded = checked_shard(lambda: rank_trace(trace, point, *_gpu_model(topo)), file)
    else:
        trace, shared_notes = shared.adapted(point.model, point.microbatch_size, point.precision)
        notes = list(shared_notes)
        sharded = checked_shard(lambda: shared.rank_trace(point, point.microbatch_size), file)
    memory = framework.memory(base_trace.dtype, topo.gpus[0].model, exp.memory)
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
        boundaries, moved = _repartition(
            policy,
            boundaries,
            (exp, point, topo, trace, schedule, program, in_flight, layout, memory, works),
        )
        notes = [*notes, moved]
    ranks = [schedule.stage_rank(s) for s in range(schedule.num_stages)]
    trace, tied = place_shared(trace, boundaries, ranks)
    plans, tensor_plans = _plans(
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
    costs = _with_recompute_comm(_stage_costs(sharded, boundaries), sharded, boundaries, plans)
    try:
        costs = with_framework(costs, sharded, boundaries, plans, framework, topo.gpus[0].compute)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="framework") from None
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
        dp_bucket_bytes=framework.bucket_bytes(trace, point.layout.replicas),
        runtime=replace(
            framework.runtime(topo, trace, point.tensor_parallel, point.virtual_stages, memory),
            tied_groups=tied,
        ),
        stragglers=tuple(sorted(exp.options.stragglers.items())),
    )
    sim_input, note = _simulated(exp, point, sim_input)
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
        steady=sim_input.mirrored or (single and _mirror_intended(exp, point)),
    )


def _simulated(
    exp: ExperimentConfig, point: PointConfig, inp: SimInput
) -> tuple[SimInput, str | None]:
    """``inp`` mirrored (:mod:`sim.engine.symmetry`) when ``options.simulation`` asks for it
    (``symmetric``, or ``auto`` above :data:`~sim.config.MIRROR_ABOVE_GPUS` GPUs) and the
    configuration is symmetric (with :func:`~sim.engine.symmetry.fabric_note`'s note, if any);
    else ``inp``, with the reason it could not be when asked."""
    if not _mirror_intended(exp, point):
        return inp, None
    return mirrored(inp)


def _mirror_intended(exp: ExperimentConfig, point: PointConfig) -> bool:
    """Whether ``options.simulation`` asks to mirror ``point`` (``symmetric``, or ``auto``
    above :data:`~sim.config.MIRROR_ABOVE_GPUS` GPUs): its stage replicas are then planned once
    per kind (:func:`~sim.memory.alike.plan_alike`) and simulated once if symmetric."""
    mode = exp.options.simulation
    return mode == "symmetric" or (mode == "auto" and point.layout.gpus > MIRROR_ABOVE_GPUS)


def check_point_size(
    point: PointConfig, schedule: Schedule, topo: Topology, trace: Trace, file: str
) -> None:
    """Raises:
    InputError: more GPUs than the hardware has, or more stages than the trace has layers.
    """
    n, lay = schedule.num_stages, point.layout
    if lay.gpus > topo.num_gpus:
        what = "stages x dp_width" + (" x tensor_parallel" if lay.tp > 1 else "")
        what += " x context_parallel" if lay.cp > 1 else ""
        raise InputError(
            f"{what} = {lay.gpus} GPUs, but {topo.name} has {topo.num_gpus}",
            file=file,
            field="sweep.stages",
        )
    if n > len(trace.layers):
        raise InputError(
            f"{n} stages ({point.stages} ranks x {point.virtual_stages} virtual stages) but "
            f"trace {trace.name} has {len(trace.layers)} layers",
            file=file,
            field="sweep.stages",
        )


def point_framework(point: PointConfig, file: str = "<experiment>") -> Framework:
    """The framework profile of ``point``.

    Raises:
        InputError: an unknown name (field ``framework``), listing the valid ones.
    """
    try:
        return point.framework_profile
    except KeyError as exc:
        raise InputError(str(exc), file=file, field="framework") from None


def _precision(exp: ExperimentConfig, point: PointConfig, file: str):
    """The point's low-precision recipe (:func:`~sim.point.experiment.point_precision`).

    Raises:
        InputError: a recipe the framework or the options refuse (field ``training.precision``).
    """
    try:
        return point_precision(exp, point.precision)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="training.precision") from None


def point_policy(point: PointConfig, file: str) -> MemoryPolicy:
    """The point's memory policy.

    Raises:
        InputError: an unknown policy or bad parameters (field ``sweep.memory_policy``).
    """
    try:
        return point.policy
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc.args[0]), file=file, field="sweep.memory_policy") from None


def _plans(
    exp: ExperimentConfig,
    point: PointConfig,
    policy: MemoryPolicy,
    framework: Framework,
    topo: Topology,
    trace: Trace,
    schedule: Schedule,
    program: Program,
    in_flight: list[int],
    boundaries,
    layout: Layout,
    expert_bytes: tuple[float, ...],
    file: str,
    memory: FrameworkMemory = PIPESIM_MEMORY,
    works: tuple[LayerWork, ...] = (),
    low: tuple[LowPrecision | None, tuple[float, ...]] = (None, ()),
    layered_pairs: bool = False,
) -> tuple[tuple[tuple[StagePlan, ...], ...], tuple]:
    """The memory plan of every ``[replica][stage]`` (tensor rank 0), and of every
    ``[replica][stage][tensor rank]`` with tensor parallelism (else ``()``): the policy's, then
    what the framework adds (:meth:`~sim.framework.base.Framework.plans`), then the
    low-precision recipe's weight copies and parameter gather (``low``: the recipe and each
    stage's low-precision parameters, :mod:`sim.memory.precision`).

    Raises:
        InputError: the policy cannot plan these stages (field ``sweep.memory_policy``).
    """
    t, n = point.layout.tp, schedule.num_stages
    w = point.layout.replicas  # the engine's replicas: data x context ranks
    contexts = [
        c
        for k in range(t)
        for row in stage_contexts(
            topo,
            trace,
            boundaries,
            _rank(layout.per_stage, layout.stage_groups, k),
            schedule,
            in_flight,
            exp,
            program,
            layout.job_gpus,
            expert_bytes,
            point.expert_parallel,
            memory,
            works,
            (point.tensor_parallel, point.context_parallel),
            point.layout.expert_dp if point.expert_parallel > 1 else 0,
            layered_pairs,
        )
        for c in row
    ]
    low_spec = (*low, topo.gpus[0].compute)
    flat = plan_contexts(
        exp, point, policy, framework, contexts, memory, trace.dtype, low_spec, n, file
    )
    done: dict[tuple[int, int], StagePlan] = {}  # planned alike: one object per kind, once

    def final(s: int, plan: StagePlan) -> StagePlan:
        out = done.get((s, id(plan)))
        if out is None:
            out = plan if exp.training.optimizer_step else replace(plan, optimizer_s=0.0)
            out = done[(s, id(plan))] = _once_per_gpu(schedule, s, out)
        return out

    per_rank = [flat[k * n * w : (k + 1) * n * w] for k in range(t)]
    plans = tuple(tuple(final(s, per_rank[0][r * n + s]) for s in range(n)) for r in range(w))
    if not layout.stage_groups:
        return plans, ()
    tensor_plans = tuple(
        tuple(tuple(final(s, per_rank[k][r * n + s]) for k in range(t)) for s in range(n))
        for r in range(w)
    )
    return plans, tensor_plans


def plan_contexts(
    exp: ExperimentConfig,
    point: PointConfig,
    policy: MemoryPolicy,
    framework: Framework,
    contexts: list[StageContext],
    memory: FrameworkMemory,
    dtype: str,
    low: tuple[LowPrecision | None, tuple[float, ...], ComputeSpec | None],
    stages: int,
    file: str,
    *,
    mirror: bool = True,
) -> list[StagePlan]:
    """The finalized plan of each of ``contexts`` (ordered stage-fastest, ``stages`` per row):
    FSDP's states where the point shards (:mod:`sim.memory.fsdp`), else the policy's (planned
    alike where the point is mirrored and ``mirror``, else planned to fit,
    :func:`~sim.memory.compose.plan_to_fit`); then what the framework adds
    (:meth:`~sim.framework.base.Framework.plans`); then the low-precision recipe's weight copies
    and parameter gather (``low``: the recipe, each stage's low-precision parameters and the
    GPU's compute spec, :mod:`sim.memory.precision`). ``sim run`` and ``sim memory`` plan
    through it alike.

    Raises:
        InputError: the policy cannot plan these stages (field ``sweep.memory_policy``).
    """
    try:
        if point.layout.dp_shard > 1:  # FSDP's states (sim.memory.fsdp), planned one by one
            fsdp = FsdpStates(policy, fsdp_spec(exp, framework), point.layout)
            flat = finalize_plans(contexts, fsdp.plan_all(contexts))
        else:
            alike = (
                plan_alike(policy, contexts) if mirror and _mirror_intended(exp, point) else None
            )
            flat = alike or plan_to_fit(policy, contexts)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.memory_policy") from None
    flat = framework.plans(flat, point.dp_width, memory.state(dtype, exp.training.optimizer))
    recipe, low_params, spec = low
    if recipe is None or spec is None or not any(low_params):
        return flat
    lowered: dict[tuple[int, int], StagePlan] = {}  # one per plan object and stage, once
    w = point.layout.replicas

    def lower(i: int, plan: StagePlan) -> StagePlan:
        key = (id(plan), i % stages)
        if key not in lowered:
            lowered[key] = precision_plan(plan, low_params[i % stages], recipe, spec, w)
        return lowered[key]

    return [lower(i, p) for i, p in enumerate(flat)]


def layer_works(
    sharded: ShardedTrace | DecoderShard, point: PointConfig, memory: FrameworkMemory
) -> tuple[LayerWork, ...]:
    """Each layer's transients and weights on the rank (:func:`~sim.memory.layer_work.
    trace_work`) as the framework runs them."""
    routing = sharded.routing if isinstance(sharded, DecoderShard) else parse_routing("balanced")
    return trace_work(sharded.trace, point.layout, routing, memory.work)


def fsdp_spec(exp: ExperimentConfig, framework: Framework) -> FsdpSpec:
    """The framework's FSDP (:attr:`~sim.framework.base.Framework.fsdp`) with the experiment's
    ``options.fsdp_reshard_after_forward`` for every block, if set."""
    spec = framework.fsdp.value
    value = exp.options.fsdp_reshard_after_forward
    if value is None:
        return spec
    return replace(spec, reshard_after_forward=value, reshard_with_pp=value)


def stage_low_params(
    sharded: ShardedTrace | DecoderShard, boundaries
) -> tuple[LowPrecision | None, tuple[float, ...]]:
    """The rank trace's low-precision recipe and each stage's low-precision parameters."""
    if not isinstance(sharded, DecoderShard) or sharded.precision is None:
        return None, ()
    edges = [*boundaries, len(sharded.low_params)]
    per = tuple(sum(sharded.low_params[a:b]) for a, b in zip(edges, edges[1:], strict=False))
    return sharded.precision, per


def _gpu_model(topo: Topology):
    """The first GPU's compute model, tensor-parallel module overhead and host overhead."""
    gpu = topo.gpus[0]
    return gpu.compute, gpu.tp_module_overhead_s, topo.host(gpu.host).overhead


def checked_shard(
    make: Callable[[], ShardedTrace | DecoderShard], file: str
) -> ShardedTrace | DecoderShard:
    """The trace on one rank, made by ``make`` (:func:`~sim.parallel.rank.rank_trace`:
    tensor, sequence, expert and context parallelism).

    Raises:
        InputError: the trace cannot be split as the point says (no model shape, heads ...).
    """
    try:
        return make()
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.tensor_parallel") from None


def _repartition(policy: MemoryPolicy, boundaries, parts) -> tuple[tuple[int, ...], str]:
    """The boundaries ``policy`` moves the partitioner's to (:meth:`MemoryPolicy.repartition`,
    given the stage contexts of replica 0, tensor rank 0, for any boundaries), and a note."""
    exp, point, topo, trace, schedule, program, in_flight, layout, memory, works = parts
    rank0 = _rank(layout.per_stage, layout.stage_groups, 0)
    groups = (point.tensor_parallel, point.context_parallel)

    def contexts(b: tuple[int, ...]):
        return stage_contexts(
            topo,
            trace,
            b,
            rank0,
            schedule,
            in_flight,
            exp,
            program,
            layout.job_gpus,
            memory=memory,
            works=works,
            groups=groups,
        )[0]

    before = tuple(boundaries)
    after, info = policy.repartition(before, len(trace.layers), contexts)
    said = ", ".join(f"{k} {v}" for k, v in info.items())
    return after, f"{policy.name} repartitioned the layers: boundaries {before} -> {after} ({said})"


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
    shape = model_shape(sharded.trace)
    d = dtype_bytes(sharded.trace.dtype)
    norm_bytes = 2 * int(shape["hidden"]) * d if shape else float("inf")
    out = []
    for s in range(len(boundaries)):
        lo, hi = edges[s], edges[s + 1]
        cost = StageCost.from_layers(layers[lo:hi], layers[lo - 1].out_bytes if s > 0 else 0.0)
        comm = sharded.comm[lo:hi]
        kinds = [(layer_kind(x.name), x.param_bytes) for x in layers[lo:hi]]
        t5 = is_t5(sharded.trace)  # a T5 layer's tensors are its kind's (sim.compute.t5_ops)
        cost = replace(
            cost,
            param_tensors=stage_tensors_t5(sharded.trace, lo, hi)
            if t5
            else stage_tensors(kinds, norm_bytes),
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
                fwd_syncs=sharded.fwd_syncs[lo:hi],
                grouped_ops=sharded.grouped_ops[lo:hi],
                attn_ops=sharded.attn_ops[lo:hi],
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
        placement=placement_json(res),
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


def policy_notes(res: Resolved) -> dict:
    """The memory policy's notes per stage (replica 0; other replicas when they differ)."""
    out: dict = {"policy": res.point.memory_policy}
    for r, row in enumerate(res.sim_input.plans):
        for s, plan in enumerate(row):
            if plan.notes and (r == 0 or plan.notes != res.sim_input.plans[0][s].notes):
                out[f"s{s}" if r == 0 else f"r{r}s{s}"] = plan.notes
    return out

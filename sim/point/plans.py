"""The memory plans of a point: every stage replica's (and tensor rank's) plan from the memory
policy (or FSDP's states), what the framework adds, and the low-precision recipe's weight
copies; the layers' work on a rank, and the boundaries a repartitioning policy moves to."""

from __future__ import annotations

from dataclasses import replace

from sim.compute.precision_rules import LowPrecision
from sim.compute.routing import parse_routing
from sim.config import ExperimentConfig
from sim.errors import InputError
from sim.framework.base import Framework
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.topology import Topology
from sim.memory.alike import plan_alike
from sim.memory.base import MemoryPolicy
from sim.memory.compose import finalize_plans, plan_to_fit
from sim.memory.context import StageContext
from sim.memory.framework_memory import PIPESIM_MEMORY, FrameworkMemory
from sim.memory.fsdp import FsdpSpec, FsdpStates
from sim.memory.layer_work import LayerWork, trace_work
from sim.memory.plan import StagePlan
from sim.memory.precision import precision_plan
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.shard import ShardedTrace
from sim.point.config import PointConfig
from sim.point.mirroring import mirror_intended
from sim.point.stages import Layout, stage_contexts
from sim.schedules.action import Program
from sim.schedules.base import Schedule
from sim.trace.schema import Trace


def memory_plans(
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
            rank_gpus(layout.per_stage, layout.stage_groups, k),
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
            out = stepped(exp, plan)
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


def stepped(exp: ExperimentConfig, plan: StagePlan) -> StagePlan:
    """``plan`` as the experiment steps it: no GPU optimizer step (``optimizer_s`` 0, so no
    step transient either, :mod:`sim.memory.step_moment`) without ``training.optimizer_step``."""
    return plan if exp.training.optimizer_step else replace(plan, optimizer_s=0.0)


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
    replay: bool = True,
) -> list[StagePlan]:
    """The finalized plan of each of ``contexts`` (ordered stage-fastest, ``stages`` per row):
    FSDP's states where the point shards (:mod:`sim.memory.fsdp`), else the policy's (planned
    alike where the point is mirrored and ``mirror``, else planned to fit,
    :func:`~sim.memory.compose.plan_to_fit`); then what the framework adds
    (:meth:`~sim.framework.base.Framework.plans`); then the low-precision recipe's weight copies
    and parameter gather (``low``: the recipe, each stage's low-precision parameters and the
    GPU's compute spec, :mod:`sim.memory.precision`). ``sim run`` and ``sim memory`` plan
    through it alike. ``replay=False``: no allocator replay, its margin 0 (a lower bound,
    :func:`~sim.memory.compose.finalize_plans`).

    Raises:
        InputError: the policy cannot plan these stages (field ``sweep.memory_policy``).
    """
    try:
        if framework.runs_fsdp(point.layout):  # FSDP's states (sim.memory.fsdp), one by one
            fsdp = FsdpStates(policy, fsdp_spec(exp, framework, dtype), point.layout)
            flat = finalize_plans(contexts, fsdp.plan_all(contexts), replay=replay)
        else:
            alike = plan_alike(policy, contexts) if mirror and mirror_intended(exp, point) else None
            flat = alike or plan_to_fit(policy, contexts, replay=replay)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.memory_policy") from None
    state = memory.state(dtype, exp.training.optimizer)
    flat = framework.plans(flat, point.dp_width, state, memory)
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


def fsdp_spec(exp: ExperimentConfig, framework: Framework, dtype: str) -> FsdpSpec:
    """The framework's FSDP for ``dtype`` training (:meth:`~sim.framework.base.Framework.
    fsdp_spec`) with the experiment's ``options.fsdp_reshard_after_forward`` for every block,
    if set.

    Raises:
        ValueError: the framework has no FSDP (the planner refuses such a point first:
            :mod:`sim.plan.parallel_axes`)."""
    spec = framework.fsdp_spec(dtype)
    if spec is None:
        raise ValueError(f"framework {framework.name} has no FSDP: {framework.fsdp.source}")
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


def repartition(policy: MemoryPolicy, boundaries, parts) -> tuple[tuple[int, ...], str]:
    """The boundaries ``policy`` moves the partitioner's to (:meth:`MemoryPolicy.repartition`,
    given the stage contexts of replica 0, tensor rank 0, for any boundaries), and a note."""
    exp, point, topo, trace, schedule, program, in_flight, layout, memory, works = parts
    rank0 = rank_gpus(layout.per_stage, layout.stage_groups, 0)
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


def rank_gpus(placement, groups, k: int):
    """GPU per ``[replica][stage]`` of tensor rank ``k`` (``placement`` without groups)."""
    if not groups:
        return placement
    return tuple(tuple(g[k] for g in row) for row in groups)


def _once_per_gpu(schedule: Schedule, stage: int, plan):
    """A stage chunk's plan, without the per-process charges (runtime reserve, allocator
    margin, working memory) unless it is its rank's first chunk: one process per GPU pays
    them once (an assumption for ``v > 1``; ``v = 1`` is unchanged)."""
    if schedule.virtual_stages == 1 or schedule.rank_stages(schedule.stage_rank(stage))[0] == stage:
        return plan
    return replace(plan, reserve_bytes=0.0, allocator_bytes=0.0, working_bytes=0.0)

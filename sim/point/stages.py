"""The stages of a point: its schedule, stage boundaries and each stage replica's memory
context.

:func:`make_schedule` instantiates the point's schedule class; :func:`choose_boundaries` splits
the trace's layers into stages (fixed, uniform or the memory-aware optimum of
:mod:`sim.parallel.partition`); :func:`stage_contexts` builds the :class:`~sim.memory.context.StageContext`
every memory policy plans from; :func:`stage_layout` places ranks, stages and tensor-parallel
groups on GPUs. Used by :func:`sim.point.simulate.resolve`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sim.compute.megatron_ops import param_tensors
from sim.config import ExperimentConfig
from sim.errors import InputError
from sim.framework.base import Framework
from sim.framework.registry import DEFAULT_FRAMEWORK, get_framework
from sim.hardware.topology import Topology
from sim.memory.context import StageContext
from sim.memory.estimate import host_link_sharers
from sim.memory.framework_memory import PIPESIM_MEMORY, FrameworkMemory
from sim.memory.layer_work import LayerWork
from sim.memory.reserve import tensor_capacity_bytes
from sim.memory.states import stage_state_bytes_per_param, version_bytes_per_param
from sim.parallel.domains import domain_groups, unit_replicas
from sim.parallel.groups import tensor_groups
from sim.parallel.partition import partition, uniform_partition
from sim.parallel.placement import place
from sim.point.config import PointConfig
from sim.schedules.action import STEP, Program, flatten
from sim.schedules.base import Schedule, ScheduleError
from sim.schedules.combined import paired_forwards
from sim.schedules.registry import get_schedule
from sim.trace.schema import LayerProfile, Trace, dtype_bytes, layer_kind


def make_schedule(
    name: str,
    stages: int,
    microbatches: int,
    *,
    file: str = "<experiment>",
    field: str = "sweep.schedule",
    virtual_stages: int | None = None,
    framework: Framework | None = None,
    shape_field: str = "sweep.stages",
) -> Schedule:
    """Instantiate a schedule as ``framework`` runs it (default: pipesim's torch rules),
    turning its errors into :class:`InputError`: ``field`` names where the schedule's name
    was given, ``shape_field`` where its stages and micro-batches were.

    Raises:
        InputError: an unknown name, a schedule the framework does not run, or a
            combination the schedule refuses.
    """
    cls = check_schedule_name(name, file=file, field=field)
    fw = framework or get_framework(DEFAULT_FRAMEWORK)
    why = fw.schedule_reason(cls)
    if why:
        raise InputError(why, file=file, field=field)
    try:
        return fw.make_schedule(cls, stages, microbatches, virtual_stages)
    except ScheduleError as exc:
        raise InputError(str(exc), file=file, field=shape_field) from None


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
    memory: FrameworkMemory = PIPESIM_MEMORY,
    works: tuple[LayerWork, ...] = (),
    groups: tuple[int, int] = (1, 1),
    expert_dp: int = 0,
    layered_pairs: bool = False,
) -> list[list[StageContext]]:
    """One :class:`StageContext` per ``[replica][stage]`` (``placement`` per stage; the
    stage chunks of one rank share its GPU; ``job_gpus``: every GPU of the job when
    ``placement`` is only part of it, e.g. one tensor rank of each stage; ``expert_bytes``:
    routed-expert parameter bytes per layer, :class:`~sim.parallel.decoder_shard.DecoderShard`;
    ``memory``: the framework's memory layout; ``works``: each layer's transients,
    :func:`sim.memory.layer_work.trace_work`; ``groups``: the tensor- and context-parallel
    sizes; ``expert_dp``: ranks holding the same routed experts, 0: ``dp_width /
    expert_parallel``; ``layered_pairs``: the program's ``OVERLAP_F_B`` pairs are Megatron's
    combined 1F1B steps, :attr:`StageContext.overlapped`)."""
    # Long by StageContext's fields, assembled once per stage; no seam.
    sb = memory.state(trace.dtype, exp.training.optimizer)
    edges = list(boundaries) + [len(trace.layers)]
    orders = _stage_orders(program, schedule.microbatches) if program else None
    rank_orders = _rank_orders(program, schedule) if program else None
    paired = [paired_forwards(r) for r in program] if program and layered_pairs else None
    own = [g for row in placement for g in row]
    gpus = job_gpus if job_gpus is not None else own
    hosts = {topo.gpu(g).host for g in own}  # a host link is shared within its server only
    every = topo.gpus  # indexed directly: a 16,384-GPU job's list is walked once per point
    near = [g for g in dict.fromkeys(gpus) if every[g].host in hosts]
    sharers = host_link_sharers(topo, [f"gpu{g}" for g in near])
    stages = len(placement[0]) if placement else 0
    per_stage: list[dict[str, Any]] = []  # what every replica of a stage shares, once
    for s in range(stages):
        layers = trace.layers[edges[s] : edges[s + 1]]
        params = sum(x.param_bytes for x in layers)
        expert = sum(expert_bytes[edges[s] : edges[s + 1]]) if expert_bytes else 0.0
        per_stage.append(
            dict(
                stage=s,
                stages=stages,
                dp_width=len(placement),
                layers=layers,
                in_flight=in_flight[s],
                weight_versions=schedule.weight_versions(s),
                state=sb,
                dtype_bytes=dtype_bytes(trace.dtype),
                topology=topo,
                input_bytes=trace.layers[edges[s] - 1].out_bytes if s > 0 else 0.0,
                microbatches=schedule.microbatches,
                order=orders[s] if orders else (),
                version_bytes=version_bytes_per_param(schedule.master_copy_versions, sb),
                expert_share=expert / params if params else 0.0,
                expert_parallel=expert_parallel,
                optimizer=exp.training.optimizer,
                param_tensors=layers_tensors(layers),
                framework=memory,
                work=works[edges[s] : edges[s + 1]] if works else (),
                rank_order=rank_orders[schedule.stage_rank(s)] if rank_orders else (),
                overlapped=paired[schedule.stage_rank(s)] if paired else frozenset(),
                tensor_parallel=groups[0],
                context_parallel=groups[1],
                layer_expert_bytes=(tuple(expert_bytes[edges[s] : edges[s + 1]]) if expert else ()),
                expert_dp=expert_dp,
            )
        )
    out = []
    for r, row in enumerate(placement):
        ctxs = []
        for s, g in enumerate(row):
            gpu = topo.gpu(g)
            ctxs.append(
                StageContext(
                    replica=r,
                    gpu=gpu.name,
                    host=gpu.host,
                    capacity_bytes=gpu.memory_bytes,
                    host_sharers=sharers.get(gpu.name, 1),
                    **per_stage[s],
                )
            )
        out.append(ctxs)
    return out


def layers_tensors(layers: tuple[LayerProfile, ...] | list[LayerProfile]) -> float:
    """Parameter tensors of ``layers``: each layer's ``param_tensors`` where its trace counts
    them (``sim profile``), else :data:`PARAM_TENSORS` by its name's kind (a head counted
    without the output weight: the trace here has no model shape to tell).

    Example:
        >>> from sim.trace.schema import LayerProfile
        >>> a = LayerProfile("blocks.0", 1, 1, 8, 0, 0, param_tensors=5.0)
        >>> layers_tensors([a, LayerProfile("block1", 1, 1, 8, 0, 0)])
        17.0
    """
    out = 0.0
    for x in layers:
        if x.param_tensors is not None:
            out += x.param_tensors
        else:
            out += sum(param_tensors(layer_kind(x.name)))
    return out


def _stage_orders(program: Program, m: int) -> list[tuple[str, ...]]:
    """Each stage's ops over one steady iteration (the middle one of the program); one pass
    over the program (``O(p m)``, not ``O(p^2 m)``), once per program object (a point's
    tensor ranks and the points sharing a schedule's program ask for the same)."""
    held = _ORDERS.get(id(program))
    if held is not None and held[0] is program and held[1] == m:
        return held[2]
    out = _orders_of(program, m)
    if len(_ORDERS) >= 64:
        _ORDERS.pop(next(iter(_ORDERS)))
    _ORDERS[id(program)] = (program, m, out)
    return out


_ORDERS: dict[int, tuple] = {}


def _orders_of(program: Program, m: int) -> list[tuple[str, ...]]:
    flat = [[a for a in flatten(rank) if a.op != STEP] for rank in program]
    its = max((a.microbatch // m for rank in flat for a in rank), default=0)
    it = (its + 1) // 2
    ops: dict[int, list[str]] = {}
    for rank in flat:
        for a in rank:
            stage_ops = ops.setdefault(a.stage, [])  # every stage, even with none in ``it``
            if a.microbatch // m == it:
                stage_ops.append(a.op)
    return [tuple(ops[s]) for s in sorted(ops)]


def _rank_orders(program: Program, schedule: Schedule) -> list[tuple[tuple[int, str, int], ...]]:
    """Each rank's ``(stage, op, micro-batch)`` over the whole program (every simulated iteration, its
    ``STEP`` actions included), in its program order (the memory walk of
    :mod:`sim.memory.rank_memory` needs the stashes other iterations leave in flight too,
    and its allocator replay the first optimizer step)."""
    return [tuple((a.stage, a.op, a.microbatch) for a in flatten(rank)) for rank in program]


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
    ``placement`` is per ``[replica][stage]``; ``in_flight``: micro-batches each stage holds
    at its peak.

    Returns:
        The first layer index of each of the ``p * v`` stages.

    Raises:
        InputError: ``options.boundaries`` without one entry per stage; what
            :func:`sim.parallel.partition.partition` raises (more stages than layers, an
            invalid layer). A partition that does not fit in memory is returned, not raised.
    """
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
    sb = (framework.memory(trace.dtype, "", exp.memory) if framework else PIPESIM_MEMORY).state(
        trace.dtype, exp.training.optimizer
    )
    per_byte = 1.0 / dtype_bytes(trace.dtype)
    vb = version_bytes_per_param(schedule.master_copy_versions, sb)

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


Grid = tuple[tuple[int, ...], ...]
"""GPU indices per ``[replica][stage]`` (or ``[replica][rank]``)."""


@dataclass(frozen=True)
class Layout:
    """Where a point's stages run: GPU per ``[replica][rank]`` (``placement``) and per
    ``[replica][stage]`` (``per_stage``), the tensor-parallel group of each ``[replica][stage]``
    (empty without tensor parallelism) and every GPU of the job (None: ``per_stage``'s)."""

    placement: Grid
    per_stage: Grid
    stage_groups: tuple[tuple[tuple[int, ...], ...], ...]
    job_gpus: list[int] | None


def stage_layout(
    exp: ExperimentConfig, topo: Topology, point: PointConfig, schedule: Schedule, file: str
) -> Layout:
    """The GPUs of the point's ranks, stages and tensor-parallel groups (:class:`Layout`).

    Raises:
        InputError: tensor-parallel groups that do not fit the servers, a bad fixed placement.
    """
    grouped = point.tensor_parallel > 1 or point.context_parallel > 1 or point.expert_parallel > 1
    groups = _tensor_groups(exp, topo, point, file) if grouped else ()
    placement = (
        tuple(tuple(g[0] for g in row) for row in groups)
        if groups
        else _placement(exp, topo, point, file)
    )
    ranks = [schedule.stage_rank(s) for s in range(schedule.num_stages)]
    return Layout(
        placement=placement,
        per_stage=tuple(tuple(row[r] for r in ranks) for row in placement),
        stage_groups=tuple(tuple(row[r] for r in ranks) for row in groups),
        job_gpus=[g for row in groups for grp in row for g in grp] if groups else None,
    )


def _tensor_groups(exp: ExperimentConfig, topo: Topology, point: PointConfig, file: str):
    """GPU per ``[replica][rank][tensor rank]``, the replicas being the ``dp * cp`` data- and
    context-parallel ranks (context rank innermost: :mod:`sim.engine.groups`): the fixed
    ``options.placement`` if given, else tensor groups inside servers with each stage's
    context-, expert-parallel and FSDP shard groups inside one NVLink domain where they fit
    (:mod:`sim.parallel.domains`)."""
    lay = point.layout
    if exp.options.placement is not None:
        return _fixed_groups(exp.options.placement, topo, point, file)
    try:
        unit = unit_replicas(lay)
        if unit == 1:
            return tensor_groups(topo, point.stages, lay.replicas, lay.tp)
        return domain_groups(topo, point.stages, lay.replicas, lay.tp, unit)
    except ValueError as exc:
        raise InputError(str(exc), file=file, field="sweep.tensor_parallel") from None


def _fixed_groups(fixed: list, topo: Topology, point: PointConfig, file: str):
    """``options.placement`` as GPU per ``[replica][rank][tensor rank]``: rows of the
    ``dp x cp`` replicas, each a GPU per rank (``t = 1``) or a list of ``t`` GPUs per rank.

    Raises:
        InputError: another shape, a GPU out of range or used twice.
    """
    lay = point.layout
    rows = [[g if isinstance(g, list) else [g] for g in row] for row in fixed]
    flat = [g for row in rows for grp in row for g in grp]
    ok = len(rows) == lay.replicas and all(len(r) == lay.pp for r in rows)
    ok = ok and all(len(grp) == lay.tp for row in rows for grp in row)
    if not ok or len(set(flat)) != len(flat) or any(not 0 <= g < topo.num_gpus for g in flat):
        raise InputError(
            f"must be {lay.replicas} rows (dp_width x context_parallel) of {lay.pp} ranks, each "
            f"{'a list of ' + str(lay.tp) + ' distinct GPU indices' if lay.tp > 1 else 'a GPU index'} "
            f"in 0..{topo.num_gpus - 1}",
            file=file,
            field="options.placement",
        )
    return tuple(tuple(tuple(grp) for grp in row) for row in rows)


def _placement(exp: ExperimentConfig, topo: Topology, point: PointConfig, file: str):
    fixed = exp.options.placement
    if fixed is None:
        return tuple(tuple(row) for row in place(topo, point.stages, point.dp_width))
    cells = [[g[0] if isinstance(g, list) and len(g) == 1 else g for g in r] for r in fixed]
    ok = len(cells) == point.dp_width and all(len(r) == point.stages for r in cells)
    ok = ok and all(isinstance(g, int) for r in cells for g in r)
    flat = [g for r in cells for g in r if isinstance(g, int)]
    if not ok or len(set(flat)) != len(flat) or any(not 0 <= g < topo.num_gpus for g in flat):
        raise InputError(
            f"must be {point.dp_width} rows of {point.stages} distinct GPU indices "
            f"in 0..{topo.num_gpus - 1}",
            file=file,
            field="options.placement",
        )
    return tuple(tuple(g for g in r if isinstance(g, int)) for r in cells)

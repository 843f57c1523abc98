"""A point's program, its in-flight micro-batches per stage and its stage boundaries: the steps
:func:`sim.point.simulate.resolve` and :func:`sim.point.memory.point_memory` both take between
the rank trace and the stage contexts.

Megatron's combined 1F1B (``overlap_moe_expert_parallel_comm`` with expert parallelism) pairs
each forward with a backward (:func:`sim.schedules.combined.combine_pairs`; Megatron-LM
``model_chunk_schedule_plan.py``), so the in-flight counts come from the combined program.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import ExperimentConfig
from sim.errors import InputError
from sim.framework.base import Framework
from sim.hardware.topology import Topology
from sim.point.config import PointConfig
from sim.point.stages import Layout, choose_boundaries, stage_layout
from sim.schedules.action import Program
from sim.schedules.analysis import peak_in_flight_per_stage
from sim.schedules.base import Schedule
from sim.schedules.combined import combine_pairs, combine_reason
from sim.trace.schema import Trace


@dataclass(frozen=True)
class Staging:
    """What a point's stages are.

    Attributes:
        program: the schedule's actions (combined into forward-backward pairs when ``combined``).
        combined: whether the framework runs Megatron's combined 1F1B on this point.
        in_flight: the most micro-batches alive at once per stage (stage 0 first).
        layout: the GPUs of each stage (:class:`~sim.point.stages.Layout`).
        boundaries: stage start-layer indices.
    """

    program: Program
    combined: bool
    in_flight: list[int]
    layout: Layout
    boundaries: tuple[int, ...]


def stage_point(
    exp: ExperimentConfig,
    topo: Topology,
    point: PointConfig,
    framework: Framework,
    schedule: Schedule,
    program: Program,
    trace: Trace,
    file: str,
) -> Staging:
    """Combine ``program`` where the framework does, count its in-flight micro-batches, place
    the stages and choose their boundaries (module doc).

    Raises:
        InputError: the combined 1F1B on a schedule it does not run on (field ``framework``);
            what :func:`~sim.point.stages.stage_layout` and
            :func:`~sim.point.stages.choose_boundaries` raise, with ``file`` filled in.
    """
    combined = framework.combines_pairs() and point.layout.ep > 1
    if combined:
        why = combine_reason(schedule.name, point.stages, point.virtual_stages)
        if why:
            raise InputError(why, file=file, field="framework")
        program = combine_pairs(program)
    peaks = peak_in_flight_per_stage(program)
    in_flight = [peaks[s] for s in range(schedule.num_stages)]
    layout = stage_layout(exp, topo, point, schedule, file)
    try:
        boundaries = choose_boundaries(
            topo, trace, schedule, in_flight, layout.per_stage, exp, framework
        )
    except InputError as exc:
        exc.file = exc.file or file
        raise
    return Staging(program, combined, in_flight, layout, boundaries)

"""A point's framework profile, memory policy, low-precision recipe and rank trace, made from its
configuration, and its size held against the hardware and the trace: each raises an
:class:`~sim.errors.InputError` naming the experiment's field when it cannot be."""

from __future__ import annotations

from collections.abc import Callable

from sim.config import ExperimentConfig
from sim.errors import InputError
from sim.framework.base import Framework
from sim.hardware.topology import Topology
from sim.memory.base import MemoryPolicy
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.shard import ShardedTrace
from sim.point.config import PointConfig
from sim.point.experiment import point_precision
from sim.point.stages import make_schedule
from sim.schedules.base import Schedule
from sim.trace.schema import Trace


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


def checked_precision(exp: ExperimentConfig, point: PointConfig, file: str):
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


def checked_schedule(
    point: PointConfig, topo: Topology, trace: Trace, file: str
) -> tuple[Framework, Schedule, MemoryPolicy]:
    """The point's framework profile, its schedule (checked against the hardware and the
    trace: :func:`check_point_size`) and its memory policy, as both simulating a point
    (:func:`~sim.point.simulate.resolve`) and its memory alone
    (:func:`~sim.point.memory.point_memory`) make them.

    Raises:
        InputError: what :func:`point_framework`, :func:`~sim.point.stages.make_schedule`,
            :func:`check_point_size` and :func:`point_policy` raise.
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
    check_point_size(point, schedule, topo, trace, file)
    return framework, schedule, point_policy(point, file)


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

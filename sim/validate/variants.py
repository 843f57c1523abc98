"""The configurations ``sim validate`` replays: the file's one point, varied as asked.

The file must describe one configuration (a ``winner.yaml`` of ``sim run``). Each schedule of
``ValidationSpec.schedules`` is combined with each micro-batch count of
``ValidationSpec.microbatches`` (the global batch follows as ``m * b * w``), at
``ValidationSpec.virtual_stages`` stage chunks per rank, or the file's where the schedule takes
it, else the schedule's smallest (an interleaved schedule tried on a 1F1B winner runs at
``v = 2``). A variant with another number of stages than the file's (``p * v``) is partitioned
afresh: the file's ``options.boundaries`` describe its own stages. In single-rank
mode ``ValidationSpec.stages`` may change the depth ``P``: the stages are then cut by the
uniform partition (``sim.parallel.partition.uniform_partition``), which needs the chain's layers to
split evenly into ``P``; the file's own depth keeps the file's partition.
"""

from __future__ import annotations

import dataclasses

from sim.errors import InputError
from sim.framework.registry import DEFAULT_FRAMEWORK
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.schedules.registry import get_schedule
from sim.validate.spec import ValidationSpec


def single_point(prep: Prepared) -> PointConfig:
    """The file's only configuration.

    Raises:
        InputError: the file describes several (field ``sweep``), names a framework
            profile other than the runtime the replay runs (``pipesim``; field ``framework``),
            or a low-precision recipe (field ``training.precision``).
    """
    if prep.exp.framework != DEFAULT_FRAMEWORK:
        raise InputError(
            f"validate replays pipesim's own torch runtime, not {prep.exp.framework}; its "
            f"prediction must be of the same runtime: set framework: {DEFAULT_FRAMEWORK} "
            "(or remove the key)",
            file=prep.file,
            field="framework",
        )
    points, _ = expand(prep)
    if any(p.precision for p in points):
        raise InputError(
            "validate's torch replay runs every GEMM in the training dtype, not a "
            "low-precision recipe: remove training.precision (and sweep.precision)",
            file=prep.file,
            field="training.precision",
        )
    if len(points) != 1:
        raise InputError(
            f"describes {len(points)} configurations; validate takes one (a winner.yaml "
            "written by `sim run`)",
            file=prep.file,
            field="sweep",
        )
    return points[0]


def with_depth(
    prep: Prepared, base: PointConfig, stages: int | None
) -> tuple[Prepared, PointConfig]:
    """``base`` at depth ``stages`` (uniform partition when it changes the file's depth).

    Raises:
        InputError: ``stages`` not dividing the chain's layers evenly, or above the hardware's
            GPUs (``--stages``).
    """
    if stages is None or stages == base.stages:
        return prep, base
    layers = len(prep.traces[base.model].layers)
    if stages < 1 or layers % stages:
        raise InputError(
            f"{stages} stages: the model's {layers} layers (embedding, blocks, head) do not "
            "split evenly into that many stages",
            field="--stages",
        )
    if stages > prep.topology.num_gpus:
        raise InputError(
            f"{stages} stages, but {prep.topology.name} has {prep.topology.num_gpus} GPUs (the "
            "prediction simulates the whole pipeline)",
            field="--stages",
        )
    options = prep.exp.options.model_copy(update=dict(partition="uniform", boundaries=None))
    exp = prep.exp.model_copy(update=dict(options=options))
    return dataclasses.replace(prep, exp=exp), base.model_copy(update=dict(stages=stages))


def _chunks(schedule: str, base: PointConfig, asked: int | None) -> int:
    """Stage chunks per rank for ``schedule``: ``asked``, else the file's when the schedule
    takes it, else the schedule's smallest.

    Raises:
        InputError: ``asked`` outside the schedule's range (``--virtual-stages``).
    """
    cls = get_schedule(schedule)
    low, high = cls.min_virtual_stages, cls.max_virtual_stages
    fits = [v for v in (asked, base.virtual_stages) if v is not None]
    v = fits[0]
    if low <= v and (high is None or v <= high):
        return v
    if asked is not None:
        span = f"{low}" if high == low else f"{low}..{high if high is not None else ''}"
        raise InputError(
            f"{schedule} runs {span} stage chunks per rank, not {asked}", field="--virtual-stages"
        )
    return low


def _repartitioned(prep: Prepared, point: PointConfig, base: PointConfig) -> Prepared:
    """``prep`` without fixed boundaries when ``point`` has another stage count than ``base``."""
    if point.virtual_stages == base.virtual_stages or prep.exp.options.boundaries is None:
        return prep
    options = prep.exp.options.model_copy(update=dict(boundaries=None, placement=None))
    return dataclasses.replace(prep, exp=prep.exp.model_copy(update=dict(options=options)))


def variants(prep: Prepared, spec: ValidationSpec) -> list[tuple[Prepared, PointConfig]]:
    """The configurations to replay, each with the experiment it resolves in.

    Raises:
        InputError: as :func:`single_point` and :func:`with_depth`; ``spec.rank`` outside
            ``0 .. P-1`` (``--single-rank``); a stage-chunk count a schedule does not run.
    """
    base = single_point(prep)
    if spec.rank is not None:
        prep, base = with_depth(prep, base, spec.stages)
        if not 0 <= spec.rank < base.stages:
            raise InputError(
                f"rank {spec.rank} is not a stage of the {base.stages}-stage pipeline (0 .. "
                f"{base.stages - 1})",
                field="--single-rank",
            )
    out = []
    for sched in spec.schedules or (base.schedule,):
        v = _chunks(sched, base, spec.virtual_stages)
        for m in spec.microbatches or (base.microbatches,):
            gb = m * base.microbatch_size * base.dp_width
            point = base.model_copy(
                update=dict(schedule=sched, microbatches=m, global_batch=gb, virtual_stages=v)
            )
            out.append((_repartitioned(prep, point, base), point))
    return out

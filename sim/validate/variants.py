"""The configurations ``sim validate`` replays: the file's one point, varied as asked.

The file must describe one configuration (a ``winner.yaml`` of ``sim run``). Each schedule of
``ValidationSpec.schedules`` is combined with each micro-batch count of
``ValidationSpec.microbatches`` (the global batch follows as ``m * b * w``). In single-rank
mode ``ValidationSpec.stages`` may change the depth ``P``: the stages are then cut by the
uniform partition (``sim.partition.uniform_partition``), which needs the chain's layers to
split evenly into ``P``; the file's own depth keeps the file's partition.
"""

from __future__ import annotations

import dataclasses

from sim.errors import InputError
from sim.experiment import Prepared
from sim.framework.registry import DEFAULT_FRAMEWORK
from sim.point_config import PointConfig
from sim.sweep import expand
from sim.validate.spec import ValidationSpec


def single_point(prep: Prepared) -> PointConfig:
    """The file's only configuration.

    Raises:
        InputError: the file describes several (field ``sweep``), or names a framework
            profile other than the runtime the replay runs (``pipesim``; field ``framework``).
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


def variants(prep: Prepared, spec: ValidationSpec) -> tuple[Prepared, list[PointConfig]]:
    """The configurations to replay, and the experiment they resolve in.

    Raises:
        InputError: as :func:`single_point` and :func:`with_depth`; ``spec.rank`` outside
            ``0 .. P-1`` (``--single-rank``).
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
        for m in spec.microbatches or (base.microbatches,):
            gb = m * base.microbatch_size * base.dp_width
            out.append(
                base.model_copy(update=dict(schedule=sched, microbatches=m, global_batch=gb))
            )
    return prep, out

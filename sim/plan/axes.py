"""The sweep's axes that need a look-up or a check: schedule x virtual stages, each model's
stages, widths, micro-batch sizes and tensor-parallel sizes (a model's own list replaces the
sweep's: ``models.<i>.stages`` etc.), and their validity checks.

A grid point runs ``p`` ranks with ``v`` stage chunks each (``sweep.virtual_stages``); which
``v`` a schedule accepts and which ``m`` torch's constructor accepts are the schedule classes'
rules (:class:`sim.schedules.base.Schedule`), applied here before anything is simulated.
"""

from __future__ import annotations

from sim.config import ModelConfig, SweepConfig, as_list
from sim.errors import InputError
from sim.framework.base import Framework
from sim.parallel.shard import model_shape, shape_problem
from sim.point.experiment import Prepared
from sim.point.stages import check_schedule_name
from sim.schedules.base import Schedule
from sim.schedules.errors import ScheduleError


def schedule_axis(
    sw: SweepConfig, file: str, model: ModelConfig | None = None, index: int = 0
) -> list[tuple[type[Schedule], str, int]]:
    """``(schedule class, name as written, virtual_stages)``: each schedule name looked up
    once, in the product with the virtual stages, or, where those are unset, with the
    schedule's smallest ``v`` (1 or 2). The names are ``model.schedule`` where the model (at
    ``models.<index>``) sets them, else ``sweep.schedule``; the virtual stages likewise
    ``model.virtual_stages``, else ``sweep.virtual_stages``.

    Raises:
        InputError: an unknown schedule name (naming ``models.<index>.schedule.<i>`` or
            ``sweep.schedule.<i>``).
    """
    own = model is not None and model.schedule is not None
    names = as_list(model.schedule if own and model is not None else sw.schedule)
    base = f"models.{index}.schedule" if own else "sweep.schedule"
    classes = [check_schedule_name(n, file=file, field=f"{base}.{i}") for i, n in enumerate(names)]
    if model is not None and model.virtual_stages is not None:
        vs = as_list(model.virtual_stages)
    elif "virtual_stages" in sw.model_fields_set:
        vs = as_list(sw.virtual_stages)
    else:
        return [(c, n, c.min_virtual_stages) for c, n in zip(classes, names, strict=True)]
    return [(c, n, v) for c, n in zip(classes, names, strict=True) for v in vs]


def boundaries_reason(prep: Prepared, stages: int) -> str:
    """Why fixed ``options.boundaries`` do not fit ``stages`` stages (``p * v``), or ``""``."""
    b = prep.exp.options.boundaries
    if b is not None and len(b) != stages:
        return f"options.boundaries has {len(b)} stages, not {stages}"
    return ""


def virtual_reason(
    prep: Prepared,
    model: str,
    cls: type[Schedule],
    p: int,
    v: int,
    m: int,
    framework: Framework,
) -> str:
    """Why ``v`` stage chunks per rank do not work here, or ``""``: the schedule's range of
    ``v`` and torch's checks on ``m`` (:meth:`Schedule.check`; ``m < p`` where ``framework``
    runs it), more stages than layers."""
    try:
        framework.make_schedule(cls, p, max(m, 1), v)
    except ScheduleError as exc:
        return str(exc)
    layers = len(prep.traces[model].layers)
    if p * v > layers:
        return f"{p} stages x {v} virtual stages = {p * v} stages but {model} has {layers} layers"
    return ""


def model_axes(model: ModelConfig, sw: SweepConfig) -> tuple[list[int], list[int], list[int]]:
    """Model ``model``'s ``stages``, ``dp_width`` and ``microbatch_size`` axes: its own list
    where it sets one, else the sweep's. A width of 0 means "the width that fills
    ``sweep.gpus``" (where the sweep sets it and the model sets no width)."""
    stages = as_list(model.stages if model.stages is not None else sw.stages)
    if model.dp_width is not None:
        widths = as_list(model.dp_width)
    else:
        widths = [0] if sw.gpus else as_list(sw.dp_width)
    mbs = as_list(
        model.microbatch_size if model.microbatch_size is not None else sw.microbatch_size
    )
    return stages, widths, mbs


def tensor_axes(prep: Prepared) -> tuple[list[list[int]], list[bool]]:
    """Each model's ``tensor_parallel`` axis (``models.<i>.tensor_parallel`` or the sweep's)
    and the ``sequence_parallel`` axis, checked against the hardware.

    Raises:
        InputError: a tensor-parallel size that neither divides the GPUs of every server nor
            is a multiple of them on a cluster of identical servers (a group spans whole
            servers: :mod:`sim.parallel.groups`), or a model whose trace has no model shape while
            some size is above 1 (naming ``models.<i>.trace``).
    """
    sw, file = prep.exp.sweep, prep.file
    out = []
    for i, model in enumerate(prep.exp.models):
        own = model.tensor_parallel is not None
        tps = as_list(model.tensor_parallel if own else sw.tensor_parallel)
        field = f"models.{i}.tensor_parallel" if own else "sweep.tensor_parallel"
        listed = isinstance(model.tensor_parallel if own else sw.tensor_parallel, list)
        for j, t in enumerate(tps):
            _check_tensor_size(prep, t, f"{field}.{j}" if listed else field)
        if max(tps) > 1 and model_shape(prep.traces[model.name]) is None:
            raise InputError(
                shape_problem(prep.traces[model.name], max(tps), False),
                file=file,
                field=f"models.{i}.trace",
            )
        out.append(tps)
    return out, as_list(sw.sequence_parallel)


def _check_tensor_size(prep: Prepared, t: int, field: str) -> None:
    """Raises:
    InputError: ``t`` neither divides every server's GPUs nor takes whole servers.
    """
    topo = prep.topology
    sizes = sorted({len(server) for server in topo.servers})
    spans = len(sizes) == 1 and t % sizes[0] == 0 and t <= topo.num_gpus
    if any(n % t for n in sizes) and not spans:
        raise InputError(
            f"tensor_parallel {t} must divide the GPUs of each server of {topo.name} "
            f"({'/'.join(map(str, sizes))}) or be a multiple of them: a tensor-parallel "
            "group stays in one server or takes whole servers",
            file=prep.file,
            field=field,
        )

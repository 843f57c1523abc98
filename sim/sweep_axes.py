"""The sweep's schedule x virtual-stages axis and its validity checks.

A grid point runs ``p`` ranks with ``v`` stage chunks each (``sweep.virtual_stages``); which
``v`` a schedule accepts and which ``m`` torch's constructor accepts are the schedule classes'
rules (:class:`sim.schedules.base.Schedule`), applied here before anything is simulated.
"""

from __future__ import annotations

from sim.config import SweepConfig, as_list
from sim.experiment import Prepared
from sim.framework.base import Framework
from sim.point_stages import check_schedule_name
from sim.schedules.base import Schedule
from sim.schedules.errors import ScheduleError


def schedule_axis(sw: SweepConfig, file: str) -> list[tuple[type[Schedule], str, int]]:
    """``(schedule class, name as written, virtual_stages)``: each ``sweep.schedule`` name
    looked up once, in the product with ``sweep.virtual_stages``, or, where that is unset, with
    the schedule's smallest ``v`` (1 or 2).

    Raises:
        InputError: an unknown schedule name (naming ``sweep.schedule.<i>``).
    """
    names = as_list(sw.schedule)
    classes = [
        check_schedule_name(n, file=file, field=f"sweep.schedule.{i}") for i, n in enumerate(names)
    ]
    if "virtual_stages" not in sw.model_fields_set:
        return [(c, n, c.min_virtual_stages) for c, n in zip(classes, names, strict=True)]
    vs = as_list(sw.virtual_stages)
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

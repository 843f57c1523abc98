"""The sweep's schedule x virtual-stages axis and its validity checks.

A grid point runs ``p`` ranks with ``v`` stage chunks each (``sweep.virtual_stages``); which
``v`` a schedule accepts and which ``m`` torch's constructor accepts are the schedule classes'
rules (:class:`sim.schedules.base.Schedule`), applied here before anything is simulated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.config import as_list
from sim.framework.base import Framework
from sim.schedules.errors import ScheduleError
from sim.schedules.registry import get_schedule

if TYPE_CHECKING:
    from sim.sweep import Prepared


def schedule_axis(sw) -> list[tuple[str, int]]:
    """``(schedule, virtual_stages)`` pairs: the product of the two lists, or, where
    ``sweep.virtual_stages`` is unset, each schedule with its smallest ``v`` (1 or 2)."""
    names = as_list(sw.schedule)
    if "virtual_stages" not in sw.model_fields_set:
        return [(n, get_schedule(n).min_virtual_stages) for n in names]
    return [(n, v) for n in names for v in as_list(sw.virtual_stages)]


def boundaries_reason(prep: Prepared, stages: int) -> str:
    """Why fixed ``options.boundaries`` do not fit ``stages`` stages (``p * v``), or ``""``."""
    b = prep.exp.options.boundaries
    if b is not None and len(b) != stages:
        return f"options.boundaries has {len(b)} stages, not {stages}"
    return ""


def virtual_reason(
    prep: Prepared,
    model: str,
    sched: str,
    p: int,
    v: int,
    m: int,
    framework: Framework,
) -> str:
    """Why ``v`` stage chunks per rank do not work here, or ``""``: the schedule's range of
    ``v`` and torch's checks on ``m`` (:meth:`Schedule.check`; ``m < p`` where ``framework``
    runs it), more stages than layers."""
    try:
        framework.make_schedule(get_schedule(sched), p, max(m, 1), v)
    except ScheduleError as exc:
        return str(exc)
    layers = len(prep.traces[model].layers)
    if p * v > layers:
        return f"{p} stages x {v} virtual stages = {p * v} stages but {model} has {layers} layers"
    return ""

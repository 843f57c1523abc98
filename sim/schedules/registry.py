"""Schedule registry: name -> :class:`~sim.schedules.base.Schedule` subclass.

Canonical names are the classes' ``name`` attributes (schedules.md §1 rows we model); aliases
cover the other names the literature and torch use. Look-ups ignore case and treat ``-`` as
``_``, so ``PipeDream-Flush``, ``1F1B`` and torch's ``GPipe`` all resolve.
"""

from __future__ import annotations

from sim.plugins import Registry, UnknownName
from sim.schedules.base import Schedule
from sim.schedules.dualpipe_v import DualPipeV
from sim.schedules.gpipe import GPipe
from sim.schedules.interleaved_1f1b import Interleaved1F1B
from sim.schedules.interleaved_zero_bubble import InterleavedZeroBubble
from sim.schedules.looped_bfs import LoopedBFS
from sim.schedules.one_f_one_b import OneFOneB
from sim.schedules.pipedream import PipeDream
from sim.schedules.pipedream_2bw import PipeDream2BW
from sim.schedules.pipemare import PipeMare
from sim.schedules.zbv_zero_bubble import ZBVZeroBubble

_CANONICAL: tuple[type[Schedule], ...] = (
    GPipe,
    OneFOneB,
    PipeDream2BW,
    PipeDream,
    PipeMare,
    Interleaved1F1B,
    LoopedBFS,
    InterleavedZeroBubble,
    ZBVZeroBubble,
    DualPipeV,
)

ALIASES: dict[str, str] = {
    "pipedream_flush": "1f1b",
    "one_f_one_b": "1f1b",
    "dapple": "1f1b",
    "2bw": "pipedream_2bw",
    "pipedream2bw": "pipedream_2bw",
    "interleaved1f1b": "interleaved_1f1b",
    "loopedbfs": "looped_bfs",
    "interleavedzerobubble": "interleaved_zero_bubble",
    "interleaved_zb": "interleaved_zero_bubble",
    "zbvzerobubble": "zbv_zero_bubble",
    "zbv": "zbv_zero_bubble",
    "zb_v": "zbv_zero_bubble",
    "dualpipev": "dualpipe_v",
}
"""Alternative name -> canonical name (DAPPLE has 1F1B's op order, schedules.md §2.3; torch's
``get_schedule_class`` names such as ``Interleaved1F1B`` or ``ZBVZeroBubble`` resolve too)."""

REGISTRY: Registry[Schedule] = Registry(
    "schedule",
    _CANONICAL,
    aliases=ALIASES,
    known=lambda names, aliases: f"valid names: {', '.join(names)} (aliases: {', '.join(aliases)})",
)
"""Every schedule class by name (:class:`sim.plugins.Registry`). Adding a schedule: one module
with its :class:`~sim.schedules.base.Schedule` subclass and one line in ``_CANONICAL``."""

SCHEDULES: dict[str, type[Schedule]] = {n: REGISTRY.get(n) for n in REGISTRY.names(aliases=True)}
"""Every accepted name (canonical and alias) -> schedule class."""

UnknownScheduleError = UnknownName
"""An unknown schedule name (a :class:`KeyError`); ``str()`` is the plain message listing the
valid names."""


def schedule_names(*, aliases: bool = False) -> list[str]:
    """Canonical schedule names in registry order; with ``aliases=True`` every accepted name."""
    return REGISTRY.names(aliases=aliases)


def get_schedule(name: str) -> type[Schedule]:
    """The schedule class registered under ``name`` (case-insensitive, ``-`` = ``_``).

    Raises:
        UnknownScheduleError: a :class:`KeyError` whose message lists the valid names.

    Example:
        >>> get_schedule("PipeDream-Flush").name
        '1f1b'
    """
    return REGISTRY.get(name)

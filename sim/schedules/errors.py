"""The error every schedule module raises; a leaf module so that both :mod:`sim.schedules.base`
and :mod:`sim.schedules.analysis` import it without importing each other."""

from __future__ import annotations


class ScheduleError(ValueError):
    """The schedule cannot be built for these (stages, microbatches), or a program is invalid."""

"""Run a SimPy environment until no event is left, as ``simpy.Environment.run()`` does.

``Environment.run()`` without ``until`` calls :meth:`~simpy.core.Environment.step` once per event
until the queue is empty (simpy 4.1.2, ``simpy/core.py``: ``run`` and ``step``); a pipeline run
processes some 10^5 to 10^6 events, and that call is a tenth of the loop's own time.
:func:`run_to_end` is the same loop with ``step``'s body inline: pop the earliest event (by time,
priority, insertion id), take its callbacks, call them in order, re-raise a failed event's
exception unless it was defused. Nothing else differs (the engine never stops a run early:
no ``until``, no :class:`~simpy.exceptions.StopSimulation`), so the events are processed in the
same order; ``tests/test_drive.py`` checks it against ``Environment.run()``.
"""

from __future__ import annotations

from heapq import heappop

import simpy


def run_to_end(env: simpy.Environment) -> None:
    """Process every event of ``env`` in simpy's order until none is left (module doc).

    Raises:
        Exception: a copy of a failed, undefused event's exception (as ``Environment.step``).
    """
    queue = env._queue  # simpy's heap of (time, priority, id, event)
    while queue:
        env._now, _, _, event = heappop(queue)
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc

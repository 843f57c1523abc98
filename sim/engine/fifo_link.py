"""One link as a SimPy resource: a FIFO of capacity 1, and the event that runs at the end of
an instant.

:class:`FifoLink` is the resource every FIFO link (PCIe, host; and CPU) and every
communicator's token of :class:`~sim.engine.links.Links` is: it schedules exactly what
``simpy.Resource(env, 1)`` schedules (shared links are :mod:`sim.engine.fair_share`'s).
:class:`EndOfInstant` is processed after every
other event of its instant (priority :data:`LATE`): :class:`~sim.engine.links.Links` queues
the collectives issued at one instant there, in their ranks' order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import cast

import simpy
from simpy.events import EventPriority

LATE = 2
"""SimPy priority of the event that queues an instant's collectives: after ``URGENT`` (0) and
``NORMAL`` (1), so after every other event of the instant (``simpy/core.py``: the event queue
is ordered by time, then priority)."""


class FifoLink:
    """A FIFO resource of capacity 1 that schedules exactly what ``simpy.Resource(env, 1)``
    schedules, with less work per grant (the links are most of a run's resource requests).

    ``simpy.Resource`` (simpy 4.1, ``simpy/resources/base.py`` and ``resource.py``) grants a
    request when it is made and the resource is free, or else when a release of the user is
    *processed*, to the oldest waiting request; a release frees the resource at once and is
    itself an event scheduled now. This class does the same steps in the same order (each
    grant and each release one :meth:`simpy.Environment.schedule`, so the events' order, and
    the simulation, are unchanged: ``tests/test_links.py`` runs both side by side), without
    simpy's put and get queues, bound classes and no-op callbacks.

    Args:
        env: the simulation environment.
    """

    __slots__ = ("env", "user", "waiting", "name", "_granter")

    def __init__(self, env: simpy.Environment, name: str = ""):
        self.env = env
        self.name = name
        self.user: simpy.Event | None = None
        self.waiting: deque[simpy.Event] = deque()
        self._granter = self._grant  # bound once: every release's callback

    def request(self) -> simpy.Event:
        """An event that succeeds when the resource is granted (now, if it is free and no
        request waits)."""
        req = simpy.Event(self.env)
        self.waiting.append(req)
        self._grant()
        return req

    def release(self, req: simpy.Event) -> simpy.Event:
        """Give the resource back (``req`` from :meth:`request`, granted); the oldest waiting
        request gets it when the returned event is processed."""
        if self.user is req:
            self.user = None
        done = simpy.Event(self.env)
        done.callbacks.append(self._granter)
        done._ok, done._value = True, None  # done.succeed(), inline: scheduled now, NORMAL
        self.env.schedule(done)
        return done

    def _grant(self, _: object = None) -> None:
        if self.user is None and self.waiting:
            user = self.user = self.waiting.popleft()
            user._ok, user._value = True, None  # user.succeed(), inline (it waited untriggered)
            self.env.schedule(user)


class EndOfInstant(simpy.Event):
    """An event processed after every other event of this instant (priority :data:`LATE`),
    calling ``callback``."""

    def __init__(self, env: simpy.Environment, callback: Callable[[simpy.Event], None]):
        super().__init__(env)
        self.callbacks.append(callback)
        self._ok, self._value = True, None
        env.schedule(self, cast(EventPriority, LATE))

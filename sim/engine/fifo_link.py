"""One link as a SimPy resource: a FIFO of capacity 1, the data-parallel hold others share on
it, and the event that runs at the end of an instant.

:class:`FifoLink` is the resource every directed link (and CPU) of :class:`~sim.engine.links.
Links` is: it schedules exactly what ``simpy.Resource(env, 1)`` schedules. :class:`Bulk` is a
data-parallel collective's hold that other traffic passes through on network and NVLink links
(processor sharing, :mod:`sim.engine.links`). :class:`EndOfInstant` is processed after every
other event of its instant (priority :data:`LATE`): :class:`~sim.engine.links.Links` queues
the collectives issued at one instant there, in their ranks' order.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import cast

import simpy
from simpy.events import EventPriority

LATE = 2
"""SimPy priority of the event that queues an instant's collectives: after ``URGENT`` (0) and
``NORMAL`` (1), so after every other event of the instant (``simpy/core.py``: the event queue
is ordered by time, then priority)."""


class Bulk:
    """A data-parallel collective's hold that other traffic shares on network and NVLink links
    (:data:`sim.engine.links.SHARED_KINDS`, :mod:`sim.engine.links`): ``end_s`` when it ends
    (moved later by what passes through; ``-inf`` until it holds all its links: a transfer
    passing through meanwhile shares nothing, an assumption: what overlaps the collective's
    start is not counted), ``open`` while it holds any."""

    __slots__ = ("end_s", "open")

    def __init__(self, end_s: float = -math.inf):
        self.end_s = end_s
        self.open = True

    def share(self, now_s: float, duration_s: float) -> float:
        """Seconds a transfer of ``duration_s`` that starts at ``now_s`` and passes through
        is longer, ``min(d, r)``; the hold ends that much later."""
        if not self.open or self.end_s <= now_s:
            return 0.0
        extra = min(duration_s, self.end_s - now_s)
        self.end_s += extra
        return extra


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

    __slots__ = ("env", "user", "waiting", "bulk", "name", "_marks", "_granter")

    def __init__(self, env: simpy.Environment, name: str = ""):
        self.env = env
        self.name = name
        self.user: simpy.Event | None = None
        self.waiting: deque[simpy.Event] = deque()
        self.bulk: Bulk | None = None  # a shared link held by a data-parallel collective
        self._marks: dict[simpy.Event, Bulk] = {}
        self._granter = self._grant  # bound once: every release's callback

    def request(self, bulk: Bulk | None = None) -> simpy.Event:
        """An event that succeeds when the resource is granted (now, if it is free and no
        request waits); with ``bulk`` (a data-parallel collective's), :attr:`bulk` is that from
        the grant, so that others pass through at once (:class:`~sim.engine.links.Links`)."""
        req = simpy.Event(self.env)
        if bulk is not None:
            self._marks[req] = bulk
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
            if self._marks:
                self.bulk = self._marks.pop(user, self.bulk)
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

"""The rendezvous of a collective's members: the last one to arrive starts it, all wait for it.

A collective (an all-reduce of a stage's replicas, a tensor-parallel group's all-gather, an
expert group's all-to-all, a step barrier...) runs once all its members have reached it, as
NCCL's collectives do (a rank's kernel spins until its peers' have launched). The engine
models this with one :class:`Rendezvous` per kind of group: each member *arrives* under the
collective's key (its group and what it runs, e.g. ``(stage, tp_rank, step, kind)``) with the
number of members that key waits for; the arrival that completes the count starts the
collective's process, at that moment (the transfer begins at the last arrival), and every
member waits on the one event that process succeeds at its end (all resume together). A member
that arrived early has waited from its own arrival: :meth:`Rendezvous.join` returns that time,
from which the engine draws the member's event (waiting for the group is part of it).

The count is per key: once complete the key is closed, and a later arrival under the same key
opens a new rendezvous. Members are counted, not named: the caller chooses ``size`` (in a
mirrored run, :mod:`sim.engine.symmetry`, only the simulated members arrive).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable

import simpy

Start = Callable[[simpy.Event], Generator]
"""``start(done)``: the collective's process, to succeed ``done`` (with any value the members
should get, e.g. its spans) once it has run."""


class Rendezvous:
    """Arrivals counted under keys; the last arrival of a key starts its collective.

    Args:
        env: the simulation environment.
    """

    __slots__ = ("_open", "env")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._open: dict[Hashable, list] = {}

    def arrive(self, key: Hashable, size: int, start: Start | None = None) -> simpy.Event:
        """One member arrives now under ``key``, whose collective has ``size`` members.

        Returns the event every member of ``key`` waits on. The ``size``-th arrival closes the
        key and starts the process ``start(done)`` now (it must succeed ``done``); without
        ``start`` (a barrier) ``done`` succeeds at once.
        """
        entry = self._open.get(key)
        if entry is None:
            entry = self._open[key] = [self.env.event(), 0]
        entry[1] += 1
        done: simpy.Event = entry[0]
        if entry[1] == size:
            del self._open[key]
            if start is None:
                done.succeed()
            else:
                self.env.process(start(done))
        return done

    def join(self, key: Hashable, size: int, start: Start | None = None):
        """Process: :meth:`arrive` and wait for the collective to end; returns
        ``(arrived_s, value)``: the time this member arrived (seconds) and the value ``done``
        succeeded with."""
        arrived_s = self.env.now
        value = yield self.arrive(key, size, start)
        return arrived_s, value

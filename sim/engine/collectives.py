"""Data-parallel collectives over the ``w`` replicas of a stage: all-reduce, reduce-scatter,
all-gather.

Ring algorithm (Patarasuk & Yuan 2009; NCCL's ring): the ``w`` replicas form a ring
``r0 -> r1 -> ... -> r0``; an all-reduce of ``B`` bytes is ``2(w-1)`` steps, a reduce-scatter or
an all-gather ``w-1`` steps, and in every step each replica sends ``B/w`` bytes to the next one,
all hops at once. A step therefore takes the slowest hop's
:func:`~sim.hardware.topology.transfer_time_s` for ``B/w`` bytes. The collective holds every
link of the ring for its whole duration, so it contends with sends and swaps on those links.
"""

from __future__ import annotations

import simpy

from sim.engine.inputs import SimInput, StageReplica
from sim.engine.links import Links
from sim.events import Event, EventKind, Stream
from sim.hardware.topology import Link, transfer_time_s

RING_STEPS = {EventKind.ALLREDUCE: 2, EventKind.REDUCE_SCATTER: 1, EventKind.ALL_GATHER: 1}
"""Ring steps per ``w - 1`` of each collective (Patarasuk & Yuan; NCCL ring)."""


def ring_time_s(routes: list[tuple[Link, ...]], nbytes: float, kind: str) -> float:
    """Uncontended seconds of a ring collective of ``nbytes`` over ``len(routes)`` members.

    Args:
        routes: the ring's hops, ``routes[i]`` from member ``i`` to member ``i + 1 (mod w)``.
        nbytes: bytes of the buffer every member holds (the gradients), ``B``.
        kind: ``allreduce`` (``2(w-1)`` steps), ``reduce_scatter`` or ``all_gather``
            (``w-1`` steps).

    Returns:
        ``steps * max_i transfer_time_s(routes[i], B / w)``; 0 for one member.
    """
    w = len(routes)
    if w < 2:
        return 0.0
    step_s = max(transfer_time_s(route, nbytes / w) for route in routes)
    return RING_STEPS[kind] * (w - 1) * step_s


class Collectives:
    """The collectives of one run: replicas join, the last one to join starts the ring.

    Args:
        env: the simulation environment.
        inp: the configuration (placement and width).
        links: the link resources the ring holds.
    """

    def __init__(self, env: simpy.Environment, inp: SimInput, links: Links):
        self.env = env
        self.inp = inp
        self.links = links
        self._groups: dict[tuple, list] = {}

    @staticmethod
    def nbytes(rep: StageReplica) -> float:
        """Bytes reduced per replica: ``dp_grad_bytes``, else ``grad_bytes``."""
        plan = rep.plan
        return plan.grad_bytes if plan.dp_grad_bytes is None else plan.dp_grad_bytes

    def join(self, rep: StageReplica, step_no: int, tags: dict, kind: str):
        """Process: join the ``kind`` collective of ``rep``'s stage at step ``step_no``;
        returns when every replica has joined and the ring has finished."""
        key = (rep.stage, step_no, kind)
        group = self._groups.setdefault(key, [self.env.event(), 0])
        group[1] += 1
        nbytes = self.nbytes(rep)
        if group[1] == self.inp.dp_width:
            self.env.process(self._ring(rep.stage, nbytes, kind, group[0]))
        start = self.env.now
        yield group[0]
        self.links.events.append(Event(kind, rep.gpu, Stream.COMM, f"{kind} s{rep.stage}", start,
                                       self.env.now, nbytes=nbytes, **tags))

    def _ring(self, s: int, nbytes: float, kind: str, done: simpy.Event):
        topo, w = self.inp.topology, self.inp.dp_width
        gpus = [f"gpu{self.inp.placement[r][s]}" for r in range(w)]
        routes = [topo.route(gpus[i], gpus[(i + 1) % w]) for i in range(w)]
        yield from self.links.hold([lk for route in routes for lk in route],
                                   ring_time_s(routes, nbytes, kind))
        done.succeed()

"""A collective over a group's GPUs that its members join: one plan, one hold, one event each.

The data-parallel, expert-data-parallel and tied-gradient collectives
(:mod:`sim.engine.collectives`) and FSDP's per-unit ones (:mod:`sim.engine.fsdp`) run alike:
the group's members meet (:class:`~sim.engine.rendezvous.Rendezvous`); the last to arrive
starts the collective, which holds the links of the group's
:func:`~sim.comm.hierarchical.collective_plan` (those :class:`~sim.engine.symmetry.HeldLinks`
says, mirrored) for the plan's :meth:`~sim.comm.hierarchical.CollectivePlan.time_s`; each member
then logs one event on its GPU's ``comm`` stream, from its own arrival (waiting for the group is
part of it) to the collective's end.
"""

from __future__ import annotations

from collections.abc import Hashable
from functools import partial

import simpy

from sim.comm.hierarchical import CollectivePlan, collective_plan
from sim.engine.inputs import SimInput
from sim.engine.links import Links
from sim.engine.rendezvous import Rendezvous
from sim.engine.replicas import StageReplica
from sim.engine.symmetry import HeldLinks
from sim.events import Event, Stream


class JoinedCollectives:
    """The joined collectives of one run's owner (module doc), and their plans by GPUs.

    Args:
        env: the simulation environment.
        inp: the configuration (its topology).
        links: the link resources collectives hold; events are logged there.
        held: which of a plan's links to hold.
    """

    def __init__(self, env: simpy.Environment, inp: SimInput, links: Links, held: HeldLinks):
        self.env, self.inp, self.links, self.held = env, inp, links, held
        self._meet = Rendezvous(env)
        self._plans: dict[tuple[str, ...], CollectivePlan] = {}

    def plan(self, gpus: tuple[str, ...]) -> CollectivePlan:
        """The :func:`~sim.comm.hierarchical.collective_plan` of ``gpus`` (memoised)."""
        cached = self._plans.get(gpus)
        if cached is None:
            cached = self._plans[gpus] = collective_plan(self.inp.topology, gpus)
        return cached

    def join(
        self,
        rep: StageReplica,
        key: Hashable,
        size: int,
        plan: CollectivePlan,
        *,
        kind: str,
        nbytes: float,
        name: str,
        tags: dict,
    ):
        """Process: ``rep`` joins the ``kind`` collective of ``nbytes`` that ``size`` members
        run under ``key``; returns when the last has arrived and ``plan`` has run it. Logs
        ``rep``'s event ``name`` (module doc) with ``tags``."""
        hold = partial(self.hold, plan, nbytes, kind)
        start, _ = yield from self._meet.join(key, size, hold)
        self.links.events.append(
            Event(
                kind,
                rep.gpu,
                Stream.COMM,
                name,
                start,
                self.env.now,
                nbytes=nbytes,
                links=plan.names,
                **tags,
            )
        )

    def hold(self, plan: CollectivePlan, nbytes: float, kind: str, done: simpy.Event):
        """Process: a ``kind`` collective of ``nbytes`` holds ``plan``'s links for its time,
        shared on the network and the server-local links only for the local phases
        (:meth:`sim.engine.links.Links.hold`); then ``done`` succeeds."""
        held = self.held(plan)
        early = tuple(lk for lk in plan.local_links() if lk in held), plan.local_s(nbytes, kind)
        comm = ("dp", plan.members)
        yield from self.links.hold(held, plan.time_s(nbytes, kind), comm=comm, early=early)
        done.succeed()

"""Tensor-parallel collectives: the Megatron collectives of a stage replica's ``t`` ranks.

Tensor-parallel collectives (:class:`TensorCollectives`): after the compute of a forward, and of
a backward (B or I), the ``t`` ranks of a stage replica run that stage's Megatron collectives
(:mod:`sim.parallel.megatron`; ``count`` collectives of each ``(kind, bytes)``, one after another)
over the rings of their group; the ranks wait for them before they send or go on, as Megatron's
blocking all-reduces make them (no overlap with compute). A micro-batch's collectives of one
kind are one link hold and one event per rank (stream ``tp``) whose ``nbytes`` is their sum.
Their rings are the communicator's (:func:`~sim.comm.hierarchical.collective_plan`), timed by
the same plan as the data-parallel collectives (:mod:`sim.engine.collectives`).

Collectives a framework overlaps with their GEMMs (:class:`~sim.parallel.tp_overlap.OverlapOp`,
``StageCost.tp_*_overlap``) start with the action's compute instead (:meth:`TensorCollectives.
start`): they hold the group's links beside it, the action's compute is longer by what the
pairs add (:meth:`TensorCollectives.overlap_extra_s`), and the rank waits for both.
"""

from __future__ import annotations

from functools import partial

import simpy

from sim.comm.hierarchical import CollectivePlan, collective_plan
from sim.engine.drains import Drained
from sim.engine.inputs import SimInput
from sim.engine.links import Links
from sim.engine.rendezvous import Rendezvous
from sim.engine.replicas import StageReplica
from sim.engine.symmetry import HeldLinks
from sim.events import Event, Stream
from sim.parallel.tp_overlap import OverlapOp


class TensorCollectives:
    """The tensor-parallel collectives of one run (module doc): the ``t`` ranks of a stage
    replica join, the last one to join runs them.

    Args:
        env: the simulation environment.
        inp: the configuration (its ``tensor_groups``).
        links: the link resources the group's ring holds.
    """

    def __init__(self, env: simpy.Environment, inp: SimInput, links: Links):
        self.env = env
        self.inp = inp
        self.links = links
        self._meet = Rendezvous(env)
        self._rings: dict[tuple, CollectivePlan] = {}
        self.held = HeldLinks(inp)

    def ring(self, r: int, s: int) -> CollectivePlan:
        """The ring over the tensor-parallel group of stage ``s`` of replica ``r``."""
        cached = self._rings.get((r, s))
        if cached is None:
            gpus = tuple(f"gpu{g}" for g in self.inp.tensor_groups[r][s])
            cached = self._rings[(r, s)] = collective_plan(self.inp.topology, gpus)
        return cached

    def comm_s(self, rep: StageReplica, kind: str, nbytes: float) -> float:
        """Uncontended seconds of one ``kind`` collective of ``nbytes`` on ``rep``'s group."""
        return self.ring(rep.replica, rep.stage).time_s(nbytes, kind)

    def overlap_extra_s(self, rep: StageReplica, ops: tuple[OverlapOp, ...]) -> float:
        """Seconds the overlapped pairs ``ops`` add to an action's compute
        (:meth:`~sim.parallel.tp_overlap.OverlapOp.extra_s` with each collective's time)."""
        return sum(op.extra_s(self.comm_s(rep, op.kind, op.nbytes)) for op in ops)

    def start(
        self, rep: StageReplica, label: str, ops: tuple[OverlapOp, ...], tags: dict
    ) -> simpy.Process:
        """The overlapped collectives ``ops`` of action ``label``, started now beside its
        compute (module doc): a process the rank waits for after the compute."""
        triples = tuple((op.kind, op.nbytes, op.count) for op in ops)
        return self.env.process(self.join(rep, f"{label} overlapped", triples, tags))

    def join(
        self, rep: StageReplica, label: str, ops: tuple[tuple[str, float, int], ...], tags: dict
    ):
        """Process: join the collectives ``ops`` (``(kind, bytes each, count)``) of action
        ``label`` of ``rep``'s group; returns when all ``t`` ranks have joined and the
        collectives have run. Logs one event per kind on ``rep``'s GPU (the first from the
        moment ``rep`` joined: waiting for the group is part of it)."""
        key = (rep.replica, rep.stage, label)
        run = partial(self._run, rep, ops)
        start, spans = yield from self._meet.join(key, self.inp.simulated_tensor_ranks, run)
        names = self.ring(rep.replica, rep.stage).names
        for i, (kind, begin, end, nbytes) in enumerate(spans):
            self.links.events.append(
                Event(
                    kind,
                    rep.gpu,
                    Stream.TP,
                    f"tp {kind} {label}",
                    start if i == 0 else begin,
                    end,
                    nbytes=nbytes,
                    links=names,
                    **tags,
                )
            )

    def log_drained(
        self,
        rep: StageReplica,
        label: str,
        spans: tuple[tuple[float, float], ...],
        drains: tuple[Drained, ...],
        tags: dict,
    ) -> None:
        """Log the collectives of action ``label`` that its layers' host syncs drained
        (:mod:`sim.engine.drains`), each :class:`~sim.engine.drains.Drained` in its ``spans``
        entry (``(start, end)`` seconds, :meth:`~sim.engine.streams.ComputeStream.run_issued`):
        one event per collective on ``rep``'s GPU and stream ``tp``, one after another."""
        names = self.ring(rep.replica, rep.stage).names
        for (t, _), d in zip(spans, drains, strict=True):
            for kind, nbytes, sec in d.ops:
                self.links.events.append(
                    Event(kind, rep.gpu, Stream.TP, f"tp {kind} {label} drained", t, t + sec,
                          nbytes=nbytes, links=names, **tags)
                )  # fmt: skip
                t += sec

    def _run(self, rep: StageReplica, ops: tuple[tuple[str, float, int], ...], done: simpy.Event):
        plan = self.ring(rep.replica, rep.stage)
        spans = []
        for kind in dict.fromkeys(k for k, _, _ in ops):
            mine = [(nb, c) for k, nb, c in ops if k == kind]
            begin = yield from self.links.hold(
                self.held(plan),
                sum(c * plan.time_s(nb, kind) for nb, c in mine),
                comm=("tp", plan.members),
            )
            spans.append((kind, begin, self.env.now, sum(nb * c for nb, c in mine)))
        done.succeed(spans)

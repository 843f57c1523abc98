"""Exchanges within expert-parallel and context-parallel groups, on the group's links.

The engine's replicas of a stage are the ``dp * cp`` data- and context-parallel ranks, in
Megatron-LM's order (``tp-cp-ep-dp-pp``, ``parallel_state.py``): replica ``r`` is context rank
``r mod cp``; the context-parallel group of ``r`` is the ``cp`` consecutive replicas
``cp*floor(r/cp) ...``, its expert-parallel group the ``ep`` consecutive replicas
``ep*floor(r/ep) ...`` (the EP group is carved out of the data x context ranks). Each tensor rank
``k`` has its own groups (rank ``k`` of every member). With MoE parallel folding (an expert
tensor-parallel size ``etp`` other than ``t``) the expert-parallel group and the experts'
tensor-parallel group (``etp``, its all-gather and reduce-scatter of the routed rows) are those
of the folded expert mesh, across tensor ranks (:mod:`sim.parallel.folding`).

After the compute of a forward or a backward, every rank joins its stage's group exchanges
(:class:`~sim.parallel.ops.GroupOp`: the context-parallel ones, then the expert-parallel ones);
when the last member has joined, they run one after another, each holding the links it crosses
for its duration:

* ``alltoall``: :func:`~sim.comm.alltoall.alltoall_time_s` (every pair on its route, the most
  loaded link sets the time);
* ``ring`` (ring attention): every member sends to the next at once; a step takes the slowest
  hop's :func:`~sim.hardware.transfer.transfer_time_s` at the ring's shared hop rate
  (:func:`~sim.hardware.transfer.ring_hop_bandwidths`). The steps ran alongside the attention
  core already counted in the compute, so a rank waits, and the links are held, only for
  ``count * max(0, step - hidden_s)``; the event is drawn from where the hidden part began
  (inside the compute). Not modelled: the hidden part's contention with other traffic;
* ``all_gather`` / ``reduce_scatter``: the group's rings (:mod:`sim.comm.hierarchical`).

Waiting for the others is part of a rank's first exchange event (as tensor-parallel ones). In a
mirrored run (:mod:`sim.engine.symmetry`) only replica 0 is simulated: its groups' exchanges start
when it joins (the other members run the same program and join at the same moment), run over all
members' GPUs and hold the links :class:`~sim.engine.symmetry.HeldLinks` says. The
exchanges block the rank's compute stream (Megatron's dispatcher waits for its all-to-all);
overlapping them with another micro-batch's compute is :meth:`GroupCollectives.run_ops`' use
by the DualPipe overlap (:mod:`sim.engine.overlap`).
"""

from __future__ import annotations

from functools import lru_cache, partial

import simpy

from sim.comm.alltoall import AllToAllCost, alltoall_time_s, even_pairs, links_used
from sim.comm.ep_dispatch import dispatch_cost
from sim.comm.hierarchical import collective_plan
from sim.engine.inputs import SimInput
from sim.engine.links import Links
from sim.engine.rendezvous import Rendezvous
from sim.engine.replicas import StageReplica
from sim.engine.symmetry import HeldLinks
from sim.events import Event, EventKind, Stream
from sim.hardware.parts import Link
from sim.hardware.topology import Topology
from sim.hardware.transfer import ring_hop_bandwidths, transfer_time_s
from sim.parallel.folding import expert_group, expert_tp_group
from sim.parallel.ops import GroupOp

EVENT_KIND = {
    "alltoall": EventKind.ALLTOALL,
    "ring": EventKind.RING_EXCHANGE,
    "all_gather": EventKind.ALL_GATHER,
    "reduce_scatter": EventKind.REDUCE_SCATTER,
}
STREAM = {"ep": Stream.EP, "cp": Stream.CP, "etp": Stream.TP}
GROUPS = ("cp", "etp", "ep")
"""The order a rank joins its groups' exchanges after a compute."""


def group_members(replica: int, size: int) -> tuple[int, ...]:
    """The replicas of ``replica``'s group of ``size`` consecutive replicas (module doc)."""
    g = replica // size
    return tuple(range(g * size, (g + 1) * size))


def op_cost(topo: Topology, gpus: tuple[str, ...], op: GroupOp, cost=None) -> tuple:
    """``(links, seconds per repetition, exposed seconds per repetition)`` of ``op`` among
    ``gpus`` (module doc)."""
    n = len(gpus)
    if n < 2:
        return (), 0.0, 0.0
    if op.kind == "alltoall":
        pairs = op.pairs if op.pairs is not None else even_pairs(n, op.nbytes)
        dur = alltoall_time_s(topo, gpus, pairs, cost)
        return links_used(topo, gpus, pairs), dur, dur
    if op.kind == "ring":
        routes = [topo.route(gpus[i], gpus[(i + 1) % n]) for i in range(n)]
        bws = ring_hop_bandwidths(routes)
        step = max(transfer_time_s(r, op.nbytes, bw) for r, bw in zip(routes, bws, strict=True))
        links: tuple[Link, ...] = tuple({lk.name: lk for r in routes for lk in r}.values())
        return links, step, max(0.0, step - op.hidden_s)
    plan = collective_plan(topo, gpus)
    dur = plan.time_s(op.nbytes, EVENT_KIND[op.kind])
    return tuple(plan.links), dur, dur


class _Group:
    """One rank's group as the run uses it: its ``members`` (``(replica, tensor rank)``), their
    ``gpus``, how many of them join (``joining``, :meth:`~sim.engine.symmetry.HeldLinks.
    members`), the rank's place in it (``rank``) and its exchanges' costs (``ops``, by op id)."""

    __slots__ = ("gpus", "joining", "members", "ops", "rank")

    def __init__(self, members: tuple, gpus: tuple[str, ...], joining: int, rank: int):
        self.members, self.gpus, self.joining, self.rank = members, gpus, joining, rank
        self.ops: dict[int, tuple] = {}


class GroupCollectives:
    """The expert- and context-parallel exchanges of one run (module doc).

    Args:
        env: the simulation environment.
        inp: the configuration (its layout's ``cp`` and ``ep``).
        links: the link resources the exchanges hold.
        cost: the expert all-to-all cost (:data:`~sim.comm.alltoall.AllToAllCost`); None: the
            runtime's dispatcher (:attr:`PipelineRuntime.dispatcher <sim.engine.inputs.
            PipelineRuntime.dispatcher>`: DeepEP's or Hybrid-EP's kernels,
            :mod:`sim.comm.ep_dispatch`), else NCCL's model (the per-link load model off NCCL).
    """

    def __init__(
        self, env: simpy.Environment, inp: SimInput, links: Links, cost: AllToAllCost | None = None
    ):
        self.env = env
        self.inp = inp
        self.links = links
        self._meet = Rendezvous(env)
        flex = cost is None and inp.runtime.dispatcher != "alltoall"
        held = HeldLinks(inp)

        def timed(gpus: tuple[str, ...], op: GroupOp) -> tuple:
            # a dispatcher moves the expert all-to-alls only
            mine = cost
            if flex and op.group == "ep":
                sms = inp.runtime.comm_sms or 20
                mine = dispatch_cost(inp.runtime.dispatcher, sms, op.routed)
            links, dur, exposed = op_cost(
                inp.topology, gpus, op, mine if op.group == "ep" else None
            )
            return held.of(links), dur, exposed

        self._cost = lru_cache(maxsize=None)(timed)
        self._joining = held.members
        lay = inp.layout
        self._sizes = {"cp": lay.cp, "ep": lay.ep, "etp": lay.expert_tp}
        # the configuration fixes every group and exchange: computed once per run, not per event
        self._groups: dict[tuple[int, int, int, str], _Group] = {}

    def size(self, group: str) -> int:
        """Members of a ``group`` (``ep``, ``cp`` or ``etp``)."""
        return self._sizes[group]

    def members(self, rep: StageReplica, group: str) -> tuple[tuple[int, int], ...]:
        """``(replica, tensor rank)`` of ``rep``'s ``group``, in group-rank order (module doc)."""
        lay, r, k = self.inp.layout, rep.replica, rep.tp_rank
        if group == "etp":
            return expert_tp_group(lay, r, k)
        if group == "ep" and lay.etp is not None:  # folded (sim.parallel.folding)
            return expert_group(lay, r, k)
        return tuple((x, k) for x in group_members(r, self.size(group)))

    def gpus(self, rep: StageReplica, group: str) -> tuple[str, ...]:
        """The GPUs of ``rep``'s ``group``, in group-rank order."""
        return tuple(
            f"gpu{self.inp.gpu_index(r, rep.stage, k)}" for r, k in self.members(rep, group)
        )

    def _group(self, rep: StageReplica, group: str) -> _Group:
        """``rep``'s ``group``, built on first use (the same for the whole run)."""
        key = (rep.replica, rep.stage, rep.tp_rank, group)
        g = self._groups.get(key)
        if g is None:
            members = self.members(rep, group)
            g = self._groups[key] = _Group(
                members,
                self.gpus(rep, group),
                self._joining(members),
                members.index((rep.replica, rep.tp_rank)),
            )
        return g

    def _op(self, g: _Group, op: GroupOp) -> tuple:
        """``(op, links, seconds, exposed seconds, bytes g's rank sends)``
        of ``op`` on ``g`` (:func:`op_cost`), memoised by the op object (kept alive with it)."""
        hit = g.ops.get(id(op))
        if hit is None or hit[0] is not op:
            links, dur, exposed = self._cost(g.gpus, op)
            hit = g.ops[id(op)] = (op, links, dur, exposed, op.total_bytes(g.rank))
        return hit

    def op_seconds(self, rep: StageReplica, op: GroupOp) -> float:
        """Uncontended seconds ``rep`` waits for ``op`` on its group (all repetitions)."""
        if self._sizes[op.group] < 2:
            return 0.0
        return op.count * self._op(self._group(rep, op.group), op)[3]

    def join(self, rep: StageReplica, label: str, ops: tuple[GroupOp, ...], tags: dict):
        """Process: run ``ops`` (context-parallel first, then expert-parallel) with the other
        members of ``rep``'s groups; returns when all have joined and the exchanges ran."""
        if len(ops) == 1:  # the DualPipe overlap's one exchange at a time
            group = ops[0].group
            if self._sizes[group] > 1:
                yield from self._join(rep, group, label, ops, tags)
            return
        for group in GROUPS:
            mine = tuple(op for op in ops if op.group == group)
            if mine and self._sizes[group] > 1:
                yield from self._join(rep, group, label, mine, tags)

    def _join(self, rep: StageReplica, group: str, label: str, ops: tuple, tags: dict):
        g = self._group(rep, group)
        key = (group, g.members[0], rep.stage, label)
        run = partial(self.run_ops, rep, group, ops)
        start, spans = yield from self._meet.join(key, g.joining, run)
        for i, (op, begin, end) in enumerate(spans):
            self.links.events.append(
                Event(
                    EVENT_KIND[op.kind],
                    rep.gpu,
                    STREAM[group],
                    f"{group} {op.kind} {label}",
                    start if i == 0 else begin,
                    end,
                    nbytes=self._op(g, op)[4],
                    **tags,
                )
            )

    def run_ops(self, rep: StageReplica, group: str, ops: tuple, done: simpy.Event):
        """Process: run ``ops`` one after another on ``rep``'s ``group``; ``done`` succeeds
        with ``[(op, begin, end)]`` once the members may go on (a ring's hidden part begins
        before it was joined)."""
        g = self._group(rep, group)
        spans = []
        for op in ops:
            _, links, dur, exposed, _ = self._op(g, op)
            comm = (group, g.gpus)
            if exposed >= dur:
                begin = yield from self.links.hold(links, op.count * dur, comm=comm)
                spans.append((op, begin, self.env.now))
                continue
            hidden = op.count * (dur - exposed)  # ran under the attention, before now
            begin = yield from self.links.hold(links, op.count * exposed, comm=comm)
            spans.append((op, begin - hidden, self.env.now))
        done.succeed(spans)

"""The links of the server, and the operations and transfers over them.

**Network and NVLink links are shared between NCCL communicators, FIFO within one**
(:data:`SHARED_KINDS`; ``measurements/engine/link_sharing.md``). An operation (a collective,
a send) belongs to one communicator: a group kind and its members (``("tp", gpus)``,
``("dp", gpus)``, ``("ep", gpus)``, the pipeline's sends, ...). NCCL serialises the
operations of one communicator (NVIDIA/nccl#574: "NCCL collective operations on a given
communicator are always serialized"; #1262), so each communicator has a FIFO token
(:meth:`Links.token`) its operations hold one after another. Operations of different
communicators on one link progress together, each slower (NVIDIA/nccl#204: two broadcasts of
two communicators at half the rate each; meta-pytorch/torchrec#4251: process groups "compete
for NVLink bandwidth"; fair congestion control, CASSINI NSDI'24, MLTCP): every operation is a
flow whose work is its uncontended duration (latencies and bytes over its bottleneck, the
plan's :meth:`~sim.comm.hierarchical.CollectivePlan.time_s`, :meth:`Links.duration_s`) and
whose rate is its max-min fair share of its links (:mod:`sim.engine.fair_share`, recomputed
at each flow's start and end). Equal shares per link are an **assumption** (NCCL's channels
per communicator are not modelled). Two equal operations of two communicators on one link both
end at 2T (FIFO: T and 2T); both disciplines are work conserving. What changes most is a
collective over many replicas' links: under FIFO it started when all were free at once, so it
waited for the latest of the other groups' operations on any of them, which made the full
simulation of alike replicas slower than the mirrored one (:mod:`sim.engine.symmetry`;
Llama-3.1-8B TP 2 + FSDP2: +9 % at 16 H100, +41 % at 64); shared, it progresses on all of
them at its bottleneck share, and the two agree (``tests/test_fair_share.py``). The former
rule for a data-parallel collective (other traffic passed through its hold at half rate,
``d + min(d, r)``) is the two-flow, one-link case (``tests/test_shared_links.py``); its checks
(Llama-3.1-405B on 128 B200 with the parameter all-gather under the forward or beside the
step equally fast; Llama-3 70B on 32 GB300 whose gradient sends waited for whole buckets under
FIFO) are kept. A hierarchical collective gives its server-local links back after its local
phases' work (``early``, :meth:`~sim.comm.hierarchical.CollectivePlan.local_s`).

**Sends and copies are flows of the pipeline's communicator, FIFO among themselves on each
link.** A stage-boundary send shares a network or NVLink link with the collectives of other
communicators, as above; the sends run on one communicator, the pipeline-parallel group
(Megatron-LM: ``torch.distributed.send(..., group=get_pipeline_model_parallel_group())``,
``batch_isend_irecv`` on that group), so two sends crossing one link go one after another (a
FIFO lane per link, :meth:`Links._lanes`), and sends over disjoint routes run at once, as the
engine had them (**assumption**: FIFO per link rather than per rank or shared; no source
measured a rank's two sends to two peers on one NIC. Shared, one rank's sends to its next and
previous stage slowed each other: Megatron-Bridge Qwen3-235B on 256 B200, PP 4, EP 32, +3.2
points of error on three rows and no steady period, :mod:`sim.engine.periodic`).

**PCIe and host links stay FIFO resources of capacity 1** (:class:`~sim.engine.fifo_link.
FifoLink`; hardware.md §6), as the CPUs: a transfer holds every FIFO link of its route for its
duration. NVIDIA/nccl#204's two broadcasts shared a PCIe switch, but PCIe's duplex
interference (H2D measured while D2H runs drops to 11-16 of 24-26 GB/s on RTX 4090 boxes,
NVIDIA/nvbandwidth#15) is a separate open item, so PCIe keeps FIFO.

**An operation queues on its communicator's token and all its FIFO links at once, when it is
issued**, and starts when it holds them all: FIFO by issue time on each. NCCL runs a collective
as one kernel whose thread blocks each drive one channel (a ring over one NVLink set or NIC, a
rail), all launched together (NVIDIA/nccl ``src/enqueue.cc``@5067397, l. 812: the task's
channels ``channelLo..channelHi`` join the plan's mask; l. 1756-1758: ``grid = {nChannels}``,
one launch): a collective occupies its rails at once, not one after another (on FIFO links:
a wide one is not overtaken rail by rail, issue 26). Queued at once, two operations never
deadlock (every queue is in the one order of issue).

**Collectives issued at one instant queue in their ranks' order.** A collective (:meth:`Links.
take`, :meth:`Links.hold`) joins the queues at the end of the instant it is issued (an
:class:`~sim.engine.fifo_link.EndOfInstant` event, after every other event of the instant), the
collectives of one instant by ``order`` (:data:`DENSE` before :data:`EXPERT`: Megatron-Core starts the dense
bucket groups' collectives before the expert-parallel ones, ``distributed_data_parallel.py``@
d98e8a6 l. 638 and 664, ``self.bucket_groups + self.expert_parallel_bucket_groups``), then as
issued. Else the order of two collectives issued at one instant, the data-parallel one of all
replicas and an expert-data-parallel one of some, was the order in which the replicas'
processes happened to complete them, which differs between replicas (replica 2 completes its
expert group's before replica 3 the data-parallel one): the full simulation was not symmetric
and differed from the mirrored one (:mod:`sim.engine.symmetry`; 1.127 against 1.090 s with EP 2
and both overlaps, ``tests/test_symmetry.py``). Point-to-point transfers (:meth:`Links.
transfer`: sends, copies) queue at once, before the collectives of their instant.

NCCL's sends between GPUs that run NCCL (a compute capability in the hardware description)
take NCCL's own time (:meth:`Links.duration_s`, :func:`sim.comm.nccl.p2p_time_s`): its
protocol's latency instead of the links' latencies.

Two rates per link: NCCL traffic (:data:`NCCL_KINDS`: the pipeline's p2p sends and the
collectives) moves at NCCL's achieved rate (:meth:`~sim.hardware.parts.Link.rate_Bps`; ~20 of
25 GB/s per NVLink, NCCL ``src/graph/topo.h``: NCCL's SM copies move 128-byte payloads, copy
engines 256, NVIDIA/nccl-tests#149); raw copies (swaps, chunk fetches, write-backs, step copies:
``cudaMemcpy`` on copy engines) keep the link's raw ``bandwidth_Bps``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from functools import partial

import simpy

from sim.comm.nccl import NET, NVLINK, PCI, p2p_time_s
from sim.comm.p2p_net import group_channels_per_peer, peer_rate_Bps
from sim.comm.rings import PEER_KINDS
from sim.engine.fair_share import FairShare
from sim.engine.fifo_link import LATE, EndOfInstant, FifoLink
from sim.events import COLLECTIVE_KINDS, Event, EventKind
from sim.hardware.fabric import NETWORK
from sim.hardware.parts import Link
from sim.hardware.topology import Topology
from sim.hardware.transfer import transfer_time_s

SHARED_KINDS = frozenset({NETWORK, *PEER_KINDS})
"""Link kinds whose bandwidth the communicators share (module doc): the network and NVLink
(``nvlink``, ``nvswitch``); PCIe and host links stay FIFO."""
NCCL_KINDS = frozenset({EventKind.TRANSFER, *COLLECTIVE_KINDS})
"""Event kinds NCCL carries (torch.distributed send/recv and collectives on the NCCL backend):
they move at NCCL's rate of each link; every other transfer is a raw copy."""

__all__ = [  # FifoLink and LATE live in sim.engine.fifo_link, importable from here too
    "DENSE", "EXPERT", "LATE", "NCCL_KINDS", "SHARED_KINDS", "FifoLink", "Links", "Ticket",
]  # fmt: skip

DENSE = 0
"""``order`` of a collective of every replica (and of any other but :data:`EXPERT`)."""
EXPERT = 1
"""``order`` of an expert-data-parallel collective: after the dense one of its instant."""


class Ticket:
    """What an operation of a communicator holds once :meth:`Links.take` granted it: the
    grants (``(resource, request)``: the communicator's token first, then the FIFO links)
    and the names of its shared links (sorted)."""

    __slots__ = ("grants", "shared")

    def __init__(self, grants: list, shared: tuple[str, ...]):
        self.grants = grants
        self.shared = shared


class Links:
    """The link resources of one run, and the transfers that hold them.

    Args:
        env: the simulation environment.
        topology: the server.
        events: the log's event list; every transfer appends its :class:`Event` when it ends.
        p2p_ranks: ranks of the NCCL communicator the stage sends run on (below).
    """

    def __init__(
        self, env: simpy.Environment, topology: Topology, events: list[Event], p2p_ranks: int = 2
    ):
        self.env = env
        self.topology = topology
        self.events = events
        self.p2p_ranks = p2p_ranks
        """Ranks of the NCCL communicator the stage sends (``TRANSFER``) run on: 2 for lone
        sends, the pipeline group's for batched ones (:func:`sim.comm.p2p_net.
        group_channels_per_peer`)."""
        self.share = FairShare(env)
        self._res: dict[str, FifoLink] = {}
        self._comms: dict[Hashable, FifoLink] = {}
        self._split: dict[tuple[str, ...], tuple[list[FifoLink], tuple[str, ...]]] = {}
        self._paths: dict[tuple[str, str], tuple] = {}
        self._durations: dict[tuple[str, str, float, bool, bool], float] = {}
        self._issued: list[tuple[int, int, Callable[[], list], simpy.Event]] = []
        self._issues = 0

    def resource(self, name: str) -> FifoLink:
        """The FIFO resource of link (or CPU) ``name``, created on first use."""
        res = self._res.get(name)
        if res is None:
            res = self._res[name] = FifoLink(self.env, name)
        return res

    def token(self, comm: Hashable) -> FifoLink:
        """The FIFO token of communicator ``comm`` (group kind and members, module doc): its
        operations hold it one after another."""
        res = self._comms.get(comm)
        if res is None:
            res = self._comms[comm] = FifoLink(self.env, str(comm))
        return res

    def split(self, links: Iterable[Link]) -> tuple[list[FifoLink], tuple[str, ...]]:
        """``(FIFO resources, shared link names)`` of ``links``, each in name order: PCIe and
        host links are FIFO, :data:`SHARED_KINDS` shared (memoised by the names)."""
        by_name = {lk.name: lk for lk in links}
        key = tuple(sorted(by_name))
        hit = self._split.get(key)
        if hit is None:
            fifo = [self.resource(n) for n in key if by_name[n].kind not in SHARED_KINDS]
            shared = tuple(n for n in key if by_name[n].kind in SHARED_KINDS)
            hit = self._split[key] = (fifo, shared)
        return hit

    def take(self, comm: Hashable, links: Iterable[Link], order: int = DENSE):
        """Process: queue, at the end of this instant (by ``order``, module doc), on
        ``comm``'s token and on the FIFO ones of ``links`` at once, and wait for all; returns
        the :class:`Ticket` (run on it with :meth:`run`, give it back with :meth:`give`)."""
        fifo, shared = self.split(links)
        resources = [self.token(comm), *fifo]
        grants = yield self._issue(order, partial(_request, resources))
        for _, req in grants:
            yield req
        return Ticket(grants, shared)

    def run(self, ticket: Ticket, work_s: float, early: tuple[tuple[Link, ...], float] = ((), 0.0)):
        """Process: move ``work_s`` seconds of work (at the full rate) over ``ticket``'s links,
        sharing its shared ones (:class:`~sim.engine.fair_share.FairShare`); ``early``:
        ``(links, seconds)`` given back after that much of the work (FIFO ones after as many
        seconds)."""
        names = {lk.name for lk in early[0]}
        if ticket.shared:
            done = self.share.start(ticket.shared, work_s, (tuple(sorted(names)), early[1]))
        else:
            done = self.env.timeout(work_s)
        first = [g for g in ticket.grants[1:] if g[0].name in names]
        if first and early[1] < work_s:
            yield self.env.timeout(early[1])
            for res, req in first:
                res.release(req)
            ticket.grants = [g for g in ticket.grants if g not in first]
        yield done

    @staticmethod
    def give(ticket: Ticket) -> None:
        """Give back what ``ticket`` holds (the communicator's token, the FIFO links)."""
        for res, req in ticket.grants:
            res.release(req)
        ticket.grants = []

    def hold(
        self,
        links: Iterable[Link],
        duration_s: float,
        *,
        comm: Hashable,
        early: tuple[tuple[Link, ...], float] = ((), 0.0),
        order: int = DENSE,
    ):
        """Process: one operation of communicator ``comm`` (a collective) of ``duration_s``
        uncontended seconds over ``links``: :meth:`take`, :meth:`run`, :meth:`give` (module
        doc); returns the time it started (when it held its token and FIFO links).
        ``early``: ``(links, seconds)`` given back after their own seconds of work (a
        hierarchical collective's server-local links, :meth:`sim.comm.hierarchical.
        CollectivePlan.local_s`)."""
        ticket = yield from self.take(comm, links, order)
        start = self.env.now
        yield from self.run(ticket, duration_s, early)
        self.give(ticket)
        return start

    def _issue(self, order: int, request: Callable[[], list]) -> simpy.Event:
        """An event that succeeds, at the end of this instant, with ``request()`` (of
        :func:`_request`), called after those of the collectives of the instant with a lower
        ``order`` or issued before with the same (module doc)."""
        if not self._issued:
            EndOfInstant(self.env, self._queue_issued)
        issued = simpy.Event(self.env)
        self._issued.append((order, self._issues, request, issued))
        self._issues += 1
        return issued

    def _queue_issued(self, _: object) -> None:
        batch, self._issued = sorted(self._issued, key=lambda x: (x[0], x[1])), []
        for _, _, request, issued in batch:
            issued.succeed(request())

    def _lanes(self, shared: tuple[str, ...]) -> list[FifoLink]:
        """The point-to-point lanes of the shared links ``shared``: FIFO resources that order
        the sends and copies crossing each link among themselves (module doc)."""
        return [self.resource(f"p2p|{n}") for n in shared]

    def _path(self, src: str, dst: str) -> tuple:
        """``(route, link names, FIFO resources, shared names, queues)`` of ``src -> dst``
        (both in name order, :meth:`split`; ``queues``: what a send over shared links
        requests, the shared links' lanes then the FIFO links), cached."""
        key = (src, dst)
        path = self._paths.get(key)
        if path is None:
            route = self.topology.route(src, dst)
            fifo, shared = self.split(route)
            queues = [*self._lanes(shared), *fifo]
            path = self._paths[key] = (route, tuple(lk.name for lk in route), fifo, shared, queues)
        return path

    def duration_s(
        self, src: str, dst: str, route: tuple[Link, ...], nbytes: float, nccl: bool,
        ranks: int = 2,
    ) -> float:  # fmt: skip
        """Uncontended seconds of moving ``nbytes`` over ``route`` from ``src`` to ``dst``: an
        NCCL send between two GPUs that run NCCL by NCCL's model (:func:`sim.comm.nccl.
        p2p_time_s`: its protocol's latency, the path's NCCL rate); any other transfer by
        :func:`~sim.hardware.transfer.transfer_time_s` (the links' latencies and rate). An
        NCCL send between servers moves at most at its p2p channels' rate
        (:func:`sim.comm.p2p_net.peer_rate_Bps`) on a communicator of ``ranks`` ranks
        (:func:`sim.comm.p2p_net.group_channels_per_peer`)."""
        kinds = {lk.kind for lk in route}
        rate = min(lk.rate_Bps(nccl) for lk in route)
        if nccl and NETWORK in kinds and self.topology.fabric is not None:  # p2p channels
            channels = group_channels_per_peer(rate, ranks, self.topology.fabric.nccl_p2p_channels)
            rate = min(rate, peer_rate_Bps(rate, channels))
        if nccl and _runs_nccl(self.topology, src) and _runs_nccl(self.topology, dst):
            hw = NET if NETWORK in kinds else NVLINK if kinds <= PEER_KINDS else PCI
            return p2p_time_s(hw, rate, nbytes)
        return transfer_time_s(route, nbytes, rate, nccl=nccl)

    def transfer(
        self, src: str, dst: str, nbytes: float, kind: str, name: str, stream: str, **tags
    ):
        """Process: move ``nbytes`` from node ``src`` to ``dst`` and log it as ``kind`` on
        ``stream`` of ``src``; returns its start time (now, and nothing logged, when
        ``src == dst`` or ``nbytes <= 0``). A kind of :data:`NCCL_KINDS` moves at NCCL's rate
        of the route's links, any other (a swap, a fetch) at their raw rate."""
        route, names, fifo, shared, queues = self._path(src, dst)
        if not route or nbytes <= 0:
            return self.env.now
        key = (src, dst, nbytes, kind in NCCL_KINDS, kind == EventKind.TRANSFER)
        dur = self._durations.get(key)
        if dur is None:  # the same sends recur every micro-batch: computed once each
            ranks = self.p2p_ranks if key[4] else 2
            dur = self._durations[key] = self.duration_s(src, dst, route, nbytes, key[3], ranks)
        if shared:  # a flow of the pipeline's communicator, FIFO per link (module doc)
            reqs = _request(queues)
            for _, req in reqs:
                yield req
            start = self.env.now
            yield self.share.start(shared, dur)
        elif len(fifo) == 1:  # fast path: one FIFO link
            res = fifo[0]
            req = res.request()
            yield req
            start = self.env.now
            yield self.env.timeout(dur)
            res.release(req)
            reqs = []
        else:
            reqs = _request(fifo)
            for _, req in reqs:
                yield req
            start = self.env.now
            yield self.env.timeout(dur)
        for res, req in reqs:
            res.release(req)
        self.events.append(
            Event(kind, src, stream, name, start, self.env.now, nbytes=nbytes, links=names, **tags)
        )
        return start


def _request(resources: list[FifoLink]) -> list[tuple[FifoLink, simpy.Event]]:
    """Request every one of ``resources`` now (all at once, module doc): the grants."""
    return [(r, r.request()) for r in resources]


def _runs_nccl(topology: Topology, node: str) -> bool:
    """Whether ``node`` is a GPU with a compute capability (it runs NCCL)."""
    if not node.startswith("gpu") or not node[3:].isdigit():
        return False
    return topology.gpu(int(node[3:])).compute_capability is not None

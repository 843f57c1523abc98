"""The links of the server as SimPy resources, and transfers over them.

Every directed link is a FIFO resource of capacity 1 (hardware.md §6: each link is a shared
resource): a transfer holds every link of its route for :func:`~sim.hardware.topology.
transfer_time_s` (latencies plus bytes over the bottleneck), so two transfers crossing one link
take longer than one. Links are acquired in name order, so two multi-link transfers never
deadlock. A single-link route (the common NVLink case) skips the sorting.

NCCL's sends between GPUs that run NCCL (a compute capability in the hardware description)
take NCCL's own time (:meth:`Links.duration_s`, :func:`sim.comm.nccl.p2p_time_s`): its
protocol's latency instead of the links' latencies.

Two rates per link: NCCL traffic (:data:`NCCL_KINDS`: the pipeline's p2p sends and the
collectives) moves at NCCL's achieved rate (:meth:`~sim.hardware.topology.Link.rate_Bps`; ~20 of
25 GB/s per NVLink, NCCL ``src/graph/topo.h``: NCCL's SM copies move 128-byte payloads, copy
engines 256, NVIDIA/nccl-tests#149); raw copies (swaps, chunk fetches, write-backs, step copies:
``cudaMemcpy`` on copy engines) keep the link's raw ``bandwidth_Bps``.

FIFO, not shared bandwidth (issue 12: "choose by what measurements show"): the measurements at
hand do not separate the two. Links are per direction, and NVLink's bidirectional rate is
twice the unidirectional one (H100: 740-773 vs 371-377 GB/s, NVIDIA/nccl#1264, hardware.md §4),
which both models give; in every configuration of Galvatron's nccl-tests files each link
direction carries at most one flow of the model, so the files cannot tell the disciplines apart
(their p2p decline with more concurrent pairs, 164 -> 139 -> 109 GB/s, is not link sharing:
no link is shared by two pairs there; see ``benchmarks/accuracy/accuracy_comm.py``). Both disciplines are
work conserving, so a set of transfers crossing one link ends at the same time either way (two
equal copies: 2T); they differ only in which copy finishes first (FIFO: T and 2T; shared: 2T and
2T). FIFO is what one CUDA stream or one NCCL communicator does with its own operations, so it is
kept. Not modelled: the duplex interference of PCIe (H2D measured while D2H runs drops to 11-16
of 24-26 GB/s on RTX 4090 boxes, NVIDIA/nvbandwidth#15).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import simpy

from sim.comm.nccl import NET, NVLINK, PCI, p2p_time_s
from sim.comm.rings import PEER_KINDS
from sim.events import COLLECTIVE_KINDS, Event, EventKind
from sim.hardware.topology import Link, Topology, transfer_time_s

NCCL_KINDS = frozenset({EventKind.TRANSFER, *COLLECTIVE_KINDS})
"""Event kinds NCCL carries (torch.distributed send/recv and collectives on the NCCL backend):
they move at NCCL's rate of each link; every other transfer is a raw copy."""


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

    __slots__ = ("env", "user", "waiting")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.user: simpy.Event | None = None
        self.waiting: deque[simpy.Event] = deque()

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
        done.callbacks.append(self._grant)
        return done.succeed()

    def _grant(self, _: object = None) -> None:
        if self.user is None and self.waiting:
            self.user = self.waiting.popleft()
            self.user.succeed()


class Links:
    """The link resources of one run, and the transfers that hold them.

    Args:
        env: the simulation environment.
        topology: the server.
        events: the log's event list; every transfer appends its :class:`Event` when it ends.
    """

    def __init__(self, env: simpy.Environment, topology: Topology, events: list[Event]):
        self.env = env
        self.topology = topology
        self.events = events
        self._res: dict[str, FifoLink] = {}
        self._paths: dict[tuple[str, str], tuple] = {}
        self._durations: dict[tuple[str, str, float, bool], float] = {}

    def resource(self, name: str) -> FifoLink:
        """The FIFO resource of link (or CPU) ``name``, created on first use."""
        res = self._res.get(name)
        if res is None:
            res = self._res[name] = FifoLink(self.env)
        return res

    def acquire(self, links: Iterable[Link]):
        """Process: request ``links`` in name order and wait for each; returns the grants
        (give them to :meth:`release`)."""
        reqs = []
        for name in sorted({lk.name for lk in links}):
            res = self.resource(name)
            req = res.request()
            yield req
            reqs.append((res, req))
        return reqs

    @staticmethod
    def release(reqs: list) -> None:
        """Release the grants :meth:`acquire` returned."""
        for res, req in reqs:
            res.release(req)

    def hold(self, links: Iterable[Link], duration_s: float):
        """Process: acquire ``links`` in name order, hold them ``duration_s``, release them;
        returns the time the hold started (when the last link was granted)."""
        reqs = yield from self.acquire(links)
        start = self.env.now
        yield self.env.timeout(duration_s)
        self.release(reqs)
        return start

    def _path(self, src: str, dst: str) -> tuple:
        """``(route, link names, resources in name order)`` of ``src -> dst``, cached."""
        key = (src, dst)
        path = self._paths.get(key)
        if path is None:
            route = self.topology.route(src, dst)
            names = tuple(lk.name for lk in route)
            path = self._paths[key] = (route, names, [self.resource(n) for n in sorted(set(names))])
        return path

    def duration_s(
        self, src: str, dst: str, route: tuple[Link, ...], nbytes: float, nccl: bool
    ) -> float:
        """Uncontended seconds of moving ``nbytes`` over ``route`` from ``src`` to ``dst``: an
        NCCL send between two GPUs that run NCCL by NCCL's model (:func:`sim.comm.nccl.
        p2p_time_s`: its protocol's latency, the path's NCCL rate); any other transfer by
        :func:`~sim.hardware.topology.transfer_time_s` (the links' latencies and rate)."""
        if nccl and _runs_nccl(self.topology, src) and _runs_nccl(self.topology, dst):
            kinds = {lk.kind for lk in route}
            hw = NET if "network" in kinds else NVLINK if kinds <= PEER_KINDS else PCI
            return p2p_time_s(hw, min(lk.rate_Bps(True) for lk in route), nbytes)
        return transfer_time_s(route, nbytes, nccl=nccl)

    def transfer(
        self, src: str, dst: str, nbytes: float, kind: str, name: str, stream: str, **tags
    ):
        """Process: move ``nbytes`` from node ``src`` to ``dst`` and log it as ``kind`` on
        ``stream`` of ``src``; returns its start time (now, and nothing logged, when
        ``src == dst`` or ``nbytes <= 0``). A kind of :data:`NCCL_KINDS` moves at NCCL's rate
        of the route's links, any other (a swap, a fetch) at their raw rate."""
        route, names, resources = self._path(src, dst)
        if not route or nbytes <= 0:
            return self.env.now
        key = (src, dst, nbytes, kind in NCCL_KINDS)
        dur = self._durations.get(key)
        if dur is None:  # the same sends recur every micro-batch: computed once each
            dur = self._durations[key] = self.duration_s(src, dst, route, nbytes, key[3])
        if len(resources) == 1:  # fast path: one link
            res = resources[0]
            req = res.request()
            yield req
            start = self.env.now
            yield self.env.timeout(dur)
            res.release(req)
        else:
            reqs = []
            for res in resources:
                req = res.request()
                yield req
                reqs.append((res, req))
            start = self.env.now
            yield self.env.timeout(dur)
            for res, req in reqs:
                res.release(req)
        self.events.append(
            Event(kind, src, stream, name, start, self.env.now, nbytes=nbytes, links=names, **tags)
        )
        return start


def _runs_nccl(topology: Topology, node: str) -> bool:
    """Whether ``node`` is a GPU with a compute capability (it runs NCCL)."""
    if not node.startswith("gpu") or not node[3:].isdigit():
        return False
    return topology.gpu(int(node[3:])).compute_capability is not None

"""How a collective runs over a communicator: one ring, or hierarchically across servers.

Within one server, NCCL runs its rings (channels) over the communicator's GPUs
(:func:`~sim.comm.rings.ring_set`: several rings over NVLink, each with the bandwidth it
reserved, the bytes split by bandwidth; else one ring routed through the communicator;
:func:`ring_set_time_s`). Across servers it is hierarchical (NCCL's
tree and ring algorithms both reduce inside a node over NVLink and cross nodes over the NICs:
NCCL user guide, "Environment Variables", ``NCCL_ALGO``; the NCCL 2.4 tree blog post; and the
rail-optimised DGX SuperPOD topology, where GPU ``i`` of every server talks over rail ``i``).
A communicator of ``N`` servers with ``L >= 2`` members each, ``B`` bytes:

* all-reduce: reduce-scatter inside each server (ring of ``L``, ``L-1`` steps of ``B/L``), then
  ``L`` all-reduces of ``B/L`` bytes across servers at once, member ``j`` of every server
  together (ring of ``N`` over rail ``j``: ``2(N-1)`` steps of ``B/(L N)``), then an all-gather
  inside each server (``L-1`` steps of ``B/L``);
* reduce-scatter: the first two phases (the second a reduce-scatter); all-gather: the last two
  in reverse (the first an all-gather).

So ``t = RS_local(B) + AR_rails(B/L) + AG_local(B)``, each phase the slowest of its concurrent
ring sets (servers, rails). With one member per server it is the ring over the servers; within
one server, or with unequal members per server, one ring set (the flat algorithm). A flat
collective holds every link of its rings for its whole duration, as a ring does. A hierarchical
one holds the links of its rails for its whole duration, and the links that only its
server-local rings cross (NVLink inside each server: :meth:`CollectivePlan.local_links`) for
the work they carry, the local phases' time (:meth:`CollectivePlan.local_s`): NCCL pipelines
the phases chunk by chunk, so those links carry the local phases' bytes spread over the whole
collective at the network's pace, a small share of their rate; holding them for the whole
duration would make every other transfer over them (a pipeline send, a context-parallel
exchange, a tensor-parallel collective) wait for the network. Held for their own work instead
(work conserving, as the FIFO links of :mod:`sim.engine.links` are), at the start.

That is the rings' time with the links' latency per step (:meth:`CollectivePlan.ring_time_s`).
What a collective takes (:meth:`CollectivePlan.time_s`) is, in order: the hardware's measured
table for a communicator of this size and server span (:mod:`sim.hardware.comm_tables`,
``sim calibrate``, the DGX A100 presets), within its measured sizes; else, when every member is a GPU that runs NCCL, NCCL's own cost model (:mod:`sim.comm.nccl`:
its latency and bandwidth per algorithm and protocol, the least-time choice), fed with the
rings' bus bandwidth (the bandwidth term above as nccl-tests' busbw), the servers spanned and
the intra-server path (NVLink or PCI); else the rings' time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sim.comm import nccl, nccl_ctas
from sim.comm.rings import PEER_KINDS, Ring, ring_set
from sim.events import EventKind
from sim.hardware.comm_tables import CollectiveTable, find_table
from sim.hardware.fabric import NETWORK
from sim.hardware.parts import Link
from sim.hardware.topology import Topology
from sim.hardware.transfer import ring_hop_bandwidths, transfer_time_s

RING_STEPS: dict[str, int] = {
    EventKind.ALLREDUCE: 2,
    EventKind.REDUCE_SCATTER: 1,
    EventKind.ALL_GATHER: 1,
}
"""Ring steps per ``w - 1`` of each collective (Patarasuk & Yuan; NCCL ring)."""

LOCAL_PHASES: dict[str, tuple[str, ...]] = {
    EventKind.ALLREDUCE: (EventKind.REDUCE_SCATTER, EventKind.ALL_GATHER),
    EventKind.REDUCE_SCATTER: (EventKind.REDUCE_SCATTER,),
    EventKind.ALL_GATHER: (EventKind.ALL_GATHER,),
}
"""The server-local phases of each hierarchical collective (module doc)."""

Routes = list[tuple[Link, ...]]
Rings = tuple[Ring, ...]


def ring_time_s(routes: Routes, nbytes: float, kind: str) -> float:
    """Uncontended seconds of a ring collective of ``nbytes`` over ``len(routes)`` members.

    Args:
        routes: the ring's hops, ``routes[i]`` from member ``i`` to member ``i + 1 (mod w)``.
        nbytes: bytes of the buffer every member holds (the gradients), ``B``.
        kind: ``allreduce`` (``2(w-1)`` steps), ``reduce_scatter`` or ``all_gather``
            (``w-1`` steps).

    Returns:
        ``steps * max_i transfer_time_s(routes[i], B / w, bandwidth_i)``, ``bandwidth_i`` from
        :func:`~sim.hardware.transfer.ring_hop_bandwidths` (hop ``i``'s bottleneck, shared
        with the other hops that cross it); 0 for one member.
    """
    w = len(routes)
    if w < 2:
        return 0.0
    bws = ring_hop_bandwidths(routes)
    step_s = max(
        transfer_time_s(route, nbytes / w, bw) for route, bw in zip(routes, bws, strict=True)
    )
    return RING_STEPS[kind] * (w - 1) * step_s


def ring_set_time_s(rings: Rings, nbytes: float, kind: str, *, latency: bool = True) -> float:
    """Uncontended seconds of a ring collective of ``nbytes`` over ``rings`` run at once.

    Args:
        rings: the rings (:func:`~sim.comm.rings.ring_set`), all over the same ``w``
            members; ring ``r`` carries ``nbytes * bw_r / sum(bw)`` (its bandwidth's share;
            all of it when there is one ring).
        nbytes: bytes of the buffer every member holds (the gradients), ``B``.
        kind: ``allreduce`` (``2(w-1)`` steps), ``reduce_scatter`` or ``all_gather``
            (``w-1`` steps).
        latency: add the links' latencies to every step (False: the bandwidth term alone).

    Returns:
        ``steps * max_r max_i transfer_time_s(route_ri, b_r / w, bw_ri)``: the slowest ring's
        time, each of its steps its slowest hop's (latencies plus its chunk at the hop's rate,
        :attr:`~sim.comm.rings.Ring.hop_bandwidths_Bps`); 0 for one member. One ring is
        :func:`ring_time_s`.
    """
    w = len(rings[0].order)
    if w < 2:
        return 0.0
    total_Bps = sum(r.bandwidth_Bps for r in rings)
    step_s = max(
        _step_s(
            route,
            (nbytes if len(rings) == 1 else nbytes * r.bandwidth_Bps / total_Bps) / w,
            bw,
            latency,
        )
        for r in rings
        for route, bw in zip(r.routes, r.hop_bandwidths_Bps, strict=True)
    )
    return RING_STEPS[kind] * (w - 1) * step_s


def _step_s(route: tuple[Link, ...], nbytes: float, bandwidth_Bps: float, latency: bool) -> float:
    if latency:
        return transfer_time_s(route, nbytes, bandwidth_Bps)
    return nbytes / bandwidth_Bps


def ring_routes(topology: Topology, gpus: tuple[str, ...]) -> Routes:
    """The hops of the ring NCCL would use over ``gpus`` (:meth:`Topology.ring`), each routed
    through the communicator only."""
    comm = frozenset(gpus)
    order = topology.ring(gpus)
    return [
        topology.route(a, b, within=comm) for a, b in zip(order, order[1:] + order[:1], strict=True)
    ]


@dataclass(frozen=True)
class CollectivePlan:
    """The rings a collective over one communicator runs, and how its time is predicted.

    Attributes:
        flat: the ring set over all members (:func:`~sim.comm.rings.ring_set`; empty when
            hierarchical).
        local: one ring set per server (hierarchical only).
        rails: one ring set per member index across the servers (hierarchical only).
        links: every link held, in name order of first use.
        names: the held links' names, sorted.
        ranks: members of the communicator.
        servers: servers they span.
        nccl_info: what NCCL's tuning sees besides the bandwidth (``(compute capability, intra,
            nvls)``), or None when the members do not run NCCL (:meth:`time_s`).
        tables: measured collective times of this communicator's size and server span
            (:mod:`sim.hardware.comm_tables`).
        nic_Bps: across servers, the least NCCL rate of the network links its rings cross
            (bytes/s; 0 on one server or without network links).
        cta_info: ``nccl_info`` for counting the thread blocks NCCL launches (:meth:`ctas`),
            also where a preset leaves the compute capability unset to time collectives by
            their links (the GPU's model's, :func:`sim.comm.nccl_ctas.capability`).
        members: the communicator's GPUs, in rank order (with a group kind, the key of its
            communicator: :mod:`sim.engine.links`).
    """

    flat: Rings
    local: tuple[Rings, ...] = ()
    rails: tuple[Rings, ...] = ()
    links: tuple[Link, ...] = ()
    names: tuple[str, ...] = ()
    ranks: int = 1
    servers: int = 1
    nccl_info: tuple[float, str, bool] | None = None
    tables: tuple[CollectiveTable, ...] = ()
    nic_Bps: float = 0.0
    cta_info: tuple[float, str, bool] | None = None
    members: tuple[str, ...] = ()
    _times: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    @property
    def hierarchical(self) -> bool:
        return bool(self.rails)

    def local_links(self) -> tuple[Link, ...]:
        """The held links that only the server-local rings cross (module doc): () when flat."""
        if not self.hierarchical:
            return ()
        cached = self._times.get("local_links")
        if cached is None:
            rail = {lk.name for rings in self.rails for r in rings for rt in r.routes for lk in rt}
            cached = self._times["local_links"] = tuple(
                lk for lk in self.links if lk.name not in rail
            )
        return cached

    def local_s(self, nbytes: float, kind: str) -> float:
        """Seconds the server-local rings of a hierarchical ``kind`` of ``nbytes`` are busy
        (module doc): the local reduce-scatter (all-reduce, reduce-scatter) and the local
        all-gather (all-reduce, all-gather), each the slowest server's ring set with the
        links' latencies; 0 when flat."""
        if not self.hierarchical:
            return 0.0
        key = ("local", nbytes, kind)
        cached = self._times.get(key)
        if cached is not None:
            return cached
        phases = LOCAL_PHASES[kind]
        cached = self._times[key] = sum(
            max(ring_set_time_s(r, nbytes, k) for r in self.local) for k in phases
        )
        return cached

    def ring_time_s(self, nbytes: float, kind: str, *, latency: bool = True) -> float:
        """Seconds of the ring algorithm over the plan's rings (module doc), with the links'
        latencies per step or (``latency=False``) the bandwidth term alone."""
        if not self.hierarchical:
            return ring_set_time_s(self.flat, nbytes, kind, latency=latency)
        per = nbytes / len(self.local[0][0].order)

        def local(k: str) -> float:
            return max(ring_set_time_s(r, nbytes, k, latency=latency) for r in self.local)

        def rails(k: str) -> float:
            return max(ring_set_time_s(r, per, k, latency=latency) for r in self.rails)

        if kind == EventKind.ALLREDUCE:
            return local(EventKind.REDUCE_SCATTER) + rails(kind) + local(EventKind.ALL_GATHER)
        if kind == EventKind.REDUCE_SCATTER:
            return local(kind) + rails(kind)
        return rails(kind) + local(kind)

    def communicator(self, kind: str) -> nccl.Communicator | None:
        """NCCL's view of this communicator for ``kind``, or None when it does not run NCCL.

        On one server its bus bandwidth is the rings' bandwidth term as nccl-tests' busbw.
        Across servers with ``L`` members on each it is NCCL's graph across servers
        (:func:`~sim.comm.nccl.inter_graph`: one channel per member's NIC, at the speed of
        the NIC links' NCCL rate), ``channels x speed``, but at most what the members' NVLink
        rings carry while every channel crosses each server: ``local x L / (L - 1)`` (a
        member forwards over NVLink in ``L - 1`` of the ``L`` channels and to its NIC in one;
        derived).
        """
        if self.nccl_info is None or self.ranks < 2:
            return None
        cc, intra, nvls = self.nccl_info
        widest = max((r.bandwidth_Bps for r in self.flat), default=None)
        if self.servers > 1 and self.nic_Bps > 0:
            per = self.ranks // self.servers
            local = self.local_bus_Bps()
            nch, speed = nccl.inter_graph(per, self.nic_Bps, cc)
            bus = nch * speed * 1e9
            if per > 1 and local is not None:
                bus = min(bus, local * per / (per - 1))
            return nccl.Communicator(
                self.ranks, self.servers, bus, intra, cc, nvls, widest, per, self.nic_Bps, local
            )
        probe = 1e9
        bus = probe * RING_STEPS[kind] * (self.ranks - 1) / self.ranks
        bus /= self.ring_time_s(probe, kind, latency=False)
        return nccl.Communicator(self.ranks, self.servers, bus, intra, cc, nvls, widest)

    def local_bus_Bps(self) -> float | None:
        """The all-reduce bus bandwidth of one server's members among themselves (the
        slowest server's ring set), bytes/s; None with one member per server."""
        if not self.local or len(self.local[0][0].order) < 2:
            return None
        w = len(self.local[0][0].order)
        probe = 1e9
        t = max(ring_set_time_s(r, probe, EventKind.ALLREDUCE, latency=False) for r in self.local)
        return probe * 2 * (w - 1) / w / t

    def choice(self, nbytes: float, kind: str) -> nccl.Choice | None:
        """The algorithm and protocol NCCL runs for ``nbytes`` (:func:`sim.comm.nccl.choose`),
        or None without NCCL or with a measured table."""
        if find_table(self.tables, kind, self.ranks, self.servers) is not None:
            return None
        return self._model_choice(nbytes, kind)

    def ctas(self, nbytes: float, kind: str) -> int:
        """Thread blocks (SMs) a ``kind`` collective of ``nbytes`` launches on each member
        (:func:`sim.comm.nccl_ctas.ctas` of the algorithm NCCL's model picks, even where a
        measured table or the links time it: :attr:`cta_info`); 0 without NCCL (gloo on CPU
        ranks)."""
        view = self if self.nccl_info is not None else replace(self, nccl_info=self.cta_info)
        comm = view.communicator(kind)
        if comm is None or self.ranks < 2:
            return 0
        return nccl_ctas.ctas(comm, nccl.choose(comm, kind, nbytes).algorithm)

    def _model_choice(self, nbytes: float, kind: str) -> nccl.Choice | None:
        comm = self.communicator(kind)
        return None if comm is None else nccl.choose(comm, kind, nbytes)

    def time_s(self, nbytes: float, kind: str) -> float:
        """Uncontended seconds of a ``kind`` collective of ``nbytes``: the measured table of
        this size and server span when the hardware has one and ``nbytes`` is within its
        range; else NCCL's model (:mod:`sim.comm.nccl`) when the members run NCCL, with the
        rings' bus bandwidth; else the ring algorithm with the links' latencies
        (:meth:`ring_time_s`); below a table's smallest size the model, never above the
        table's smallest time (no measurement there; the table's floor is an upper bound).
        0 for one member."""
        key = (nbytes, kind)
        cached = self._times.get(key)
        if cached is None:
            cached = self._times[key] = self._time_s(nbytes, kind)
        return cached

    def _time_s(self, nbytes: float, kind: str) -> float:
        if self.ranks < 2:
            return 0.0
        table = find_table(self.tables, kind, self.ranks, self.servers)
        if table is not None and nbytes >= table.sizes_bytes[0]:
            return table.time_s(nbytes)
        choice = self._model_choice(nbytes, kind)
        model = self.ring_time_s(nbytes, kind) if choice is None else choice.time_s
        return model if table is None else min(model, table.time_s(nbytes))


def nccl_view(
    topology: Topology, gpus: tuple[str, ...], routes: Routes, by_model: bool = False
) -> tuple | None:
    """``(compute capability, intra path, nvls)`` of a communicator for NCCL's model, or None
    when one of ``gpus`` does not run NCCL: the least compute capability (NCCL's
    ``minCompCap``), ``nvlink`` when every link of the server-local ``routes`` is NVLink or
    NVSwitch (else ``pci``), NVLS when every GPU has it. ``by_model``: a GPU without one takes
    its model's (:func:`sim.comm.nccl_ctas.capability`; for counting CTAs only)."""
    devices = [topology.gpu(int(g[3:])) for g in gpus]
    ccs = [
        d.compute_capability
        if d.compute_capability is not None or not by_model
        else nccl_ctas.capability(d.model)
        for d in devices
    ]
    if any(cc is None for cc in ccs):
        return None
    kinds = {lk.kind for route in routes for lk in route}
    intra = nccl.NVLINK if kinds <= PEER_KINDS else nccl.PCI
    return (min(cc for cc in ccs if cc is not None), intra, all(d.nvls for d in devices))


def collective_plan(topology: Topology, gpus: tuple[str, ...]) -> CollectivePlan:
    """The plan of a collective over ``gpus`` (module doc: hierarchical when they span several
    servers with the same number ``L >= 2`` on each, else one ring)."""
    by_server: dict[int, list[str]] = {}
    for g in gpus:
        by_server.setdefault(topology.server_of(int(g[3:])), []).append(g)
    sizes = {len(v) for v in by_server.values()}
    n, servers = len(gpus), len(by_server)
    tables = tuple(t for t in topology.collectives if (t.ranks, t.servers) == (n, servers))
    if servers < 2 or len(sizes) != 1 or sizes == {1}:
        flat = ring_set(topology, gpus)
        every = [route for ring in flat for route in ring.routes]
        local_routes = every if servers == 1 else []
        view = nccl_view(topology, gpus, local_routes)
        nic = _nic_Bps(every) if sizes == {1} else 0.0
        return CollectivePlan(
            flat, links=_links(every), names=_names(every), ranks=n, servers=servers,
            nccl_info=view, tables=tables, nic_Bps=nic,
            cta_info=nccl_view(topology, gpus, local_routes, by_model=True), members=gpus,
        )  # fmt: skip
    members = [tuple(by_server[k]) for k in sorted(by_server)]
    local = tuple(ring_set(topology, m) for m in members)
    rails = tuple(ring_set(topology, tuple(m[j] for m in members)) for j in range(len(members[0])))
    every = [route for rings in local + rails for ring in rings for route in ring.routes]
    local_routes = [rt for rings in local for r in rings for rt in r.routes]
    view = nccl_view(topology, gpus, local_routes)
    nic = _nic_Bps([rt for rings in rails for r in rings for rt in r.routes])
    ctas = nccl_view(topology, gpus, local_routes, by_model=True)
    return CollectivePlan(
        (), local, rails, _links(every), _names(every), n, servers, view, tables, nic, ctas, gpus
    )


def _nic_Bps(routes: Routes) -> float:
    """The least NCCL rate of the network links of ``routes`` (0 when they cross none)."""
    rates = [lk.rate_Bps(True) for route in routes for lk in route if lk.kind == NETWORK]
    return min(rates, default=0.0)


def _links(routes: Routes) -> tuple[Link, ...]:
    """Each link of ``routes`` once (one hold per link, however many rings cross it), in
    order of first use."""
    return tuple({lk.name: lk for route in routes for lk in route}.values())


def _names(routes: Routes) -> tuple[str, ...]:
    return tuple(sorted({lk.name for route in routes for lk in route}))

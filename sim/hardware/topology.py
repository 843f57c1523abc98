"""The hardware model: GPUs, hosts, switches and the directed links between them.

A :class:`Topology` is a directed graph whose nodes are GPUs (``gpu0`` ...), host CPU sockets
(``cpu0`` ...) and switches (``sw0`` ..., ``nvswitch``), and whose edges are :class:`Link` s
with a per-direction bandwidth and a latency. Every link is a shared resource in the engine:
two transfers crossing one link take longer than one. A PCIe switch uplink shared by two GPUs
(DGX-1, hardware.md §3.1) is modelled as one ``swK -> cpuS`` link that both GPUs' host traffic
crosses.

Routes: :meth:`Topology.route` returns the path with the fewest hops, the widest bottleneck among
those, ties broken by node name, so it is deterministic. Traffic uses only its communicator's
GPUs (the issue's "communication as NCCL does it"): a p2p send or a copy involves its two ends
only, so no other GPU relays it; a collective's hop may relay through another GPU of the same
communicator (``route(..., within=...)``). Where a pair has no peer path (no NVLink, e.g. across
the CPU sockets of a DGX-1), the route goes through host memory: PCIe switch, socket, QPI, at
that path's bandwidth (NCCL's SHM transport).

Routes are found with one breadth-first search per source (and relay set), cached, so loading a
topology of ``n`` GPUs costs ``O(n * links)``, not a search per pair
(:mod:`sim.hardware.routing`). Its parts (:class:`GPU`, :class:`Host`, :class:`Link`) are in
:mod:`sim.hardware.parts`; the cost of a transfer over a route in :mod:`sim.hardware.transfer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from sim.hardware.comm_tables import CollectiveTable
from sim.hardware.fabric import RailFatTree
from sim.hardware.parts import GPU, Host, Link
from sim.hardware.ring_order import best_ring
from sim.hardware.routing import widest_tree
from sim.hardware.transfer import transfer_time_s

BOUNDED_ABOVE_NODES = 512
"""Topologies with this many nodes (GPUs, hosts, switches) or more route each pair with a
search that stops at its destination's level (:meth:`Topology._tree`); smaller
ones keep one whole search per source. Both give the same routes; the bound only trades memory
and time (a DGX-1 has 14 nodes, 8 DGX H100 servers about 130)."""


@dataclass(frozen=True)
class Topology:
    """A server: GPUs, hosts, switches and directed links.

    Attributes:
        name: preset or user name.
        gpus: the GPUs, index ``i`` is node ``gpu<i>``.
        hosts: CPU sockets.
        links: directed links (each physical connection appears once per direction).
        switches: names of switch nodes (PCIe switches, NVSwitch).
        description: free text, including sources.
        collectives: measured collective times of this machine's library
            (:mod:`sim.hardware.comm_tables`; ``sim calibrate``), used instead of a model by
            communicators of the measured size.
        fabric: the network joining identical servers (:mod:`sim.hardware.fabric`), or None
            for one server or a hand-written description. With a fabric, GPU ``g`` is in
            server ``g // fabric.gpus_per_server``, traffic between servers follows
            :meth:`RailFatTree.route_names` and searches inside a server never leave it.
        server: the one server the cluster is made of (its own topology), with ``fabric``.
        notes: what the description asked for and did not get, one sentence each (a GPU
            ``memory`` replaced by the CUDA total: :func:`sim.hardware.build.memory_note`);
            printed by ``sim hardware show`` and ``sim run``.

    Raises:
        ValueError: a link names an unknown node, or two links share a name.
    """

    name: str
    gpus: tuple[GPU, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    switches: tuple[str, ...] = ()
    description: str = ""
    collectives: tuple[CollectiveTable, ...] = ()
    fabric: RailFatTree | None = None
    server: Topology | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)
    _route_cache: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        nodes = self.nodes
        seen = set()
        for link in self.links:
            if link.src not in nodes or link.dst not in nodes:
                raise ValueError(f"link {link.name} joins unknown node(s) {link.src}, {link.dst}")
            if link.name in seen:
                raise ValueError(f"two links are named {link.name}")
            seen.add(link.name)
        hosts = {h.name for h in self.hosts}
        for gpu in self.gpus:
            if gpu.host not in hosts:
                raise ValueError(f"{gpu.name} names unknown host {gpu.host}")

    def __hash__(self) -> int:
        """A cheap hash consistent with equality (a cluster has ~10^5 links; hashing them all
        at every cached lookup would dominate)."""
        return hash((self.name, len(self.gpus), len(self.links), self.links[:16]))

    @cached_property
    def link_by_name(self) -> dict[str, Link]:
        """Every link by its name."""
        return {lk.name: lk for lk in self.links}

    @cached_property
    def nodes(self) -> frozenset[str]:
        """Every node name."""
        return frozenset(
            [g.name for g in self.gpus] + [h.name for h in self.hosts] + list(self.switches)
        )

    @cached_property
    def _out(self) -> dict[str, list[Link]]:
        out: dict[str, list[Link]] = {n: [] for n in self.nodes}
        for link in self.links:
            out[link.src].append(link)
        for n in out:
            out[n].sort(key=lambda lk: lk.dst)
        return out

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> GPU:
        """GPU ``index`` (node ``gpu<index>``)."""
        return self.gpus[index]

    def host(self, name: str) -> Host:
        """The host socket called ``name``.

        Raises:
            KeyError: unknown host.
        """
        return self._hosts[name]

    @cached_property
    def _hosts(self) -> dict[str, Host]:
        return {h.name: h for h in self.hosts}

    @cached_property
    def host_dram_bytes(self) -> float:
        """Total host DRAM over all sockets, in bytes."""
        return sum(h.dram_bytes for h in self.hosts)

    def route(self, src: str, dst: str, within: frozenset[str] | None = None) -> tuple[Link, ...]:
        """Directed links from node ``src`` to node ``dst`` (empty when ``src == dst``).

        Fewest hops, then widest, then lexicographic by node names (see module doc).

        Args:
            src: start node.
            dst: end node.
            within: the GPU names of the communicator the traffic belongs to: GPUs of it
                other than ``src`` and ``dst`` may relay GPU-to-GPU traffic (switches and
                hosts always may). None: the pair alone (a p2p send, a copy): no GPU relays,
                so a pair without a peer path goes through host memory.

        Raises:
            ValueError: no path exists.
        """
        key = (src, dst, within)
        path = self._route_cache.get(key)
        if path is not None:
            return path
        if src == dst:
            path = ()
        elif self._across(src, dst):
            assert self.fabric is not None
            g = self.fabric.gpus_per_server
            if int(src[3:]) // g == int(dst[3:]) // g:
                path = self._search(src, dst, within)
            else:
                by_name = self.link_by_name
                names = self.fabric.route_names(int(src[3:]), int(dst[3:]))
                path = tuple(by_name[n] for n in names)
        else:
            path = self._search(src, dst, within)
        self._route_cache[key] = path
        return path

    def _across(self, src: str, dst: str) -> bool:
        """Whether ``src`` and ``dst`` are both GPUs and the topology has a fabric."""
        gpus = self._gpu_names
        return self.fabric is not None and src in gpus and dst in gpus

    def _search(self, src: str, dst: str, within: frozenset[str] | None) -> tuple[Link, ...]:
        """The route by breadth-first search (:meth:`route`'s rules)."""
        gpus = self._gpu_names
        relay = (
            frozenset()
            if within is None or src not in gpus or dst not in gpus
            else ((gpus & within) - {src, dst})
        )
        prev = self._tree(src, relay, dst)
        if dst not in prev:
            raise ValueError(
                f"no route from {src} to {dst} in topology {self.name}"
                + ("" if not relay else f" relaying only through {sorted(relay)}")
            )
        hops = []
        node = dst
        while node != src:
            link = prev[node]
            hops.append(link)
            node = link.src
        return tuple(reversed(hops))

    def ring(self, gpus: tuple[str, ...]) -> tuple[str, ...]:
        """The order in which a single ring over ``gpus`` visits them, NCCL-like
        (:func:`~sim.hardware.ring_order.best_ring`, each hop routed within the communicator
        by :meth:`route`); cached."""
        key = ("ring", gpus)
        cached = self._route_cache.get(key)
        if cached is not None:
            return cached
        order = best_ring(gpus, self.route)
        self._route_cache[key] = order
        return order

    @cached_property
    def servers(self) -> tuple[tuple[int, ...], ...]:
        """GPU indices of each server: the GPUs connected without ``network`` links (through
        NVLink, NVSwitch, PCIe, hosts), in order of their first GPU. One server unless the
        description has several (:mod:`sim.hardware.cluster`)."""
        if self.fabric is not None:
            g = self.fabric.gpus_per_server
            return tuple(tuple(range(n * g, (n + 1) * g)) for n in range(self.fabric.servers))
        parent = {n: n for n in self.nodes}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for link in self.links:
            if link.kind != "network":
                parent[find(link.src)] = find(link.dst)
        groups: dict[str, list[int]] = {}
        for i, gpu in enumerate(self.gpus):
            groups.setdefault(find(gpu.name), []).append(i)
        return tuple(sorted(tuple(g) for g in groups.values()))

    def server_of(self, gpu: int) -> int:
        """Index into :attr:`servers` of the server holding GPU ``gpu``."""
        if self.fabric is not None:
            return gpu // self.fabric.gpus_per_server
        return self._server_index[gpu]

    @cached_property
    def _server_index(self) -> dict[int, int]:
        return {g: k for k, members in enumerate(self.servers) for g in members}

    @cached_property
    def _gpu_names(self) -> frozenset[str]:
        return frozenset(g.name for g in self.gpus)

    def _tree(self, src: str, relay: frozenset[str], dst: str | None = None) -> dict[str, Link]:
        """One search from ``src`` (:func:`~sim.hardware.routing.widest_tree`): the last link of
        the route to every reachable node, kept; on a cluster (:data:`BOUNDED_ABOVE_NODES`
        nodes or more) a search for ``dst`` that stops at its level, not kept."""
        key = (src, relay)
        cached = self._route_cache.get(key)
        if cached is not None:
            return cached
        bounded = dst is not None and len(self.nodes) >= BOUNDED_ABOVE_NODES
        prev = widest_tree(
            self._out,
            self._gpu_names,
            src,
            relay,
            skip_network=self.fabric is not None,
            stop_at=dst if bounded else None,
            into_stop=self._in.get(str(dst), ()) if bounded else (),
        )
        if not bounded:
            self._route_cache[key] = prev
        return prev

    @cached_property
    def _in(self) -> dict[str, list[Link]]:
        out: dict[str, list[Link]] = {}
        for link in self.links:
            out.setdefault(link.dst, []).append(link)
        return out

    def route_bandwidth_Bps(self, src: str, dst: str, *, nccl: bool = False) -> float:
        """Bottleneck bandwidth of :meth:`route` in bytes/s (``inf`` when ``src == dst``); of
        NCCL's rates (:meth:`Link.rate_Bps`) when ``nccl`` (a pipeline send), else of raw
        copies."""
        path = self.route(src, dst)
        return min((lk.rate_Bps(nccl) for lk in path), default=float("inf"))

    def route_latency_s(self, src: str, dst: str) -> float:
        """Sum of link latencies along :meth:`route`, in seconds."""
        return sum(lk.latency_s for lk in self.route(src, dst))

    def transfer_time_s(self, src: str, dst: str, nbytes: float, *, nccl: bool = False) -> float:
        """Uncontended seconds to move ``nbytes`` from ``src`` to ``dst``: the
        :func:`transfer_time_s` of :meth:`route` (0 when ``src == dst`` or nothing moves); at
        NCCL's rates when ``nccl``."""
        if src == dst or nbytes <= 0:
            return 0.0
        return transfer_time_s(self.route(src, dst), nbytes, nccl=nccl)

    def direct_link(self, src: str, dst: str) -> Link | None:
        """The single link from ``src`` to ``dst`` if one exists."""
        for link in self._out.get(src, ()):
            if link.dst == dst:
                return link
        return None

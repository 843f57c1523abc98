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
topology of ``n`` GPUs costs ``O(n * links)``, not a search per pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import permutations

from sim.hardware.capacity import NO_RESERVE, RuntimeReserve
from sim.hardware.comm_tables import CollectiveTable
from sim.hardware.fabric import NETWORK, RailFatTree
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.host_ops import NO_HOST, HostOverhead


def transfer_time_s(
    route: tuple[Link, ...],
    nbytes: float,
    bandwidth_Bps: float | None = None,
    *,
    nccl: bool = False,
) -> float:
    """Seconds to move ``nbytes`` over ``route``: the sum of its link latencies plus ``nbytes``
    over its bottleneck bandwidth (cut-through: every link streams at once, the slowest sets
    the rate; hardware.md §6). The one transfer-time formula: the engine's sends, swaps and
    collective steps and the planners' estimates all use it.

    Args:
        route: the links, in order.
        nbytes: bytes moved.
        bandwidth_Bps: the rate when it is not the route's own bottleneck (a ring hop whose
            bottleneck link is shared with other hops, :func:`ring_hop_bandwidths`).
        nccl: the transfer is NCCL's (a p2p send/receive or a collective step): each link
            carries it at :meth:`Link.rate_Bps` ``(nccl=True)``, NCCL's achieved rate, not the
            raw copy rate.

    Raises:
        ValueError: ``route`` is empty.
    """
    if not route:
        raise ValueError("a transfer needs a route of at least one link")
    if bandwidth_Bps is None:
        bandwidth_Bps = min(lk.rate_Bps(nccl) for lk in route)
    return sum(lk.latency_s for lk in route) + nbytes / bandwidth_Bps


def ring_hop_bandwidths(routes: list[tuple[Link, ...]]) -> list[float]:
    """Bandwidth of each hop of a ring whose hops all send at once, in bytes/s.

    A ring is an NCCL collective, so a link carries it at NCCL's rate (:meth:`Link.rate_Bps`
    with ``nccl=True``). A hop gets its bottleneck link's rate divided by the number of the
    ring's hops that cross that link (a link relaying two hops' traffic is shared; links are
    per direction, so the two directions of a pair do not share).
    """
    uses: dict[str, int] = {}
    for route in routes:
        for lk in route:
            uses[lk.name] = uses.get(lk.name, 0) + 1
    return [
        min(lk.rate_Bps(True) / uses[lk.name] for lk in route) if route else float("inf")
        for route in routes
    ]


@dataclass(frozen=True)
class GPU:
    """One GPU.

    Attributes:
        name: node name, ``gpu<i>``.
        model: product name, e.g. ``V100-SXM2-16GB``.
        memory_bytes: usable capacity in bytes: the total CUDA reports (below the datasheet
            figure; :mod:`sim.hardware.capacity`).
        peak_flops: dense fp16/bf16 tensor peak in FLOP/s (hardware.md §1).
        hbm_bandwidth_Bps: HBM bandwidth in bytes/s.
        host: name of the CPU socket whose DRAM is this GPU's host memory.
        compute: the compute model's view of the GPU (:mod:`sim.hardware.gpu_compute`), or None.
        reserve: what a training process holds besides tensors (context, cuBLAS, NCCL,
            allocator margin, working memory; :mod:`sim.hardware.capacity`). Hardware files get
            the sourced defaults; a GPU built in code counts tensors only unless given one.
        compute_capability: CUDA compute capability (7.0, 8.0, 9.0 ...): the GPU runs NCCL,
            whose collectives and sends are timed by NCCL's own model
            (:mod:`sim.comm.nccl`); None (CPU ranks, GPUs built in code): the links' latency
            and rate alone.
        nvls: NVLink SHARP (NVSwitch multicast) is available to NCCL on this GPU's server.
        tp_module_overhead_s: ``(forward, backward)`` seconds one tensor-parallel module adds
            beyond its compute and collectives (torch DTensor's dispatch, measured by ``sim
            calibrate``; 0 for Megatron's plain-tensor parallelism; :mod:`sim.parallel.shard`).
        action_overhead_s: ``(forward, backward)`` seconds the pipeline runtime adds to each
            F and each B or I on this GPU's compute stream beyond the layers and the link
            transfers (measured on CPU ranks by ``sim calibrate``; 0 elsewhere;
            :mod:`sim.engine.pipeline`).
        step_costs: measured optimizer updates, ``(optimizer, seconds per parameter tensor,
            parameter bytes per second)`` each (:meth:`step_cost`); empty: the memory-bound
            estimate of :mod:`sim.memory.states`.
    """

    name: str
    model: str
    memory_bytes: float
    peak_flops: float
    hbm_bandwidth_Bps: float
    host: str
    compute: ComputeSpec | None = None
    reserve: RuntimeReserve = NO_RESERVE
    compute_capability: float | None = None
    nvls: bool = False
    tp_module_overhead_s: tuple[float, float] = (0.0, 0.0)
    action_overhead_s: tuple[float, float] = (0.0, 0.0)
    step_costs: tuple[tuple[str, float, float], ...] = ()

    @property
    def memory_bound_Bps(self) -> float:
        """Achieved bytes/s of a memory-bound kernel on this GPU: the compute model's
        :meth:`~sim.hardware.gpu_compute.ComputeSpec.hbm_rate_Bps` (peak x ``hbm_efficiency``),
        as the kernel model times norms and element-wise kernels; the peak without one."""
        return self.compute.hbm_rate_Bps() if self.compute is not None else self.hbm_bandwidth_Bps

    def step_cost(self, optimizer: str) -> tuple[float, float] | None:
        """``(seconds per parameter tensor, parameter bytes per second)`` of ``optimizer``'s
        measured update on this GPU, or None when it was not measured.

        Example:
            >>> g = GPU("gpu0", "cpu-rank", 1e9, 1e11, 1e10, "cpu0", step_costs=(("sgd", 5e-6, 4e9),))
            >>> g.step_cost("sgd"), g.step_cost("adam")
            ((5e-06, 4000000000.0), None)
        """
        for name, per_tensor_s, bandwidth_Bps in self.step_costs:
            if name == optimizer:
                return per_tensor_s, bandwidth_Bps
        return None


@dataclass(frozen=True)
class Host:
    """One CPU socket with its DRAM.

    Attributes:
        name: node name, ``cpu<i>``.
        dram_bytes: DRAM of this socket that processes can use (``MemTotal``'s share), in
            bytes (:func:`sim.hardware.host_memory.os_usable_bytes` of the installed DRAM).
        adam_params_per_s: CPU Adam throughput in parameters per second (for offloaded
            optimizer steps); default: a DGX-2 socket's (``HostSpec.adam_params_per_s``).
        overhead: what issuing an op costs a training process on this socket
            (:mod:`sim.hardware.host_ops`); :data:`~sim.hardware.host_ops.NO_HOST` when not modelled.
    """

    name: str
    dram_bytes: float
    adam_params_per_s: float = 1.84e9
    overhead: HostOverhead = NO_HOST


@dataclass(frozen=True)
class Link:
    """One direction of a physical connection.

    Attributes:
        name: unique name, ``"<src>-><dst>"``.
        src: source node name.
        dst: destination node name.
        bandwidth_Bps: bytes per second in this direction (effective, not peak, unless the
            preset says otherwise): the rate of raw copies (``cudaMemcpy``, copy engines:
            swaps, chunk moves, host offload).
        latency_s: fixed cost per transfer in seconds.
        kind: ``nvlink``, ``nvswitch``, ``pcie``, ``qpi``, ``loopback`` ...
        nccl_bandwidth_Bps: bytes per second NCCL's kernels achieve over this link (p2p
            send/receive and collectives), or None for ``bandwidth_Bps``. NCCL moves data with
            SM copies of 128-byte payloads, copy engines with 256-byte ones, so NCCL gets less
            of an NVLink than a raw copy (~20 of 25 GB/s per NVLink; NCCL ``src/graph/topo.h``,
            NVIDIA/nccl-tests#149): see :mod:`sim.hardware.spec`.
    """

    name: str
    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float
    kind: str = "link"
    nccl_bandwidth_Bps: float | None = None

    def rate_Bps(self, nccl: bool = False) -> float:
        """Bytes/s this link carries a transfer at: NCCL's rate (``nccl_bandwidth_Bps`` when
        known) for NCCL traffic, ``bandwidth_Bps`` for raw copies and where NCCL's is unknown."""
        if nccl and self.nccl_bandwidth_Bps is not None:
            return self.nccl_bandwidth_Bps
        return self.bandwidth_Bps


BOUNDED_ABOVE_NODES = 512
"""Topologies with this many nodes (GPUs, hosts, switches) or more route each pair with a
search that stops at its destination's level (:meth:`Topology._tree`); smaller ones keep one
whole search per source. Both give the same routes; the bound only trades memory and time
(a DGX-1 has 14 nodes, 8 DGX H100 servers about 130)."""


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
        """The order in which a single ring over ``gpus`` visits them, NCCL-like: the ring a
        collective runs on where the communicator has no NVLink rings
        (:func:`sim.comm.rings.ring_set` builds NCCL's several rings where it has).

        NCCL searches its rings over the communicator's GPUs for the fastest one (NCCL's
        topology search, ``graph/search.cc``). Here: of the rings starting at ``gpus[0]`` (each
        hop routed within the communicator, :meth:`route`), the one with the widest slowest hop,
        then the widest hops in total, then the first in permutation order. Exhaustive up to 8
        GPUs (5040 rings); beyond that the given order. A hop's bandwidth is that of
        :func:`ring_hop_bandwidths` (a link two hops relay over is shared by both); ties go to
        the ring with fewer links, then to the widest in total.
        """
        key = ("ring", gpus)
        cached = self._route_cache.get(key)
        if cached is not None:
            return cached
        comm = frozenset(gpus)
        best, order = None, tuple(gpus)
        if 2 < len(gpus) <= 8:
            bound = self._ring_bound(gpus, comm)
            for rest in permutations(gpus[1:]):
                cand = (gpus[0], *rest)
                routes = [
                    self.route(a, b, within=comm)
                    for a, b in zip(cand, cand[1:] + cand[:1], strict=True)
                ]
                bws = ring_hop_bandwidths(routes)
                score = (min(bws), -sum(len(r) for r in routes), sum(bws))
                if best is None or score > best:
                    best, order = score, cand
                if best == bound:  # no ring scores more; later equal ones would not win
                    break
        self._route_cache[key] = order
        return order

    def _ring_bound(self, gpus: tuple[str, ...], comm: frozenset[str]) -> tuple:
        """An upper bound of :meth:`ring`'s score over every ring of ``gpus``: each member's
        hop is at most as wide and at least as short as its widest and shortest route to
        another member. A ring that reaches it is the best (an NVSwitch server: the first
        one), so the search stops there instead of trying all ``(n-1)!`` rings."""
        widest, shortest = [], []
        for a in gpus:
            routes = [self.route(a, b, within=comm) for b in gpus if b != a]
            widest.append(max(min(lk.rate_Bps(True) for lk in r) for r in routes))
            shortest.append(min(len(r) for r in routes))
        return (min(widest), -sum(shortest), sum(widest))

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
        """One search from ``src``: the last link of the route to every reachable node.

        Level by level (fewest hops); within a level the widest bottleneck wins, ties go to
        the smaller predecessor name. Only GPUs in ``relay`` forward traffic (NCCL forwards
        through a GPU; host copies do not), so the result serves every destination of one
        kind at once: O(links) per source instead of per pair. On a cluster
        (:data:`BOUNDED_ABOVE_NODES` nodes or more) a search for ``dst`` stops once the level
        that reaches it is complete (the levels before it, hence its route, are the same as
        the whole search's), and is not kept: a search of the whole cluster per source would
        cost ``O(GPUs x links)`` over a run.
        """
        key = (src, relay)
        cached = self._route_cache.get(key)
        if cached is not None:
            return cached
        bounded = dst is not None and len(self.nodes) >= BOUNDED_ABOVE_NODES
        gpus = self._gpu_names
        fabric = self.fabric is not None
        width: dict[str, float] = {src: float("inf")}
        prev: dict[str, Link] = {}
        frontier = [src]
        while frontier:
            if bounded:
                last = self._last_hop(frontier, dst, src, relay, width)
                if last is not None:
                    prev[str(dst)] = last
                    return prev
            best: dict[str, tuple[float, str, Link]] = {}
            for node in frontier:
                if node != src and node in gpus and node not in relay:
                    continue
                wn = width[node]
                for link in self._out[node]:
                    if link.dst in width or (fabric and link.kind == NETWORK):
                        continue
                    w = wn if wn < link.bandwidth_Bps else link.bandwidth_Bps
                    old = best.get(link.dst)
                    if old is None or w > old[0] or (w == old[0] and link.src < old[1]):
                        best[link.dst] = (w, link.src, link)
            for node, (w, _, link) in best.items():
                width[node] = w
                prev[node] = link
            frontier = sorted(best)
        if not bounded:
            self._route_cache[key] = prev
        return prev

    def _last_hop(
        self, frontier: list[str], dst: str | None, src: str, relay: frozenset[str], width: dict
    ) -> Link | None:
        """The link by which :meth:`_tree`'s next level would reach ``dst`` from ``frontier``
        (widest bottleneck, then the smaller predecessor name), or None when it would not:
        the search's own choice, without expanding the rest of the level."""
        gpus, here = self._gpu_names, set(frontier)
        best: tuple[float, str, Link] | None = None
        for link in self._in.get(str(dst), ()):
            node = link.src
            if node not in here or (node != src and node in gpus and node not in relay):
                continue
            w = min(width[node], link.bandwidth_Bps)
            if best is None or w > best[0] or (w == best[0] and node < best[1]):
                best = (w, node, link)
        return None if best is None else best[2]

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

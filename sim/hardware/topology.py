"""The hardware model: GPUs, hosts, switches and the directed links between them.

A :class:`Topology` is a directed graph whose nodes are GPUs (``gpu0`` ...), host CPU sockets
(``cpu0`` ...) and switches (``sw0`` ..., ``nvswitch``), and whose edges are :class:`Link` s
with a per-direction bandwidth and a latency. Every link is a shared resource in the engine:
two transfers crossing one link take longer than one. A PCIe switch uplink shared by two GPUs
(DGX-1, hardware.md §3.1) is modelled as one ``swK -> cpuS`` link that both GPUs' host traffic
crosses.

Routes: :meth:`Topology.route` returns the path with the fewest hops, the widest bottleneck among
those, ties broken by node name, so it is deterministic. GPUs relay only GPU-to-GPU traffic. On
DGX-1 a direct NVLink is used where one exists, and a pair without one relays through one
NVLink-connected GPU (2 hops), as NCCL does, instead of crossing PCIe and QPI (5 hops).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from sim.memory.capacity import NO_RESERVE, RuntimeReserve


@dataclass(frozen=True)
class GPU:
    """One GPU.

    Attributes:
        name: node name, ``gpu<i>``.
        model: product name, e.g. ``V100-SXM2-16GB``.
        memory_bytes: usable capacity in bytes: the total CUDA reports (below the datasheet
            figure; :mod:`sim.memory.capacity`).
        peak_flops: dense fp16/bf16 tensor peak in FLOP/s (hardware.md §1).
        hbm_bandwidth_Bps: HBM bandwidth in bytes/s.
        host: name of the CPU socket whose DRAM is this GPU's host memory.
        reserve: what a training process holds besides tensors (context, cuBLAS, NCCL,
            allocator margin, working memory; :mod:`sim.memory.capacity`). Hardware files get
            the sourced defaults; a GPU built in code counts tensors only unless given one.
    """

    name: str
    model: str
    memory_bytes: float
    peak_flops: float
    hbm_bandwidth_Bps: float
    host: str
    reserve: RuntimeReserve = NO_RESERVE


@dataclass(frozen=True)
class Host:
    """One CPU socket with its DRAM.

    Attributes:
        name: node name, ``cpu<i>``.
        dram_bytes: DRAM attached to this socket, in bytes.
        adam_params_per_s: CPU Adam throughput in parameters per second (for offloaded
            optimizer steps).
    """

    name: str
    dram_bytes: float
    adam_params_per_s: float = 1.0e9


@dataclass(frozen=True)
class Link:
    """One direction of a physical connection.

    Attributes:
        name: unique name, ``"<src>-><dst>"``.
        src: source node name.
        dst: destination node name.
        bandwidth_Bps: bytes per second in this direction (effective, not peak, unless the
            preset says otherwise).
        latency_s: fixed cost per transfer in seconds.
        kind: ``nvlink``, ``nvswitch``, ``pcie``, ``qpi``, ``loopback`` ...
    """

    name: str
    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float
    kind: str = "link"


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

    Raises:
        ValueError: a link names an unknown node, or two links share a name.
    """

    name: str
    gpus: tuple[GPU, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    switches: tuple[str, ...] = ()
    description: str = ""
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
        for gpu in self.gpus:
            if gpu.host not in {h.name for h in self.hosts}:
                raise ValueError(f"{gpu.name} names unknown host {gpu.host}")

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
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def host_dram_bytes(self) -> float:
        """Total host DRAM over all sockets, in bytes."""
        return sum(h.dram_bytes for h in self.hosts)

    def route(self, src: str, dst: str) -> tuple[Link, ...]:
        """Directed links from node ``src`` to node ``dst`` (empty when ``src == dst``).

        Fewest hops, then widest, then lexicographic by node names (see module doc).

        Raises:
            ValueError: no path exists.
        """
        key = (src, dst)
        if key in self._route_cache:
            return self._route_cache[key]
        if src == dst:
            path: tuple[Link, ...] = ()
        else:
            path = self._widest_shortest(src, dst)
        self._route_cache[key] = path
        return path

    def _widest_shortest(self, src: str, dst: str) -> tuple[Link, ...]:
        """Fewest hops, then widest bottleneck, then smallest predecessor name (BFS by level).

        GPUs relay only traffic between two GPUs (NCCL forwards through a GPU; host copies do
        not), so a host route never passes through another GPU.
        """
        gpus = {g.name for g in self.gpus}
        relay_gpus = src in gpus and dst in gpus
        width: dict[str, float] = {src: float("inf")}
        prev: dict[str, Link] = {}
        frontier = [src]
        while frontier and dst not in width:
            best: dict[str, tuple[float, str, Link]] = {}
            for node in frontier:
                if node != src and node in gpus and not relay_gpus:
                    continue
                for link in self._out[node]:
                    if link.dst in width:
                        continue
                    w = min(width[node], link.bandwidth_Bps)
                    cand = (w, link.src, link)
                    old = best.get(link.dst)
                    if old is None or w > old[0] or (w == old[0] and link.src < old[1]):
                        best[link.dst] = cand
            for node, (w, _, link) in best.items():
                width[node] = w
                prev[node] = link
            frontier = sorted(best)
        if dst not in width:
            raise ValueError(f"no route from {src} to {dst} in topology {self.name}")
        path = []
        node = dst
        while node != src:
            link = prev[node]
            path.append(link)
            node = link.src
        return tuple(reversed(path))

    def route_bandwidth_Bps(self, src: str, dst: str) -> float:
        """Bottleneck bandwidth of :meth:`route` in bytes/s (``inf`` when ``src == dst``)."""
        path = self.route(src, dst)
        return min((lk.bandwidth_Bps for lk in path), default=float("inf"))

    def route_latency_s(self, src: str, dst: str) -> float:
        """Sum of link latencies along :meth:`route`, in seconds."""
        return sum(lk.latency_s for lk in self.route(src, dst))

    def transfer_time_s(self, src: str, dst: str, nbytes: float) -> float:
        """Uncontended time to move ``nbytes`` from ``src`` to ``dst`` (cut-through)."""
        if src == dst or nbytes <= 0:
            return 0.0
        return self.route_latency_s(src, dst) + nbytes / self.route_bandwidth_Bps(src, dst)

    def direct_link(self, src: str, dst: str) -> Link | None:
        """The single link from ``src`` to ``dst`` if one exists."""
        for link in self._out.get(src, ()):
            if link.dst == dst:
                return link
        return None

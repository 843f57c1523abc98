"""The rings (NCCL's "channels") a ring collective over a communicator runs on.

NCCL does not run a collective on one ring: its topology search (``src/graph/search.cc``,
``ncclTopoCompute`` / ``ncclTopoSearchRec``) looks for a set of rings over the NVLink graph,
and every ring it accepts reserves its speed on each link it crosses (``followPath``:
``SUB_ROUND(link->width, speed)``), so the next ring only finds the bandwidth that is left; the
search keeps the set with the most ``nChannels * speedIntra`` (``ncclTopoCompareGraphs``), up to
``MAXCHANNELS / 2`` rings (``src/init.cc``: ``ringGraph.maxChannels = MAXCHANNELS/2``;
``MAXCHANNELS`` is 32 in ``src/include/devcomm.h``), and a collective's buffer is split over the
channels, each running the ring algorithm on its part at once (NVIDIA/nccl#299: "concurrent
data movement channels ... to maximize the link utilization of the physical topology (e.g. cube
mesh in a DGX1)"). A bidirectional NVLink therefore carries one ring per direction, and several
NVLinks between two GPUs are one wide connection that several rings share (NVIDIA/nccl#655); 4
V100s joined pairwise by 2 NVLinks get 6 rings (NVIDIA/nccl#713). On a DGX-1 this is what lifts
the all-reduce bus bandwidth from one ring's bottleneck (an NV2 pair, 40 GB/s at NCCL's rate) to
~130 GB/s measured (NVIDIA/nccl#258).

Here, at the level pipesim models links (:mod:`sim.hardware.topology`), :func:`ring_set`:

* a hop between two GPUs of the communicator may only be their own peer route (no GPU relays
  it) made of NVLink/NVSwitch links (:data:`PEER_KINDS`): a direct NVLink, or a path through an
  NVSwitch;
* rings are found greedily, one at a time: each is the directed ring over all of the
  communicator's GPUs whose slowest link has the most NCCL bandwidth left
  (:meth:`~sim.hardware.parts.Link.rate_Bps` ``(nccl=True)``, e.g. 20 GB/s per NVLink2), and
  it reserves that bandwidth on every link it crosses (a link crossed twice reserves it twice);
  the search stops when no ring has bandwidth left or at :data:`MAX_RINGS`;
* when no such ring exists (a pair with no NVLink, PCIe-only boxes, across the sockets of a
  DGX-1), or when the rings found give less than it, the collective runs on one ring as before:
  :meth:`~sim.hardware.topology.Topology.ring`'s order, hops routed through the communicator,
  each at :func:`~sim.hardware.transfer.ring_hop_bandwidths`.

On an NVSwitch server each GPU has one port (one ``gpu -> nvswitch`` link at ``count`` NVLinks'
rate), so the first ring takes the whole port and the set is that one ring. The greedy search is
NCCL's idea, not its code: NCCL tries one speed for all rings from a fixed speed list and
backtracks across rings within a time budget; rings of different speeds are kept here. The
search per ring is exhaustive up to 8 GPUs and bounded by :data:`SEARCH_STEPS` beyond
(NCCL's ``NCCL_SEARCH_TIMEOUT`` plays that role), so it is deterministic and fast.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.hardware.cluster import server_renamer
from sim.hardware.parts import Link
from sim.hardware.topology import Topology
from sim.hardware.transfer import ring_hop_bandwidths

MAX_RINGS = 16
"""Most rings of one communicator: NCCL's ``MAXCHANNELS / 2`` (32 / 2; ``src/init.cc``,
``src/include/devcomm.h``). NCCL later duplicates each ring into two channels that share its
bandwidth, which does not change the bandwidth modelled here."""

PEER_KINDS = frozenset({"nvlink", "nvswitch"})
"""Link kinds a multi-ring hop may use (NCCL's ``LINK_NVL``/``PATH_NVL``)."""

SEARCH_STEPS = 1 << 16
"""Partial rings one ring's search extends at most (exhaustive up to 8 GPUs: 8!/8 = 5040
rings)."""

MIN_RING_Bps = 1e6
"""A ring with less bandwidth left than this (1 MB/s) is not worth a channel (rounding)."""


@dataclass(frozen=True)
class Ring:
    """One ring (channel) of a collective.

    Attributes:
        order: the GPU names in ring order; hop ``i`` goes from ``order[i]`` to
            ``order[i + 1 mod n]``.
        routes: the links of each hop.
        hop_bandwidths_Bps: the rate of each hop in bytes/s: the bandwidth the ring reserved
            (multi-ring), or :func:`~sim.hardware.transfer.ring_hop_bandwidths` (the single
            fallback ring).
    """

    order: tuple[str, ...]
    routes: tuple[tuple[Link, ...], ...]
    hop_bandwidths_Bps: tuple[float, ...]

    @property
    def bandwidth_Bps(self) -> float:
        """The ring's rate, its slowest hop's, in bytes/s (``inf`` for no hop)."""
        return min(self.hop_bandwidths_Bps, default=float("inf"))


def ring_set(topology: Topology, gpus: tuple[str, ...]) -> tuple[Ring, ...]:
    """The rings a ring collective over ``gpus`` runs on (module doc), cached per topology.

    Args:
        topology: the server.
        gpus: the communicator's GPU names (at least one), in rank order.

    Returns:
        At least one ring; the rings' bandwidths are in the order they were found (widest
        first). One GPU: one ring without hops.

    Raises:
        ValueError: a GPU of ``gpus`` cannot reach the next one (no route).
    """
    key = ("ring_set", gpus)
    cached = topology._route_cache.get(key)
    if cached is None:
        cached = _in_one_server(topology, gpus)
        if cached is None:
            cached = _compute(topology, tuple(gpus))
        topology._route_cache[key] = cached
    return cached


def _in_one_server(topology: Topology, gpus: tuple[str, ...]) -> tuple[Ring, ...] | None:
    """In a cluster of identical servers (:mod:`sim.hardware.cluster`), the rings of GPUs of
    one server: those of the same GPUs of the one server's topology, renamed (servers are
    identical, so is the search); None otherwise."""
    server, fabric = topology.server, topology.fabric
    if server is None or fabric is None:
        return None
    g = fabric.gpus_per_server
    which = {int(x[3:]) // g for x in gpus}
    if len(which) != 1:
        return None
    n = which.pop()
    rings = ring_set(server, tuple(f"gpu{int(x[3:]) - n * g}" for x in gpus))
    rename = server_renamer(server, n)
    links = topology.link_by_name
    return tuple(
        Ring(
            tuple(rename(x) for x in r.order),
            tuple(
                tuple(links[f"{rename(lk.src)}->{rename(lk.dst)}"] for lk in route)
                for route in r.routes
            ),
            r.hop_bandwidths_Bps,
        )
        for r in rings
    )


def reserved_Bps(rings: tuple[Ring, ...]) -> dict[str, float]:
    """Bytes/s the rings reserve on each link they cross, by link name (a ring crossing a link
    ``k`` times reserves ``k`` times its rate there)."""
    out: dict[str, float] = {}
    for ring in rings:
        for route, bw in zip(ring.routes, ring.hop_bandwidths_Bps, strict=True):
            for lk in route:
                out[lk.name] = out.get(lk.name, 0.0) + bw
    return out


def _compute(topology: Topology, gpus: tuple[str, ...]) -> tuple[Ring, ...]:
    if len(gpus) < 2:
        return (Ring(gpus, (), ()),)
    comm = frozenset(gpus)
    order = topology.ring(gpus)
    routes = tuple(
        topology.route(a, b, within=comm) for a, b in zip(order, order[1:] + order[:1], strict=True)
    )
    single = Ring(order, routes, tuple(ring_hop_bandwidths(list(routes))))
    if topology.fabric is not None:  # across servers of a cluster: no NVLink between them
        return (single,)
    rings = _greedy_rings(topology, gpus)
    if sum(r.bandwidth_Bps for r in rings) < single.bandwidth_Bps:
        return (single,)
    return rings


def _peer_routes(topology: Topology, gpus: tuple[str, ...]) -> dict[str, list[tuple]]:
    """For each GPU, the ``(next GPU, route)`` of each NVLink/NVSwitch peer route to another GPU
    of ``gpus``, in ``gpus`` order."""
    out: dict[str, list[tuple]] = {}
    for a in gpus:
        out[a] = []
        for b in gpus:
            if a == b:
                continue
            route = topology.route(a, b)  # the pair's own route: no GPU relays it
            if route and all(lk.kind in PEER_KINDS for lk in route):
                out[a].append((b, route))
    return out


def _greedy_rings(topology: Topology, gpus: tuple[str, ...]) -> tuple[Ring, ...]:
    """Rings found one at a time, each the widest with the bandwidth the others left."""
    peers = _peer_routes(topology, gpus)
    if not _strongly_connected(gpus, peers):
        return ()  # no ring can visit every member (e.g. GPUs of two servers)
    left: dict[str, float] = {}
    for hops in peers.values():
        for _, route in hops:
            for lk in route:
                left[lk.name] = lk.rate_Bps(True)
    rings: list[Ring] = []
    while len(rings) < MAX_RINGS:
        found = _widest_ring(gpus, peers, left)
        if found is None:
            break
        bw, order, routes = found
        for route in routes:
            for lk in route:
                left[lk.name] -= bw
        rings.append(Ring(order, routes, (bw,) * len(routes)))
    return tuple(rings)


def _strongly_connected(gpus: tuple[str, ...], peers: dict[str, list[tuple]]) -> bool:
    """Whether every member reaches every other over peer routes (a ring needs it)."""
    back: dict[str, list[str]] = {g: [] for g in gpus}
    for a, hops in peers.items():
        for b, _ in hops:
            back[b].append(a)
    for edges in ({a: [b for b, _ in hops] for a, hops in peers.items()}, back):
        seen, todo = {gpus[0]}, [gpus[0]]
        while todo:
            for nxt in edges[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        if len(seen) < len(gpus):
            return False
    return True


def _widest_ring(
    gpus: tuple[str, ...], peers: dict[str, list[tuple]], left: dict[str, float]
) -> tuple[float, tuple[str, ...], tuple[tuple[Link, ...], ...]] | None:
    """Branch and bound from ``gpus[0]``: the Hamiltonian ring whose slowest link (its bandwidth
    left divided by how often the ring crosses it) is widest; next hops tried widest first, ties
    in ``gpus`` order; the first ring found of the best width wins. None when none has
    :data:`MIN_RING_Bps`."""
    n = len(gpus)
    start = gpus[0]
    best: list = [MIN_RING_Bps, None]
    steps = [0]
    path: list[str] = [start]
    hops: list[tuple[Link, ...]] = []
    visited = {start}

    def width(routes: list[tuple[Link, ...]]) -> float:
        uses: dict[str, int] = {}
        for route in routes:
            for lk in route:
                uses[lk.name] = uses.get(lk.name, 0) + 1
        return min(left[name] / k for name, k in uses.items())

    def extend(bound: float) -> None:
        if steps[0] >= SEARCH_STEPS:
            return
        steps[0] += 1
        here = path[-1]
        if len(path) == n:
            for nxt, route in peers[here]:
                if nxt == start:
                    w = width([*hops, route])
                    if w > best[0]:
                        best[0], best[1] = w, (tuple(path), (*hops, route))
            return
        cands = [
            (min(left[lk.name] for lk in route), nxt, route)
            for nxt, route in peers[here]
            if nxt not in visited
        ]
        cands.sort(key=lambda c: -c[0])  # stable: ties stay in gpus order
        for w, nxt, route in cands:
            b = min(bound, w)
            if b <= best[0]:
                break  # sorted: no later candidate is wider
            path.append(nxt)
            hops.append(route)
            visited.add(nxt)
            extend(b)
            visited.discard(nxt)
            hops.pop()
            path.pop()

    extend(float("inf"))
    if best[1] is None:
        return None
    order, routes = best[1]
    return best[0], order, routes

"""Topology routing checked against networkx (an independent implementation of the graph part).

:meth:`sim.hardware.topology.Topology.route` is pipesim's own search (fewest hops, then the
widest bottleneck, then names; only the communicator's GPUs relay), kept because networkx costs
about 0.5 s to import on the CLI's path and has no "widest of the shortest" search whose ties
match. These tests check every route of every bundled preset, and of a two-server cluster,
against networkx's shortest paths on the same graph: a route is one of the shortest paths, and
none of them has a wider bottleneck. :attr:`Topology.servers` is checked against networkx's
connected components.
"""

from __future__ import annotations

import itertools

import pytest

from sim.hardware.fabric import NETWORK
from sim.hardware.loader import list_presets, load_hardware
from sim.hardware.parts import Link
from sim.hardware.topology import Topology

nx = pytest.importorskip("networkx")


def _graph(topo: Topology, src: str, relay: frozenset[str]) -> nx.DiGraph:
    """The links a route from ``src`` may use: no GPU but ``src`` and those in ``relay``
    forwards traffic, and with a fabric no ``network`` link is used inside a server."""
    gpus = {g.name for g in topo.gpus}
    g = nx.DiGraph()
    g.add_nodes_from(topo.nodes)
    for lk in topo.links:
        if lk.src != src and lk.src in gpus and lk.src not in relay:
            continue
        if topo.fabric is not None and lk.kind == NETWORK:
            continue
        g.add_edge(lk.src, lk.dst, link=lk)
    return g


def _width(path: tuple[Link, ...]) -> float:
    return min(lk.bandwidth_Bps for lk in path)


def _check_pairs(topo: Topology, pairs: list[tuple[str, str]], within: frozenset[str] | None):
    gpus = {g.name for g in topo.gpus}
    for src, dst in pairs:
        route = topo.route(src, dst, within=within)
        relay = frozenset() if within is None else (gpus & within) - {src, dst}
        g = _graph(topo, src, relay)
        paths = [
            tuple(g.edges[a, b]["link"] for a, b in itertools.pairwise(nodes))
            for nodes in nx.all_shortest_paths(g, src, dst)
        ]
        assert all(a.dst == b.src for a, b in itertools.pairwise(route)), (src, dst)
        assert route in paths, (topo.name, src, dst, [lk.name for lk in route])
        assert _width(route) == max(map(_width, paths)), (topo.name, src, dst)


@pytest.mark.parametrize("preset", list_presets())
def test_every_route_is_a_widest_shortest_path_by_networkx(preset):
    topo = load_hardware(preset)
    names = [g.name for g in topo.gpus][:16]
    pairs = [(a, b) for a in names for b in names if a != b]
    _check_pairs(topo, pairs, None)  # a p2p send: no GPU relays
    _check_pairs(topo, pairs, frozenset(names))  # a collective's hop: its GPUs may relay
    _check_pairs(topo, [(g.name, g.host) for g in topo.gpus[:8]], None)  # swaps to the host


@pytest.mark.parametrize("preset", ["dgx1-v100-16gb", "pcie-8gpu", "dgx-h100"])
def test_servers_are_the_connected_components_without_network_links(preset):
    topo = load_hardware(preset)
    g = nx.Graph()
    g.add_nodes_from(topo.nodes)
    g.add_edges_from((lk.src, lk.dst) for lk in topo.links if lk.kind != NETWORK)
    index = {g_.name: i for i, g_ in enumerate(topo.gpus)}
    components = sorted(
        tuple(sorted(index[n] for n in comp if n in index))
        for comp in nx.connected_components(g)
        if any(n in index for n in comp)
    )
    assert topo.servers == tuple(components)


def test_routes_inside_each_server_of_a_cluster_agree_with_networkx():
    topo = load_hardware("2x-dgx-h100")
    per = topo.fabric.gpus_per_server
    for server in range(2):
        names = [topo.gpus[server * per + i].name for i in range(per)]
        pairs = [(a, b) for a in names for b in names if a != b]
        _check_pairs(topo, pairs, None)
        _check_pairs(topo, pairs, frozenset(names))

"""The route search of a :class:`~sim.hardware.topology.Topology`: one breadth-first search per
source that finds, level by level (fewest hops), the widest route to every node it reaches, ties
going to the smaller predecessor name, so routes are deterministic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sim.hardware.fabric import NETWORK
from sim.hardware.parts import Link


def widest_tree(
    out: Mapping[str, Sequence[Link]],
    gpus: frozenset[str],
    src: str,
    relay: frozenset[str],
    *,
    skip_network: bool,
    stop_at: str | None = None,
    into_stop: Sequence[Link] = (),
) -> dict[str, Link]:
    """One search from ``src``: the last link of the route to every reachable node.

    Level by level (fewest hops); within a level the widest bottleneck wins, ties go to
    the smaller predecessor name. Only GPUs in ``relay`` forward traffic (NCCL forwards
    through a GPU; host copies do not), so the result serves every destination of one
    kind at once: O(links) per source instead of per pair. With ``stop_at`` (a cluster,
    :data:`~sim.hardware.topology.BOUNDED_ABOVE_NODES` nodes or more) the search stops once
    the level that reaches it is complete (the levels before it, hence its route, are the same
    as the whole search's): a search of the whole cluster per source would cost
    ``O(GPUs x links)`` over a run.

    Args:
        out: every node's outgoing links, sorted by destination.
        gpus: the GPU node names.
        src: the start node.
        relay: the GPUs other than ``src`` that may forward traffic.
        skip_network: links of kind ``network`` are not searched (a cluster routes between
            servers by its fabric).
        stop_at: the destination a bounded search stops at, or None for the whole search.
        into_stop: the links into ``stop_at``.

    Returns:
        ``{node: the last link of its route}`` (with ``stop_at``: that node's at least).
    """
    width: dict[str, float] = {src: float("inf")}
    prev: dict[str, Link] = {}
    frontier = [src]
    while frontier:
        if stop_at is not None:
            last = _last_hop(into_stop, gpus, frontier, src, relay, width)
            if last is not None:
                prev[stop_at] = last
                return prev
        best: dict[str, tuple[float, str, Link]] = {}
        for node in frontier:
            if node != src and node in gpus and node not in relay:
                continue
            wn = width[node]
            for link in out[node]:
                if link.dst in width or (skip_network and link.kind == NETWORK):
                    continue
                w = wn if wn < link.bandwidth_Bps else link.bandwidth_Bps
                old = best.get(link.dst)
                if old is None or w > old[0] or (w == old[0] and link.src < old[1]):
                    best[link.dst] = (w, link.src, link)
        for node, (w, _, link) in best.items():
            width[node] = w
            prev[node] = link
        frontier = sorted(best)
    return prev


def _last_hop(
    into: Sequence[Link],
    gpus: frozenset[str],
    frontier: list[str],
    src: str,
    relay: frozenset[str],
    width: dict[str, float],
) -> Link | None:
    """The link of ``into`` (the links into the destination) by which :func:`widest_tree`'s next
    level would reach the destination from ``frontier`` (widest bottleneck, then the smaller
    predecessor name), or None when it would not: the search's own choice, without expanding
    the rest of the level."""
    here = set(frontier)
    best: tuple[float, str, Link] | None = None
    for link in into:
        node = link.src
        if node not in here or (node != src and node in gpus and node not in relay):
            continue
        w = min(width[node], link.bandwidth_Bps)
        if best is None or w > best[0] or (w == best[0] and node < best[1]):
            best = (w, node, link)
    return None if best is None else best[2]

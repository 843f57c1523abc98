"""The order in which a single ring visits a communicator's GPUs, NCCL-like: the ring a
collective runs on where the communicator has no NVLink rings (:func:`sim.comm.rings.ring_set`
builds NCCL's several rings where it has)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import permutations

from sim.hardware.parts import Link
from sim.hardware.transfer import ring_hop_bandwidths

Route = Callable[..., tuple[Link, ...]]
"""``route(src, dst, within=communicator)``: :meth:`sim.hardware.topology.Topology.route`."""


def best_ring(gpus: tuple[str, ...], route: Route) -> tuple[str, ...]:
    """The order of the fastest single ring over ``gpus``.

    NCCL searches its rings over the communicator's GPUs for the fastest one (NCCL's
    topology search, ``graph/search.cc``). Here: of the rings starting at ``gpus[0]`` (each
    hop routed within the communicator by ``route``), the one with the widest slowest hop,
    then the widest hops in total, then the first in permutation order. Exhaustive up to 8
    GPUs (5040 rings); beyond that the given order. A hop's bandwidth is that of
    :func:`~sim.hardware.transfer.ring_hop_bandwidths` (a link two hops relay over is shared
    by both); ties go to the ring with fewer links, then to the widest in total.
    """
    comm = frozenset(gpus)
    best, order = None, tuple(gpus)
    if 2 < len(gpus) <= 8:
        bound = _ring_bound(gpus, comm, route)
        for rest in permutations(gpus[1:]):
            cand = (gpus[0], *rest)
            routes = [
                route(a, b, within=comm) for a, b in zip(cand, cand[1:] + cand[:1], strict=True)
            ]
            bws = ring_hop_bandwidths(routes)
            score = (min(bws), -sum(len(r) for r in routes), sum(bws))
            if best is None or score > best:
                best, order = score, cand
            if best == bound:  # no ring scores more; later equal ones would not win
                break
    return order


def _ring_bound(gpus: tuple[str, ...], comm: frozenset[str], route: Route) -> tuple:
    """An upper bound of :func:`best_ring`'s score over every ring of ``gpus``: each member's
    hop is at most as wide and at least as short as its widest and shortest route to
    another member. A ring that reaches it is the best (an NVSwitch server: the first
    one), so the search stops there instead of trying all ``(n-1)!`` rings."""
    widest, shortest = [], []
    for a in gpus:
        routes = [route(a, b, within=comm) for b in gpus if b != a]
        widest.append(max(min(lk.rate_Bps(True) for lk in r) for r in routes))
        shortest.append(min(len(r) for r in routes))
    return (min(widest), -sum(shortest), sum(widest))

"""What moving bytes over a route of links costs: the one transfer-time formula, and the share of
its links each hop of a ring gets when all hops send at once."""

from __future__ import annotations

from sim.hardware.parts import Link


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

"""Peer GPUs for MPress-style D2D swap: who is reachable over NVLink, and striping over them.

A peer is another GPU of the job reachable from the stage's GPU over NVLink or NVSwitch links
only, without relaying through a third GPU (a relay would spend that GPU's links too). On DGX-1
that is the 4 NVLink neighbours (2 over NV2 at 48 GB/s, 2 over NV1 at 24 GB/s); on NVSwitch
servers every GPU. Bytes are striped over peers in proportion to link bandwidth (so parallel
copies finish together), each peer capped by its room (water-filling).
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.memory.context import StageContext
from sim.memory.plan import SwapParts

NVLINK_KINDS = ("nvlink", "nvswitch")


def nvlink_peers(ctx: StageContext, gpus: Iterable[str]) -> list[tuple[str, float]]:
    """``(gpu, bandwidth_Bps)`` of the ``gpus`` reachable over NVLink only, widest first."""
    topo, out = ctx.topology, []
    for g in sorted(set(gpus)):
        if g == ctx.gpu:
            continue
        route = topo.route(ctx.gpu, g)
        relay = any(lk.dst.startswith("gpu") for lk in route[:-1])
        if route and not relay and all(lk.kind in NVLINK_KINDS for lk in route):
            out.append((g, min(lk.bandwidth_Bps for lk in route)))
    return sorted(out, key=lambda p: (-p[1], p[0]))


def stripe(nbytes: float, peers: list[tuple[str, float]], room: dict[str, float]) -> SwapParts:
    """Split ``nbytes`` over ``peers`` in proportion to bandwidth, at most ``room[g]`` each.

    Returns:
        ``((gpu, bytes), ...)`` in peer order; their sum is less than ``nbytes`` only when the
        peers' room runs out.
    """
    alloc = {g: 0.0 for g, _ in peers}
    active = [(g, bw) for g, bw in peers if room.get(g, 0.0) > 0]
    left = nbytes
    while left > 1e-6 * max(nbytes, 1.0) and active:
        total_bw = sum(bw for _, bw in active)
        given, still = 0.0, []
        for g, bw in active:
            take = min(left * bw / total_bw, room[g] - alloc[g])
            alloc[g] += take
            given += take
            if room[g] - alloc[g] > 1e-9 * max(room[g], 1.0):
                still.append((g, bw))
        left -= given
        active = still
    return tuple((g, b) for g, b in alloc.items() if b > 0)

"""Planning estimates: a GPU's peak memory and the seconds a plan adds, before simulating.

Policies that decide across stages (d2d peers, ``auto``) need each GPU's peak before the engine
runs. The estimate, per stage replica with ``n`` micro-batches in flight (``ctx.in_flight``):

``peak = static + overhead + n * resident + L * swap + rebuild + 2 * fetch_live
+ 2 * (input + output buffers)``

* ``static``: weights (all versions), gradients, optimizer state on the GPU;
* ``overhead``: runtime reserve, allocator margin and working memory (:mod:`sim.memory.reserve`),
  the same bytes the engine charges in its ledger at t = 0;
* ``n * resident``: the kept part of every live stash;
* ``L * swap``: while a forward runs with its whole stash, the previous forward's swap-out may
  still be copying and the next backward's stash is already coming back (the swap-in starts one
  action ahead), so ``L = 3`` micro-batches' swapped bytes can be on the GPU at once
  (:data:`SWAP_LIVE`); more when a copy is slower than the forwards come and the warm-up's
  forwards leave a queue of copies (:func:`swap_live`; the parts of one stash queue where they
  share a link, :func:`parts_copy_s`). Swapping ``y`` bytes per micro-batch lowers the peak
  by ``(n - L) * y``: it helps only stages with ``n > 3``;
* ``rebuild``: the dropped bytes live during a forward or a recompute;
* chunk staging and gathered partitioned parameters (the next action's are prefetched during
  this one) and receive buffers, twice for overlap.

Host copies assume the GPUs behind one uplink all swap (``ctx.host_sharers``). The engine's
ledger verifies every plan; the tests hold the estimate to it. Policies aim at ``budget_bytes`` = capacity minus a
:data:`HEADROOM` share for what the estimate does not see.

Peer reservations (MPress): a stage that parks ``x`` bytes per micro-batch on a peer holds at
most ``(n - 1) * x`` there at once (:func:`parked_microbatches`), so a peer's ``spare`` must
cover that, and no more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from sim.hardware.topology import Topology
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan

HEADROOM = 0.03
"""Share of GPU capacity policies leave free (queued buffers, estimate error)."""

SWAP_LIVE = 3
"""Micro-batches whose swapped bytes can be on the GPU at once (module doc)."""


def budget_bytes(ctx: StageContext) -> float:
    """GPU bytes a policy may plan for on ``ctx``'s GPU."""
    return ctx.capacity_bytes * (1.0 - HEADROOM)


def swap_out_s(ctx: StageContext, parts) -> float:
    """Seconds to copy one micro-batch's swapped ``parts`` out (:func:`parts_copy_s`)."""
    return parts_copy_s(ctx, [(ctx.gpu, node, b) for node, b in parts])


def swap_in_s(ctx: StageContext, parts) -> float:
    """Seconds to copy one micro-batch's swapped ``parts`` back in (:func:`parts_copy_s`)."""
    return parts_copy_s(ctx, [(node, ctx.gpu, b) for node, b in parts])


def parts_copy_s(ctx: StageContext, copies) -> float:
    """Seconds until the last of ``copies`` (``[(src, dst, bytes), ...]``, started together)
    ends. Each link is FIFO and a copy holds every link of its route (:mod:`sim.engine.links`),
    so copies sharing a link queue on it: the busiest link's summed copy times set the end.
    Host routes split ``ctx.host_sharers`` ways (:func:`copy_s`).

    On DGX-1 every peer has its own NVLink, so a stripe's parts run in parallel (the slowest
    part). Behind an NVSwitch (or one PCIe switch) every part crosses the GPU's single uplink:
    taking the slowest part there undercounted a stripe over ``k`` peers ``k`` times, and the
    planner parked stashes whose swap-outs queued far past a forward (DGX-H100 engine peaks up
    to 0.78 of capacity above the estimate). Exact when the shared links form a star (those
    cases) and nothing else crosses them; a lower bound otherwise.
    """
    busy: dict[str, float] = {}
    for src, dst, nbytes in copies:
        node = dst if src == ctx.gpu else src
        t = copy_s(ctx, src, dst, nbytes, _sharers(ctx, node))
        for lk in ctx.topology.route(src, dst):
            busy[lk.name] = busy.get(lk.name, 0.0) + t
    return max(busy.values(), default=0.0)


def forward_gap_s(ctx: StageContext) -> float:
    """A lower bound on the seconds between the ends of two consecutive forwards of ``ctx``'s
    stage: its own forward (``fwd_s``), or the receive of its input (``input_bytes``) if longer.

    Forwards run one after another on the compute stream, and each waits for its input, whose
    sends hold the route from the previous stage's GPU one after another (links are FIFO,
    :mod:`sim.engine.links`); in such a line of FIFO servers started empty, ``k`` departures
    take at least ``k`` times the slowest service. The receive is timed at the fastest NCCL
    rate of a route from another GPU (the previous stage runs on another GPU; which one is not
    known here, and NCCL adds a latency, :func:`sim.comm.nccl.p2p_time_s`). Upstream
    stages' forwards are not known here either: a lower bound.
    """
    if ctx.input_bytes <= 0:
        return ctx.fwd_s
    topo = ctx.topology
    rate = max(
        (
            topo.route_bandwidth_Bps(g.name, ctx.gpu, nccl=True)
            for g in topo.gpus
            if g.name != ctx.gpu
        ),
        default=float("inf"),
    )
    return max(ctx.fwd_s, ctx.input_bytes / rate)


def swap_live(ctx: StageContext, parts) -> float:
    """Micro-batches whose swapped bytes can be on the GPU at once: :data:`SWAP_LIVE` while a
    swap-out (``t_out``, :func:`swap_out_s`) keeps up with the forwards (one every ``f`` at
    least, :func:`forward_gap_s`), more when it does not (at most ``n + 1``: then swapping
    saves nothing).

    A stash's part leaves the GPU's ledger only when its copy *ends*, and a swap-in allocates
    the whole stash when it starts, one action ahead of its backward (:mod:`sim.engine.traffic`).
    With ``t_out > f`` the copies of the warm-up's ``n`` forwards queue on their links: copy
    ``j`` (0-based) ends by ``f + (j + 1) * t_out`` after the first forward starts, so when the
    ``n``-th forward ends (``n * f`` or later) the copies of at most
    ``queued = n - floor((n - 1) * f / t_out)`` stashes have not ended; with ``t_out <= f``
    only that forward's (1). The peak is then, or at the start of that forward (its stash and
    the oldest micro-batch's swap-in, ``queued`` or one less before it): two swap-ins (the
    first backward's and, when a backward follows it as in GPipe, the next one's, prefetched
    while the first waits) plus the queue, ``2 + queued``; ``3`` when copies keep up.

    (A continuous backlog ``n * (1 - fwd_s / t_out) + 2`` used here before undercounts: it
    drains copies gradually, but a part is freed all at once when its copy ends. With ``t_out``
    a few percent above ``fwd_s`` it gave 3 where the engine holds 4, and MPress's planner,
    which grows peer bytes until the estimate just fits, picked plans 0.1-0.6 GiB over
    capacity.)
    """
    if not parts:
        return 0.0
    n, t_out = ctx.in_flight, swap_out_s(ctx, parts)
    if t_out <= ctx.fwd_s or n <= 2:
        return min(n + 1.0, float(SWAP_LIVE))
    f = forward_gap_s(ctx)
    if t_out <= f:
        return float(SWAP_LIVE)
    queued = n - math.floor((n - 1) * f / t_out - 1e-9)  # a copy ending at the peak counts
    return min(n + 1.0, 2.0 + queued)


def activation_peak_bytes(plan: StagePlan, ctx: StageContext) -> float:
    """The non-static part of :func:`planned_peak_bytes` (activations, copies, buffers)."""
    return (
        ctx.in_flight * plan.resident_act_bytes
        + swap_live(ctx, plan.swap_parts) * plan.swap_bytes
        + plan.rebuild_bytes
        + 2 * plan.fetch_live
        + (2 * plan.gather_live if ctx.dp_width > 1 else 0.0)
        + 2 * (ctx.input_bytes + ctx.out_bytes)
    )


def planned_peak_bytes(plan: StagePlan, ctx: StageContext) -> float:
    """Estimated peak bytes of ``ctx``'s stage on its GPU (module doc)."""
    return plan.static_gpu_bytes + plan.overhead_bytes + activation_peak_bytes(plan, ctx)


def parked_microbatches(ctx: StageContext) -> int:
    """Micro-batches of ``ctx``'s stage whose swapped parts sit on their target at once:
    ``max(1, n - 1)``.

    The engine records a part on the target from the end of its swap-out to the end of its
    swap-in (:mod:`sim.engine.traffic`). The swap-in of the oldest micro-batch starts with the
    forward that brings the stage to ``n`` in flight (one action ahead of its backward, and its
    copy is no slower than that forward plus the new micro-batch's swap-out), and that forward's
    part is still on the GPU: so ``n - 1`` parts at most, ``1`` when ``n = 1``. Reserving ``n``
    (as before) over-reserved one micro-batch's part on every peer.
    """
    return max(1, ctx.in_flight - 1)


def incoming_bytes(plans: Iterable[tuple[StageContext, StagePlan]]) -> dict[str, float]:
    """Bytes each node holds at most for other GPUs' swaps: ``sum(parked * part)`` per target
    (:func:`parked_microbatches`)."""
    out: dict[str, float] = {}
    for ctx, plan in plans:
        for node, nbytes in plan.swap_parts:
            out[node] = out.get(node, 0.0) + parked_microbatches(ctx) * nbytes
    return out


def host_bytes(ctx: StageContext, plan: StagePlan) -> float:
    """Host DRAM a stage's plan holds at most: offloaded state, the framework's host buffers
    and swapped stashes."""
    swapped = sum(b for n, b in plan.swap_parts if n == ctx.host)
    return plan.host_total_bytes + ctx.in_flight * swapped


def spare_bytes(pairs: list[tuple[StageContext, StagePlan]]) -> dict[str, float]:
    """Bytes each planned GPU can still take for peers: budget - own peak - incoming."""
    inc = incoming_bytes(pairs)
    spare: dict[str, float] = {}
    for ctx, plan in pairs:
        own = spare.get(ctx.gpu, budget_bytes(ctx) - inc.get(ctx.gpu, 0.0))
        spare[ctx.gpu] = own - planned_peak_bytes(plan, ctx)
    return spare


def copy_s(ctx: StageContext, src: str, dst: str, nbytes: float, sharers: int = 1) -> float:
    """Uncontended copy time, with the bottleneck bandwidth split ``sharers`` ways."""
    if nbytes <= 0 or src == dst:
        return 0.0
    topo = ctx.topology
    return topo.route_latency_s(src, dst) + nbytes * sharers / topo.route_bandwidth_Bps(src, dst)


def _sharers(ctx: StageContext, node: str) -> int:
    return 1 if node.startswith("gpu") else ctx.host_sharers  # only host routes share uplinks


def swap_exposed_s(ctx: StageContext, parts) -> float:
    """Estimated stall per micro-batch of swapping ``parts`` (``((node, bytes), ...)``), with
    host copies sharing their uplink ``ctx.host_sharers`` ways.

    Parts move in parallel except where they share a link (:func:`parts_copy_s`); that sets the
    copy time ``t`` each way. The swap-in starts one action (about a forward) before the
    backward, so ``t_in - fwd_s`` is exposed; the link must also carry a swap-out per
    forward-plus-backward, so ``t_out - (fwd_s + bwd_s)`` is exposed when it cannot keep up.
    With one micro-batch in flight the backward follows its forward at once, and both copies
    are exposed.
    """
    if not parts:
        return 0.0
    t_out = swap_out_s(ctx, parts)
    t_in = swap_in_s(ctx, parts)
    if ctx.in_flight <= 1:
        return t_out + t_in
    return max(0.0, t_in - ctx.fwd_s, t_out - (ctx.fwd_s + ctx.bwd_s))


_SHARERS: dict[tuple[int, tuple[str, ...]], tuple[Topology, dict[str, int]]] = {}
"""Memo of :func:`host_link_sharers` (the topology is kept with its answer, so its ``id``
cannot be reused while the entry lives)."""


def host_link_sharers(topo: Topology, gpus: list[str]) -> dict[str, int]:
    """Per GPU of ``gpus``, how many of them share the bottleneck link of its route to its host
    (2 on DGX-1 when both GPUs behind one PCIe switch uplink are used); memoized per topology
    and GPU list (a cluster's thousands of routes are walked once)."""
    key = (id(topo), tuple(gpus))
    hit = _SHARERS.get(key)
    if hit is not None and hit[0] is topo:
        return hit[1]
    if len(_SHARERS) > 64:
        _SHARERS.clear()
    out = _host_link_sharers(topo, gpus)
    _SHARERS[key] = (topo, out)
    return out


def _host_link_sharers(topo: Topology, gpus: list[str]) -> dict[str, int]:
    bottleneck = {}
    for g in gpus:
        route = topo.route(g, topo.gpu(int(g[3:])).host)
        if route:
            bottleneck[g] = min(route, key=lambda lk: lk.bandwidth_Bps).name
    counts: dict[str, int] = {}
    for name in bottleneck.values():
        counts[name] = counts.get(name, 0) + 1
    return {g: counts[name] for g, name in bottleneck.items()}

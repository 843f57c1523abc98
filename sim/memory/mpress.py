"""MPress's memory-saving planner: per stage, the mix of recompute, peer swap and host swap that
fits first and then costs least (Zhou et al., HPCA'23, §IV "memory-saving planner" and §V
"D2D swap"; memory.md §5.3, **unverified**: the paper is not open access).

The planner, for all stage replicas at once:

1. **Local plans.** Each stage gets its best plan without peers (:func:`local_option`): every
   recompute choice (keep; selective; full checkpointing of the ``k`` layers that save most
   bytes per second; with the combined form, full checkpointing of every layer only), each with
   the smallest host swap that fits (:mod:`sim.memory.search`). Fitting first, then cheapest.
2. **Lenders.** A GPU lends ``budget - own planned peak - bytes already parked on it`` (its
   *actual* plan's peak, moved weight versions included; never the resident plan's).
3. **Borrowers**, the stages that do not fit locally first (largest excess first), then the
   costliest: for every recompute choice, the peer bytes per micro-batch that bring the stage
   under its budget, striped over its NVLink peers in proportion to link bandwidth and capped
   by each peer's spare (:func:`sim.memory.peers.stripe`); what peers cannot take goes to the
   host. The best candidate (local plan included) is taken and its bytes are charged to the
   peers: ``parked_microbatches * part`` each (:func:`~sim.memory.estimate.parked_microbatches`).
   A borrower that also lends keeps the bytes parked on it inside its own budget.

With ``weights`` (PipeDream keeps ``p - s`` weight versions, 2BW 2), each recompute choice is
tried both with every version resident and with the older versions moved into the stash (one
version resident, ``(v - 1) * version_bytes / n`` per micro-batch): moving is only a candidate,
so it never fits less than keeping them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.memory.compose import resident_plan
from sim.memory.context import StageContext
from sim.memory.estimate import (
    SWAP_LIVE,
    budget_bytes,
    incoming_bytes,
    parked_microbatches,
    planned_peak_bytes,
)
from sim.memory.peers import nvlink_peers, stripe
from sim.memory.plan import StagePlan, SwapParts
from sim.memory.search import Option, option
from sim.memory.stash import Stash, full_order, has_attn_core, stash

GROW = 1.25
"""Factor by which the peer bytes grow while the estimate still overflows."""


@dataclass(frozen=True)
class Base:
    """Model-state placement a candidate starts from.

    Attributes:
        plan: the resident plan (weights on the GPU: all versions, or one).
        extra_bytes: weight-version bytes per micro-batch moved into the stash (0 if none).
    """

    plan: StagePlan
    extra_bytes: float = 0.0


def bases(ctx: StageContext, weights: bool) -> list[Base]:
    """Every version resident; with ``weights`` and ``v > 1`` versions also one resident and the
    others in the stash (``(v - 1) * version_bytes * params / n`` per micro-batch)."""
    plan = resident_plan(ctx)
    out = [Base(plan)]
    if weights and ctx.weight_versions > 1:
        one = ctx.params * ctx.state.weight
        moved = plan.weight_bytes - one
        out.append(Base(replace(plan, weight_bytes=one), moved / max(ctx.in_flight, 1)))
    return out


def stashes(ctx: StageContext, recompute: str) -> list[Stash]:
    """Recompute choices: ``"any"`` (keep, selective, full of the best ``k`` layers, with and
    without selective on the rest) or ``"full"`` (every layer checkpointed)."""
    order = full_order(ctx)
    if recompute == "full":
        return [stash(ctx, full=order)]
    out, sel = [stash(ctx)], has_attn_core(ctx)
    if sel:
        out.append(stash(ctx, selective=True))
    for k in range(1, len(order) + 1):
        out.append(stash(ctx, full=order[:k]))
        if sel and k < len(order):
            out.append(stash(ctx, full=order[:k], selective=True))
    return out


def candidate(
    ctx: StageContext,
    st: Stash,
    base: Base,
    peers: list[tuple[str, float]],
    room: dict[str, float],
    reserved: float,
) -> Option:
    """The plan for ``st`` on ``base``: peer bytes (at most ``room`` per peer) until the planned
    peak fits ``budget - reserved``, then host swap for the rest."""
    local = option(ctx, st, base.plan, (), True, 0.0, base.extra_bytes, reserved)
    n, kept = ctx.in_flight, st.kept_bytes + base.extra_bytes
    budget = budget_bytes(ctx) - reserved
    if not peers or n <= SWAP_LIVE or (local.fits and local.added_s <= 0):
        return local
    alone = option(ctx, st, base.plan, (), False, 0.0, base.extra_bytes, reserved)
    excess = alone.peak_bytes - budget
    if excess <= 0:  # fits without swapping; peers can only replace a slower host swap
        return local
    y = min(kept, excess / (n - SWAP_LIVE))
    parts: SwapParts = ()
    while True:
        parts = stripe(y, peers, room)
        o = option(ctx, st, base.plan, parts, False, 0.0, base.extra_bytes, reserved)
        if o.fits or y >= kept or sum(b for _, b in parts) < y * (1 - 1e-6):
            break
        y = min(kept, y * GROW)
    best = option(ctx, st, base.plan, parts, True, 0.0, base.extra_bytes, reserved)
    if best.peak_bytes > budget and o.peak_bytes < best.peak_bytes:
        best = o
    return min((best, local), key=lambda c: c.key)


def local_option(ctx: StageContext, recompute: str, weights: bool, reserved: float = 0.0):
    """Step 1 of the module doc: ``(option, base)`` of the best plan without peers."""
    found = [
        (option(ctx, st, b.plan, (), True, 0.0, b.extra_bytes, reserved), b)
        for b in bases(ctx, weights)
        for st in stashes(ctx, recompute)
    ]
    return min(found, key=lambda ob: ob[0].key)


def plan_stages(
    contexts: list[StageContext],
    fixed: Sequence[tuple[StageContext, StagePlan]] = (),
    *,
    recompute: str = "any",
    weights: bool = False,
) -> list[tuple[Option, Base]]:
    """The planner of the module doc: ``(option, base)`` per context, in order.

    Args:
        contexts: the stage replicas to plan.
        fixed: stage replicas planned by other policies (they lend, never borrow).
        recompute: ``"any"`` or ``"full"`` (:func:`stashes`).
        weights: also try moving stashed weight versions (:func:`bases`).
    """
    chosen = [local_option(c, recompute, weights) for c in contexts]
    job = {c.gpu for c in contexts} | {c.gpu for c, _ in fixed}

    def spare() -> dict[str, float]:
        pairs = list(fixed) + [(c, o.plan) for c, (o, _) in zip(contexts, chosen, strict=True)]
        inc, out = incoming_bytes(pairs), {}
        for c, plan in pairs:
            out[c.gpu] = budget_bytes(c) - inc.get(c.gpu, 0.0) - planned_peak_bytes(plan, c)
        return out

    def urgency(i: int) -> tuple:
        o = chosen[i][0]
        return (o.fits, -(o.peak_bytes - budget_bytes(contexts[i])), -o.added_s)

    for i in sorted(range(len(contexts)), key=urgency):
        ctx, (cur, _) = contexts[i], chosen[i]
        if cur.fits and cur.added_s <= 0:
            continue
        free = spare()
        free.pop(ctx.gpu, None)
        hold = parked_microbatches(ctx)
        peers = nvlink_peers(ctx, job)
        room = {g: max(0.0, free.get(g, 0.0)) / hold for g, _ in peers}
        reserved = incoming_bytes(
            list(fixed) + [(c, o.plan) for c, (o, _) in zip(contexts, chosen, strict=True)]
        ).get(ctx.gpu, 0.0)
        found = [
            (candidate(ctx, st, b, peers, room, reserved), b)
            for b in bases(ctx, weights)
            for st in stashes(ctx, recompute)
        ]
        best = min(found, key=lambda ob: ob[0].key)
        if best[0].key < cur.key:
            chosen[i] = best
    return chosen


def peer_parts(plan: StagePlan) -> SwapParts:
    """The parts of ``plan``'s swap that go to peer GPUs."""
    return tuple((g, b) for g, b in plan.swap_parts if g.startswith("gpu"))

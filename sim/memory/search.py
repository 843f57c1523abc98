"""Per-stage search over recompute and host-swap choices: the cheapest that fits.

Used by ``d2d_swap`` (its fallback where peers have no room) and ``auto``. For a stage and a
fixed model-state placement (``base``) and fixed peer-swap parts, it tries every recompute choice
(keep; selective; full checkpointing of the ``k`` layers that save most bytes per second, for
every ``k``; each with selective on the rest) and, for each, the smallest host swap that brings
the planned peak under budget (vPipe's per-layer swap/recompute plan at stage granularity).
The cost is the estimated seconds added per iteration: ``m * (recompute_s + exposed swap)``
plus ``extra_s`` (the state placement's own cost).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.memory.compose import activation_plan, resident_plan
from sim.memory.context import StageContext
from sim.memory.estimate import SWAP_LIVE, budget_bytes, planned_peak_bytes, swap_exposed_s
from sim.memory.plan import StagePlan, SwapParts
from sim.memory.stash import Stash, full_order, has_attn_core, stash


@dataclass(frozen=True)
class Option:
    """One candidate plan for a stage.

    Attributes:
        plan: the plan.
        label: what it does, e.g. ``full:3+selective + cpu 1.2 GiB``.
        added_s: estimated seconds added per iteration.
        peak_bytes: planned peak (:func:`~sim.memory.estimate.planned_peak_bytes`).
        fits: the planned peak is within the budget.
        state: where model states live: ``gpu``, ``zero_offload`` or ``chunked``.
        state_s: the part of ``added_s`` the state placement costs.
    """

    plan: StagePlan
    label: str
    added_s: float
    peak_bytes: float
    fits: bool
    state: str = "gpu"
    state_s: float = 0.0

    @property
    def key(self) -> tuple:
        """Sort key: fitting first, then cheapest, then smallest peak."""
        return (not self.fits, self.added_s if self.fits else self.peak_bytes, self.peak_bytes)


def stash_choices(ctx: StageContext, recompute: bool = True) -> list[Stash]:
    """Keep, selective, and full checkpointing of the best ``k`` layers (with and without
    selective on the rest), for every ``k``."""
    out = [stash(ctx)]
    if not recompute:
        return out
    sel = has_attn_core(ctx)
    if sel:
        out.append(stash(ctx, selective=True))
    order = full_order(ctx)
    for k in range(1, len(order) + 1):
        out.append(stash(ctx, full=order[:k]))
        if sel and k < len(order):
            out.append(stash(ctx, full=order[:k], selective=True))
    return out


def _scaled(parts: SwapParts, limit: float) -> SwapParts:
    total = sum(b for _, b in parts)
    if total <= limit or total <= 0:
        return parts
    return tuple((n, b * limit / total) for n, b in parts)


def option(
    ctx: StageContext,
    st: Stash,
    base: StagePlan,
    parts: SwapParts = (),
    host_swap: bool = True,
    extra_s: float = 0.0,
    extra_kept: float = 0.0,
    reserved: float = 0.0,
) -> Option:
    """The plan for stash ``st`` (plus ``extra_kept`` bytes, e.g. stashed weight versions) with
    peer ``parts`` and, if allowed, the host swap needed; ``reserved`` bytes of the GPU are
    promised to other GPUs' swaps."""
    if extra_kept:
        st = replace(st, act_bytes=st.act_bytes + extra_kept, kept_bytes=st.kept_bytes + extra_kept)
    parts = _scaled(parts, st.kept_bytes)
    plan = activation_plan(ctx, st, parts, base)
    peak, budget, n = planned_peak_bytes(plan, ctx), budget_bytes(ctx) - reserved, ctx.in_flight
    label = st.label
    if peak > budget and host_swap and n > SWAP_LIVE:
        room = st.kept_bytes - sum(b for _, b in parts)
        y = host_swap_bytes(ctx, st, base, parts, room, peak - budget, budget)
        if y > 0:
            parts = parts + ((ctx.host, y),)
            plan = activation_plan(ctx, st, parts, base)
            peak = planned_peak_bytes(plan, ctx)
            label += f" + cpu_swap {y / max(st.kept_bytes, 1):.0%}"
    added = ctx.microbatches * (st.recompute_s + swap_exposed_s(ctx, parts)) + extra_s
    return Option(plan, label, added, peak, peak <= budget * (1 + 1e-9))


def host_swap_bytes(
    ctx: StageContext,
    st: Stash,
    base: StagePlan,
    parts: SwapParts,
    room: float,
    excess: float,
    budget: float,
) -> float:
    """Bytes per micro-batch to swap to the host so the peak drops ``excess`` bytes: ``excess /
    (n - 3)`` if copies keep up, more if they do not (:func:`~sim.memory.estimate.swap_live`);
    ``room`` if nothing smaller fits."""
    y = min(room, excess / (ctx.in_flight - SWAP_LIVE))
    while y < room:
        plan = activation_plan(ctx, st, parts + ((ctx.host, y),), base)
        if planned_peak_bytes(plan, ctx) <= budget:
            return y
        y = min(room, y * 1.25)
    return room


def best_option(
    ctx: StageContext,
    base: StagePlan | None = None,
    parts: SwapParts = (),
    host_swap: bool = True,
    recompute: bool = True,
    extra_s: float = 0.0,
    extra_kept: float = 0.0,
    reserved: float = 0.0,
) -> Option:
    """The cheapest fitting option, or the one with the smallest peak if none fits."""
    base = base or resident_plan(ctx)
    opts = [
        option(ctx, st, base, parts, host_swap, extra_s, extra_kept, reserved)
        for st in stash_choices(ctx, recompute)
    ]
    return min(opts, key=lambda o: o.key)

"""Policy ``d2d_swap`` (MPress, memory.md §5.3): park stashes in peer GPUs' spare memory.

Under 1F1B and PipeDream the early stages stash more micro-batches (``p - s``) than the late
ones, so late GPUs have spare memory; NVLink moves bytes several times faster than PCIe. For
each stage whose planned peak exceeds its budget (heaviest first), the policy computes the bytes
per micro-batch to move (``need / (n - 3)``, :mod:`sim.memory.estimate`), stripes them over the
NVLink peers with room (widest links first, in proportion to bandwidth, each capped by its spare
memory divided by ``n``), and reserves ``n * part`` on each peer. What peers cannot take falls
back to host swap or recompute, whichever the estimate says is cheaper (:mod:`sim.memory.search`).

``d2d_swap:weights`` also moves stashed weight versions (PipeDream keeps ``p - s``, 2BW 2): one
version stays; the others become part of the stash, ``(v - 1) * W / n`` per micro-batch (exact
for PipeDream, where each in-flight micro-batch owns a version; an average for 2BW).

Spare memory of a GPU = budget - its planned peak - bytes already reserved on it
(:func:`~sim.memory.estimate.spare_bytes`); the engine's ledger verifies it (category ``swap``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sim.memory.base import MemoryPolicy, StageContext
from sim.memory.compose import describe, gib, ms, note_reservations
from sim.memory.estimate import (
    SWAP_LIVE,
    budget_bytes,
    planned_peak_bytes,
    spare_bytes,
)
from sim.memory.peers import nvlink_peers, stripe
from sim.memory.plan import StagePlan
from sim.memory.search import best_option


class D2DSwapPolicy(MemoryPolicy):
    """Swap stashes to peer GPUs over NVLink, falling back to host swap or recompute.

    Args:
        weights: also move stashed weight versions with the stash.
    """

    name = "d2d_swap"
    description = "stash to peer GPUs with spare memory over NVLink (MPress), striped"
    cross_stage = True

    def __init__(self, weights: bool = False):
        self.weights = weights

    @classmethod
    def from_args(cls, args: list[str]) -> D2DSwapPolicy:
        if args not in ([], ["weights"]):
            raise ValueError(f"use d2d_swap or d2d_swap:weights, got {':'.join(args)!r}")
        return cls(weights=bool(args))

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]

    def base(self, ctx: StageContext) -> tuple[StagePlan, float]:
        """The resident plan and the bytes of stashed weight versions per micro-batch."""
        plan = ctx.resident_plan()
        if not self.weights or ctx.weight_versions <= 1:
            return plan, 0.0
        one = ctx.params * ctx.state.weight
        extra = (ctx.weight_versions - 1) * one / max(ctx.in_flight, 1)
        return replace(plan, weight_bytes=one), extra

    def plan_all(
        self, contexts: list[StageContext], fixed: Sequence[tuple[StageContext, StagePlan]] = ()
    ) -> list[StagePlan]:
        bases = [self.base(ctx) for ctx in contexts]
        pairs = list(fixed) + [(c, b) for c, (b, _) in zip(contexts, bases, strict=True)]
        spare = spare_bytes(pairs)
        job = {c.gpu for c, _ in pairs}
        need = [
            planned_peak_bytes(b, c) - budget_bytes(c) + c.in_flight * w
            for c, (b, w) in zip(contexts, bases, strict=True)
        ]
        plans: list[StagePlan | None] = [None] * len(contexts)
        for i in sorted(range(len(contexts)), key=lambda i: -need[i]):
            ctx, (base, extra) = contexts[i], bases[i]
            plans[i] = self.place(ctx, base, extra, need[i], spare, job)
        return note_reservations(contexts, plans, fixed)  # type: ignore[arg-type]

    def place(
        self,
        ctx: StageContext,
        base: StagePlan,
        extra: float,
        need: float,
        spare: dict[str, float],
        job: set[str],
    ) -> StagePlan:
        n = ctx.in_flight
        parts: tuple = ()
        if need > 0 and n > SWAP_LIVE:
            want = min(ctx.act_bytes + extra, need / (n - SWAP_LIVE))
            room = {g: max(0.0, spare.get(g, 0.0)) / n for g in job}
            parts = stripe(want, nvlink_peers(ctx, job), room)
        opt = best_option(ctx, base, parts, extra_kept=extra)
        used = opt.plan.swap_parts
        for g, b in used:
            if g.startswith("gpu"):
                spare[g] = spare.get(g, 0.0) - n * b
        on_peers = [(g, b) for g, b in used if g.startswith("gpu")]
        host = sum(b for g, b in used if not g.startswith("gpu"))
        choice = ("d2d + " + opt.label) if on_peers else opt.label
        return describe(
            ctx,
            opt.plan,
            choice,
            opt.added_s,
            peers_gib_per_microbatch={g: gib(b) for g, b in on_peers},
            reserved_on_peers_gib=gib(n * sum(b for _, b in on_peers)),
            host_swap_gib_per_microbatch=gib(host),
            weights_moved=bool(extra),
            added_ms_per_microbatch=ms(opt.added_s / max(ctx.microbatches, 1)),
        )

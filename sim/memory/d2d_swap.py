"""Policy ``d2d_swap`` (MPress, Zhou et al. HPCA'23; memory.md §5.3): fit the largest model by
parking activation stashes in peer GPUs' spare memory over NVLink, with recompute and host swap.

Under 1F1B and PipeDream the early stages stash more micro-batches (``p - s``) than the late
ones, so late GPUs have spare memory, and NVLink moves bytes several times faster than PCIe.
MPress's planner (:mod:`sim.memory.mpress`) gives each stage the mix of recompute, swap to its
NVLink peers (striped in proportion to link bandwidth, each peer capped by what it has free
after its own planned peak) and swap to the host that fits first and then costs least.

``d2d_swap:weights`` also tries moving stashed weight versions (PipeDream keeps ``p - s``, 2BW
2) with the stash; keeping them is always a candidate too, so it fits whenever ``d2d_swap``
(and ``none``) does. ``d2d_swap+recompute`` (:mod:`sim.memory.d2d_recompute`) checkpoints every
layer and swaps the checkpoints.

Notes per stage: the choice, peers and GiB parked per micro-batch on each, the host share, what
the stage's GPU holds for its peers, and whether weight versions moved. The engine's ledger
verifies every plan (category ``swap`` on the peers).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.base import MemoryPolicy
from sim.memory.compose import describe, gib, ms, note_reservations
from sim.memory.context import StageContext
from sim.memory.estimate import parked_microbatches
from sim.memory.mpress import Base, peer_parts, plan_stages
from sim.memory.plan import StagePlan
from sim.memory.search import Option
from sim.memory.states import StateBytes


class D2DSwapPolicy(MemoryPolicy):
    """MPress: recompute, peer swap over NVLink and host swap, per stage, fitting first.

    Args:
        weights: also try moving stashed weight versions with the stash.

    Example:
        >>> from sim.memory.registry import parse_policy
        >>> parse_policy("d2d_swap:weights").weights, parse_policy("d2d_swap").recompute
        (True, 'any')
    """

    name = "d2d_swap"
    description = "MPress: stash to peer GPUs' spare memory over NVLink, + recompute / host swap"
    cross_stage = True
    recompute: str = "any"
    """Recompute choices the planner may take (:func:`sim.memory.mpress.stashes`)."""

    def __init__(self, weights: bool = False):
        self.weights = weights

    @classmethod
    def from_args(cls, args: list[str]) -> D2DSwapPolicy:
        if args not in ([], ["weights"]):
            raise ValueError(f"use {cls.name} or {cls.name}:weights, got {':'.join(args)!r}")
        return cls(weights=bool(args))

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """One weight version, its gradient and optimizer state stay on the GPU (only stashes
        and, with ``:weights``, the extra weight versions move)."""
        return float(states.total)

    def plan_all(
        self, contexts: list[StageContext], fixed: Sequence[tuple[StageContext, StagePlan]] = ()
    ) -> list[StagePlan]:
        chosen = plan_stages(contexts, fixed, recompute=self.recompute, weights=self.weights)
        plans = [self.note(c, o, b) for c, (o, b) in zip(contexts, chosen, strict=True)]
        return note_reservations(contexts, plans, fixed)

    def note(self, ctx: StageContext, opt: Option, base: Base) -> StagePlan:
        """``opt``'s plan with the notes of the module doc."""
        on_peers = peer_parts(opt.plan)
        host = sum(b for g, b in opt.plan.swap_parts if not g.startswith("gpu"))
        choice = ("d2d + " + opt.label) if on_peers else opt.label
        return describe(
            ctx,
            opt.plan,
            choice,
            opt.added_s,
            peers_gib_per_microbatch={g: gib(b) for g, b in on_peers},
            reserved_on_peers_gib=gib(parked_microbatches(ctx) * sum(b for _, b in on_peers)),
            host_swap_gib_per_microbatch=gib(host),
            weights_moved=bool(base.extra_bytes),
            added_ms_per_microbatch=ms(opt.added_s / max(ctx.microbatches, 1)),
        )

"""The activation side of a GPU's peak, walking its pipeline rank's actions in program order
(:mod:`sim.memory.rank_memory`'s module doc, "activations", "working", "buffers" and FSDP's
unsharded bytes): each forward adds its stage's kept stash, each backward that ends a
micro-batch frees the oldest one of its stage (:func:`activation_peak`); the kept stash alone,
the floor the planner's bound counts (:func:`kept_peak`). Bytes throughout."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sim.memory.context import StageContext
from sim.memory.estimate import swap_live
from sim.memory.fsdp_inflight import (
    NONE,
    FsdpBytes,
    FsdpState,
    after,
    backward_peak,
    forward_peak,
    kept_bytes,
)
from sim.memory.overlapped import overlapped_stash_peak
from sim.memory.plan import StagePlan

BACKWARD_OPS = ("B", "I", "W")
DONE_OPS = ("B", "W")
"""Ops that end a micro-batch's stay on a stage (a split backward ends at W)."""

Pair = tuple[StageContext, StagePlan]


def stage_transients(ctx: StageContext, plan: StagePlan) -> tuple[float, float]:
    """``(forward, backward)`` bytes a stage's action holds beyond its full kept stash.

    Layer ``l`` runs its forward with the stashes of the layers before it live and allocates
    its transient ``F_l``; its backward runs after the layers behind it have freed theirs and
    holds ``W_l``: relative to the whole kept stash of the micro-batch that is
    ``F_l - K_{>l}`` and ``W_l - K_{>l}``, ``K_{>l}`` the kept stash of the layers after it
    (:class:`~sim.memory.layer_work.LayerWork`); the largest over the stage, at least 0.
    """
    kept = plan.resident_act_bytes / plan.act_bytes if plan.act_bytes > 0 else 1.0
    after, fwd, bwd = 0.0, 0.0, 0.0
    for layer, work in zip(reversed(ctx.layers), reversed(ctx.layer_work), strict=True):
        fwd = max(fwd, work.fwd_bytes - after)
        bwd = max(bwd, work.bwd_bytes - after)
        after += layer.act_bytes * kept
    return fwd, bwd


def output_cache(ctx: StageContext) -> float:
    """Stage outputs a framework keeps from a forward to its backward (torch pipelining's
    ``fwd_cache``), ``in_flight x out_bytes``; 0 where outputs are freed once sent."""
    if ctx.framework.deallocate_outputs:
        return 0.0
    return ctx.in_flight * ctx.out_bytes


def _moving(ctx: StageContext, plan: StagePlan) -> float:
    """Bytes an action of the stage has on the GPU besides its stash: swapped stashes in
    transit (:func:`~sim.memory.estimate.swap_live`), fetched chunks and gathered parameters
    (the next action's prefetched)."""
    return (
        swap_live(ctx, plan.swap_parts) * plan.swap_bytes
        + 2 * plan.fetch_live
        + (2 * plan.gather_live if ctx.dp_width > 1 else 0.0)
    )


@dataclass(frozen=True)
class ActivationPeak:
    """The activation side of a rank's peak, bytes: ``activations`` (stashes in flight, the
    running action's rebuilt bytes, swaps and chunks in transit), ``working`` (its transient,
    cached outputs) and ``buffers`` (pipeline receive and send buffers), at ``at``; ``fsdp``:
    FSDP's unsharded bytes then (:mod:`sim.memory.fsdp_inflight`)."""

    activations: float
    working: float
    buffers: float
    at: str
    fsdp: FsdpBytes = NONE

    @property
    def total(self) -> float:
        return self.activations + self.working + self.buffers + self.fsdp.total


def _fsdp_now(pairs_by_stage: dict, states: dict, stage: int, op: str) -> FsdpBytes:
    """FSDP's bytes while ``stage`` runs ``op``: its action's largest moment and what the
    rank's other stages keep."""
    out = NONE
    for s, (_, plan) in pairs_by_stage.items():
        fs = plan.fsdp
        if fs is None:
            continue
        if s != stage:
            out = out + kept_bytes(fs, states[s])
        elif op == "F":
            out = out + forward_peak(fs, states[s])
        else:
            out = out + backward_peak(fs, states[s])
    return out


def _pair_stash(fwd: StagePlan, bwd: StagePlan, bwd_kept: float) -> float:
    """Kept bytes a combined step's two micro-batches hold at its largest moment
    (:func:`~sim.memory.overlapped.overlapped_stash_peak` over the plans' layer shares)."""
    kept = fwd.resident_act_bytes
    if not fwd.layer_shares or not bwd.layer_shares:
        return kept + bwd_kept
    return overlapped_stash_peak(
        [kept * x for x in fwd.layer_shares], [bwd_kept * x for x in bwd.layer_shares]
    )


def activation_peak(pairs: Sequence[Pair]) -> ActivationPeak:
    """Walk the rank's actions (module doc) and return the largest moment; a combined step
    (``StageContext.overlapped``) is one moment with its two stashes layer by layer."""
    by_stage = {ctx.stage: (ctx, plan) for ctx, plan in pairs}
    extra = {s: stage_transients(c, p) for s, (c, p) in by_stage.items()}
    cache = sum(output_cache(c) for c, _ in pairs)
    ops = pairs[0][0].ops or tuple((s, op, 0) for s in by_stage for op in ("F", "B"))
    overlapped = pairs[0][0].overlapped
    live: dict[int, deque[float]] = {s: deque() for s in by_stage}
    states = {s: FsdpState() for s in by_stage}
    # fixed per stage over the walk: computed once, not per action
    moving = {s: _moving(c, p) for s, (c, p) in by_stage.items()}
    rebuild = {s: p.rebuild_bytes for s, (_, p) in by_stage.items()}
    fsdp_any = any(p.fsdp is not None for _, p in by_stage.values())
    total = 0.0
    best = ActivationPeak(0.0, 0.0, 0.0, "")
    for i, (stage, op, _) in enumerate(ops):
        if stage not in by_stage or (op != "F" and op not in BACKWARD_OPS):
            continue
        ctx, plan = by_stage[stage]
        fsdp = _fsdp_now(by_stage, states, stage, op) if fsdp_any else NONE
        at = ""  # the moment's label; empty: no candidate (the sum it would have is t)
        if op == "F" and i in overlapped and ops[i + 1][0] in by_stage:
            bctx, bplan = by_stage[ops[i + 1][0]]
            bkept = live[bctx.stage][0] if live[bctx.stage] else 0.0
            acts = total - bkept + _pair_stash(plan, bplan, bkept) + moving[stage]
            acts += rebuild[stage] + rebuild[bctx.stage]
            work = max(extra[stage][0], extra[bctx.stage][1]) + cache
            held = ctx.input_bytes + bctx.out_bytes + bctx.input_bytes
            at = f"{stage}F+{bctx.stage}B"
            live[stage].append(plan.resident_act_bytes)
            total += plan.resident_act_bytes
        elif op == "F":
            kept = plan.resident_act_bytes
            acts = total + kept + rebuild[stage] + moving[stage]
            work, held, at = extra[stage][0] + cache, ctx.input_bytes, f"{stage}F"
            live[stage].append(kept)
            total += kept
        else:
            acts = total + rebuild[stage] + moving[stage]
            work, held = extra[stage][1] + cache, ctx.out_bytes + ctx.input_bytes
            if i - 1 not in overlapped:  # the second half of a combined step: counted with it
                at = f"{stage}{op}"
            if op in DONE_OPS and live[stage]:
                total -= live[stage].popleft()
        if plan.fsdp is not None:
            states[stage] = after(plan.fsdp, states[stage], op, op in DONE_OPS)
        # ActivationPeak.total's sum, in its order: built only when it is the largest yet
        if at and acts + work + held + fsdp.total > best.total:
            best = ActivationPeak(acts, work, held, at, fsdp)
    return best


def kept_peak(
    ops: Iterable[tuple[int, str]],
    plans: dict[int, StagePlan],
    overlapped: frozenset[int] = frozenset(),
) -> float:
    """The largest kept stash (plus the running action's rebuilt bytes) a rank holds over
    ``ops`` (``(stage, op)`` in program order; stages not in ``plans`` are skipped): each
    forward keeps its stage's ``resident_act_bytes`` until the backward that ends its
    micro-batch (a combined step at a position in ``overlapped`` holds its two stashes layer
    by layer, :mod:`sim.memory.overlapped`). The engine's ledger holds at least this much
    besides its charges at t = 0 at
    those moments (a forward allocates its kept, swapped and rebuilt bytes, a backward its
    rebuilt ones), so the planner's memory floor counts it
    (:attr:`sim.memory.rank_memory.RankMemory.floor_bytes`).

    Example:
        >>> plans = {0: StagePlan(act_bytes=4.0, resident_act_bytes=4.0)}
        >>> kept_peak([(0, "F"), (0, "F"), (0, "B"), (0, "F"), (0, "B")], plans)
        8.0
    """
    live: dict[int, deque[float]] = {s: deque() for s in plans}
    rebuild = {s: p.rebuild_bytes for s, p in plans.items()}  # once per stage, not per op
    total = best = 0.0
    seq = list(ops)
    for i, (stage, op) in enumerate(seq):
        plan = plans.get(stage)
        if plan is None:
            continue
        paired = i in overlapped and seq[i + 1][0] in plans
        if op == "F" and paired and plan.layer_shares and plans[seq[i + 1][0]].layer_shares:
            other = plans[seq[i + 1][0]]
            bkept = live[seq[i + 1][0]][0] if live[seq[i + 1][0]] else 0.0
            pair = _pair_stash(plan, other, bkept) - bkept
            best = max(best, total + pair + rebuild[stage] + rebuild[seq[i + 1][0]])
            total += plan.resident_act_bytes
            live[stage].append(plan.resident_act_bytes)
        elif op == "F":
            total += plan.resident_act_bytes
            live[stage].append(plan.resident_act_bytes)
            best = max(best, total + rebuild[stage])
        elif op in BACKWARD_OPS:
            if i - 1 not in overlapped or not plan.layer_shares:
                best = max(best, total + rebuild[stage])
            if op in DONE_OPS and live[stage]:
                total -= live[stage].popleft()
    return best

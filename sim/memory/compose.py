"""Build a :class:`StagePlan` from a stash choice, swap parts and model-state placement."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.memory.context import StageContext
from sim.memory.estimate import (
    HEADROOM,
    activation_peak_bytes,
    budget_bytes,
    host_bytes,
    incoming_bytes,
    planned_peak_bytes,
)
from sim.memory.plan import StagePlan, SwapParts
from sim.memory.reserve import overhead
from sim.memory.stash import Stash
from sim.memory.states import measured_step_s, optimizer_step_s, weight_bytes_per_param

GiB = 2.0**30


def resident_plan(ctx: StageContext, **changes: Any) -> StagePlan:
    """The plan with everything on the GPU (policy ``none``): every weight version, gradient,
    optimizer state and stash, plus the stage's overhead (:func:`sim.memory.reserve.overhead`);
    ``changes`` replace fields of it."""
    p, trained = ctx.params, ctx.trainable_params
    over = overhead(ctx)
    plan = StagePlan(
        act_bytes=ctx.act_bytes,
        resident_act_bytes=ctx.act_bytes,
        weight_bytes=p * weight_bytes_per_param(ctx.state, ctx.weight_versions, ctx.version_bytes),
        grad_bytes=trained * ctx.state.grad,
        optimizer_bytes=trained * ctx.state.optimizer,
        optimizer_s=stage_step_s(ctx),
        reserve_bytes=over["reserve_bytes"],
        allocator_bytes=over["allocator_bytes"],
        working_bytes=over["working_bytes"],
    )
    return replace(plan, **changes) if changes else plan


def stage_step_s(ctx: StageContext) -> float:
    """Seconds of the stage's optimizer update on its GPU: the measured cost of
    ``ctx.optimizer`` when the hardware has one (:func:`~sim.memory.states.measured_step_s`
    over the stage's parameter tensors and bytes), else the memory-bound estimate
    (:func:`~sim.memory.states.optimizer_step_s`)."""
    gpu = ctx.topology.gpu(ctx.gpu_index)
    cost = gpu.step_cost(ctx.optimizer)
    if cost is None:
        return optimizer_step_s(ctx.trainable_params, gpu.hbm_bandwidth_Bps, ctx.state)
    return measured_step_s(ctx.param_tensors, ctx.trainable_params * ctx.dtype_bytes, *cost)


def activation_plan(
    ctx: StageContext, st: Stash, parts: SwapParts = (), base: StagePlan | None = None
) -> StagePlan:
    """``base`` (default: everything resident) with the stash ``st`` and ``parts`` of its kept
    bytes swapped out per micro-batch.

    Raises:
        ValueError: the parts swap more than the kept bytes.
    """
    base = base or resident_plan(ctx)
    parts = tuple((n, b) for n, b in parts if b > 0)
    swap = sum(b for _, b in parts)
    if swap > st.kept_bytes * (1 + 1e-9):
        raise ValueError(f"swapping {swap} bytes of a {st.kept_bytes}-byte stash")
    single = len(parts) == 1
    return replace(
        base,
        act_bytes=st.act_bytes,
        resident_act_bytes=max(0.0, st.kept_bytes - swap),
        swap_bytes=swap,
        swap_target=parts[0][0] if single else None,
        swap_targets=() if single else parts,
        recompute_s=st.recompute_s,
        recompute_ops=st.recompute_ops,
        recompute_regions=len(st.full_layers) + len(st.selective_layers),
        recompute_layers=st.full_layers,
        transient_bytes=st.transient_bytes if st.dropped_bytes > 0 else None,
    )


def gib(nbytes: float) -> float:
    """Bytes as GiB rounded for notes."""
    return round(nbytes / GiB, 3)


def ms(seconds: float) -> float:
    """Seconds as milliseconds rounded for notes."""
    return round(seconds * 1e3, 3)


def describe(ctx: StageContext, plan: StagePlan, choice: str, added_s: float, **extra) -> StagePlan:
    """``plan`` with notes: the choice, GiB saved on the planned peak (vs. everything
    resident), seconds added per iteration (estimate), planned peak and whether it fits."""

    peak = planned_peak_bytes(plan, ctx)
    saved = planned_peak_bytes(resident_plan(ctx), ctx) - peak
    notes = {
        "choice": choice,
        "saved_gib": gib(saved),
        "added_ms": ms(added_s),
        "peak_gib": gib(peak),
        "fits": bool(peak <= budget_bytes(ctx)),
        **extra,
    }
    return replace(plan, notes=notes)


def note_reservations(
    contexts: list[StageContext], plans: list[StagePlan], fixed=()
) -> list[StagePlan]:
    """``plans`` whose GPUs hold peers' swapped bytes, with ``reserved_for_peers_gib`` in their
    notes and ``fits`` re-checked with those bytes."""

    inc = incoming_bytes(list(fixed) + list(zip(contexts, plans, strict=True)))
    out = []
    for ctx, plan in zip(contexts, plans, strict=True):
        got = inc.get(ctx.gpu, 0.0)
        if got > 0:
            fits = planned_peak_bytes(plan, ctx) + got <= budget_bytes(ctx) * (1 + 1e-9)
            plan = replace(
                plan,
                notes={
                    **plan.notes,
                    "reserved_for_peers_gib": gib(got),
                    "fits": bool(fits and plan.notes.get("fits", True)),
                },
            )
        out.append(plan)
    return out


def note_host_capacity(contexts: list[StageContext], plans: list[StagePlan]) -> list[StagePlan]:
    """``plans`` whose server's host DRAM cannot hold what all its ranks offload and swap,
    marked ``fits: False`` with a warning (the ledger will show the pool ``host`` over capacity).

    Host DRAM is one pool per server, shared by the ranks of every socket (the engine's ledger
    pools the sockets, :class:`sim.ledger.Ledger`): two replicas whose host state each fits
    alone may not fit together."""

    used = sum(host_bytes(c, p) for c, p in zip(contexts, plans, strict=True))
    out = []
    for ctx, plan in zip(contexts, plans, strict=True):
        cap = ctx.topology.host_dram_bytes
        if plan.notes and host_bytes(ctx, plan) > 0 and used > cap * (1 - HEADROOM):
            plan = replace(
                plan,
                notes={
                    **plan.notes,
                    "fits": False,
                    "host_gib": gib(used),
                    "warning": f"the server's host DRAM ({gib(cap)} GiB) cannot hold what "
                    "its ranks offload and swap",
                },
            )
        out.append(plan)
    return out


def finalize_plans(contexts: list[StageContext], plans: list[StagePlan]) -> list[StagePlan]:
    """The plans the engine runs: each plan's allocator margin and DDP buckets recomputed for
    what the policy chose (its activation memory, its GPU-resident gradients; planning used the
    everything-resident values; a plan with ``grad_bucket_bytes`` (ZeRO) counts that bucket
    instead of DDP's copy of the gradients), then :func:`note_host_capacity`."""
    out = []
    for ctx, plan in zip(contexts, plans, strict=True):
        bucket = plan.grad_bucket_bytes
        over = overhead(
            ctx, activation_peak_bytes(plan, ctx), plan.grad_bytes if bucket is None else 0.0
        )
        if bucket is not None and over["working_bytes"] > 0:
            over["working_bytes"] += bucket  # ZeRO's reduce bucket instead of DDP's copy
        out.append(replace(plan, **over))  # type: ignore[arg-type]
    return note_host_capacity(contexts, out)

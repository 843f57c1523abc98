"""Build a :class:`StagePlan` from a stash choice, swap parts and model-state placement."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.memory.base import MemoryPolicy
from sim.memory.context import StageContext
from sim.memory.estimate import (
    HEADROOM,
    activation_peak_bytes,
    budget_bytes,
    host_bytes,
    incoming_bytes,
    planned_peak_bytes,
)
from sim.memory.flat_reduce import reduce_bucket_bytes
from sim.memory.overlapped import layer_shares
from sim.memory.plan import StagePlan, SwapParts
from sim.memory.rank_memory import (
    framework_buffer_bytes,
    output_cache,
    rank_memory,
    stage_transients,
)
from sim.memory.reserve import overhead, runtime_reserve_bytes
from sim.memory.stash import Stash
from sim.memory.states import measured_step_s, optimizer_step_s, weight_bytes_per_param
from sim.memory.tensor_program import allocator_margin_bytes

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
        framework_buffer_bytes=over["framework_buffer_bytes"],
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
        return optimizer_step_s(ctx.trainable_params, gpu.memory_bound_Bps, ctx.state)
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


def finalize_plans(
    contexts: list[StageContext], plans: list[StagePlan], *, replay: bool = True
) -> list[StagePlan]:
    """The plans the engine runs, with what each GPU's process holds besides its stashes
    computed for what the policies chose (planning used the everything-resident values), by
    the rank model (:mod:`sim.memory.rank_memory`) over the stage chunks each GPU runs: the
    runtime reserve, the framework's buffers (DDP's copy of the GPU-resident gradients, or a
    plan's own ``grad_bucket_bytes``: ZeRO's), the working memory of its largest action and
    the caching allocator's margin (a replay of the rank's tensors). They are charged once per
    GPU, on its first chunk (the others get 0). A stage running Megatron's combined 1F1B
    gets its layers' shares of the stash (:mod:`sim.memory.overlapped`). Then
    :func:`note_host_capacity`. ``replay=False``: a margin of 0 where the allocator replay
    would give it (:func:`gpu_charges`)."""
    by_gpu: dict[str, list[int]] = {}
    for i, ctx in enumerate(contexts):
        by_gpu.setdefault(ctx.gpu, []).append(i)
    out = [
        replace(p, layer_shares=layer_shares(c.layers)) if c.overlapped else p
        for c, p in zip(contexts, plans, strict=True)
    ]
    plans = list(out)
    for idx in by_gpu.values():
        pairs = [(contexts[i], plans[i]) for i in idx]
        charges = gpu_charges(pairs, replay=replay)
        for k, i in enumerate(idx):
            own = charges if k == 0 else dict.fromkeys(charges, 0.0)
            out[i] = replace(plans[i], **own)  # type: ignore[arg-type]
    return note_host_capacity(contexts, out)


def replayable(plan: StagePlan) -> bool:
    """Whether the allocator replay's tensor program (:func:`sim.memory.rank_memory.
    tensor_program`) describes ``plan``'s tensors: model states on its GPU, stashes kept,
    recomputed or swapped out and back. Chunks, offloaded states and partitioned parameters
    move tensors the program does not have (their systems manage those buffers themselves:
    PatrickStar's chunks, ZeRO's gather buffers); their margin stays the planning estimate
    (:meth:`~sim.hardware.capacity.RuntimeReserve.allocator_bytes`)."""
    moves_states = (
        plan.fetch_bytes > 0
        or plan.writeback_bytes > 0
        or plan.host_bytes > 0
        or plan.host_optimizer_s > 0
        or bool(plan.step_transfers_before or plan.step_transfers_after)
    )
    return not moves_states and plan.gather_bytes == 0 and plan.scatter_bytes == 0


def gpu_charges(
    pairs: list[tuple[StageContext, StagePlan]], *, replay: bool = True
) -> dict[str, float]:
    """``reserve_bytes, working_bytes, framework_buffer_bytes, reduce_bucket_bytes,
    allocator_bytes`` of the GPU
    running ``pairs`` (module doc of :mod:`sim.memory.rank_memory`). ``replay=False``: an
    ``allocator_bytes`` of 0 where the allocator replay would give it (the replay's margin is
    at least 0, so the GPU's bytes are a lower bound: ``sim memory``'s advice rules a change
    out with it, :func:`sim.point.memory.point_memory`), the rest as with it."""
    ctx0 = pairs[0][0]
    rv = ctx0.topology.gpu(ctx0.gpu_index).reserve
    working = 0.0
    if rv.working:
        working = max(max(stage_transients(c, p)) + output_cache(c) for c, p in pairs)
    charged = [
        replace(
            p,
            reserve_bytes=runtime_reserve_bytes(c) if k == 0 else 0.0,
            framework_buffer_bytes=framework_buffer_bytes(pairs) if k == 0 else 0.0,
            working_bytes=0.0,
            allocator_bytes=0.0,
        )
        for k, (c, p) in enumerate(pairs)
    ]
    if rv.replays_allocator and all(replayable(p) for _, p in pairs):
        margin = 0.0
        if replay:
            margin = allocator_margin_bytes(list(zip([c for c, _ in pairs], charged, strict=True)))
    else:
        margin = sum(rv.allocator_bytes(activation_peak_bytes(p, c)) for c, p in pairs)
    return {
        "reserve_bytes": charged[0].reserve_bytes,
        "framework_buffer_bytes": charged[0].framework_buffer_bytes,
        "reduce_bucket_bytes": reduce_bucket_bytes(pairs),
        "working_bytes": working,
        "allocator_bytes": margin,
    }


REFIT_ROUNDS = 2
"""Times :func:`plan_to_fit` plans again with a smaller capacity."""


def plan_to_fit(
    policy: MemoryPolicy, contexts: list[StageContext], *, replay: bool = True
) -> list[StagePlan]:
    """The policy's finalized plans, planned again where they overflow a GPU.

    A policy plans against the estimate (:mod:`sim.memory.estimate`, with the allocator's
    planning margin); the finalized plan's peak (:func:`sim.memory.rank_memory.rank_memory`,
    the allocator replay's margin, plus what peers park on the GPU) can exceed what it
    estimated. A policy that sizes its plan to the memory it has (MPress's planner, ``auto``,
    PatrickStar's tracer, which measure with the real allocator) then plans again as if each
    GPU had that much less, up to :data:`REFIT_ROUNDS` times (only where the policy thought its
    plan fits and the overshoot is an estimate's, :func:`_overshoot`); a policy whose plan does
    not depend on the capacity gives the same plans and is left as it is. ``replay``: see
    :func:`finalize_plans`.
    """
    raw = policy.plan_all(contexts)
    plans = finalize_plans(contexts, raw, replay=replay)
    for _ in range(REFIT_ROUNDS):
        over = _overshoot(contexts, plans)
        if not over:
            break
        shrunk = [
            replace(c, capacity_bytes=c.capacity_bytes - over.get(c.gpu, 0.0)) for c in contexts
        ]
        again = policy.plan_all(shrunk)
        if again == raw:  # the plan does not depend on the capacity
            break
        raw, plans = again, finalize_plans(contexts, again, replay=replay)
    return plans


REFIT_MAX = 0.1
"""Largest overshoot (share of the capacity) :func:`plan_to_fit` corrects: the estimate's
error, not a plan that cannot fit."""


def _overshoot(contexts: list[StageContext], plans: list[StagePlan]) -> dict[str, float]:
    """Bytes each GPU's finalized peak (with what peers park on it) exceeds its capacity, for
    the GPUs whose plans all say they fit (their notes) and by at most :data:`REFIT_MAX` of it."""
    by_gpu: dict[str, list[tuple[StageContext, StagePlan]]] = {}
    for ctx, plan in zip(contexts, plans, strict=True):
        by_gpu.setdefault(ctx.gpu, []).append((ctx, plan))
    parked = incoming_bytes(zip(contexts, plans, strict=True))
    out = {}
    for gpu, pairs in by_gpu.items():
        if not all(p.notes.get("fits", True) for _, p in pairs):
            continue
        cap = pairs[0][0].capacity_bytes
        over = rank_memory(pairs).device_bytes + parked.get(gpu, 0.0) - cap
        if 0 < over <= REFIT_MAX * cap:
            out[gpu] = over
    return out

"""A GPU's peak memory by category, without simulating time: the one memory model.

``sim memory``, the planner's memory bound and the charges the engine's ledger makes at t = 0
(:func:`sim.memory.compose.finalize_plans`) all come from here, so they agree. A GPU runs one
or several stage chunks of one pipeline rank (``pairs``: each chunk's
:class:`~sim.memory.context.StageContext` and finalized :class:`~sim.memory.plan.StagePlan`).
Its peak is

``model states + framework buffers + max over the rank's actions of (stashes in flight + the
running action's transient + pipeline buffers) + reserved-but-unallocated + runtime reserve``

* **model states** (``weights``, ``gradients``, ``optimizer``): the plans' GPU bytes, allocated
  once before the first iteration and kept;
* **framework buffers** (``framework``): :func:`framework_buffer_bytes`;
* **activations**: walking the rank's actions over an iteration in program order
  (``StageContext.ops``), each forward adds its stage's kept stash and each backward (``B``,
  or ``W`` of a split backward) frees the oldest one of its stage: :func:`activation_peak`;
* **working**: while an action runs, its layers' transients beyond the stash
  (:func:`stage_transients`), and the pipeline output cache of a framework that keeps stage outputs (:func:`output_cache`);
  the rebuilt bytes of recomputed layers (``StagePlan.rebuild_bytes``) count as activations;
* **buffers**: the stage input received for a forward and the output gradient for a backward,
  and the input gradient held until it is sent;
* **FSDP's unsharded bytes** (a plan with FSDP units): the running action's unsharded
  parameters (``weights``), all-gather outputs (``buffers``), gradients and reduce-scatter
  inputs (``gradients``) at its largest moment, and what each stage keeps between actions
  (:mod:`sim.memory.fsdp_inflight`);
* **allocator**: what PyTorch's caching allocator reserves beyond the allocated bytes
  (:func:`sim.memory.tensor_program.allocator_margin_bytes`, a replay of the rank's tensors
  through :mod:`sim.memory.allocator`);
* **reserve**: the CUDA context and NCCL's buffers, outside PyTorch's allocator
  (:func:`sim.memory.reserve.runtime_reserve_bytes`).

``allocated`` (what ``torch.cuda.max_memory_allocated`` reports) is every category but the last
two; ``reserved`` (``max_memory_reserved``) adds ``allocator``; ``device`` adds ``reserve``; the
fit verdict compares ``device`` with the GPU's usable capacity.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sim.memory.context import StageContext
from sim.memory.cublas_workspace import torch_cublas_bytes
from sim.memory.estimate import swap_live
from sim.memory.framework_memory import dummy_wgrad_bytes
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

ALLOCATED = (
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "working",
    "buffers",
    "framework",
)
"""Categories PyTorch's allocator hands out (``max_memory_allocated`` counts them)."""
CATEGORIES = (*ALLOCATED, "allocator", "reserve")
"""Every category of a GPU's peak: the allocated ones, the allocator's unallocated reserved
bytes, the runtime reserve outside the allocator."""

BACKWARD_OPS = ("B", "I", "W")
DONE_OPS = ("B", "W")
"""Ops that end a micro-batch's stay on a stage (a split backward ends at W)."""

Pair = tuple[StageContext, StagePlan]


@dataclass(frozen=True)
class RankMemory:
    """One GPU's peak (module doc).

    Attributes:
        gpu: its node name.
        stages: the stage chunks it runs.
        by_category: bytes of each of :data:`CATEGORIES` at the peak.
        capacity_bytes: its usable capacity.
        peak_at: the action the peak falls in (``"3B"``: the backward of stage 3).
        floor_bytes: what the engine's ledger surely reaches on this GPU: its charges at
            t = 0 (model states, framework buffers, working memory, allocator margin, runtime
            reserve) and the largest kept stash (:func:`kept_peak`); the planner's memory
            bound (:mod:`sim.plan.bounds`).
    """

    gpu: str
    stages: tuple[int, ...]
    by_category: dict[str, float] = field(default_factory=dict)
    capacity_bytes: float = 0.0
    peak_at: str = ""
    floor_bytes: float = 0.0

    @property
    def allocated_bytes(self) -> float:
        """What ``torch.cuda.max_memory_allocated`` reports."""
        return sum(self.by_category.get(c, 0.0) for c in ALLOCATED)

    @property
    def reserved_bytes(self) -> float:
        """What ``torch.cuda.max_memory_reserved`` reports."""
        return self.allocated_bytes + self.by_category.get("allocator", 0.0)

    @property
    def device_bytes(self) -> float:
        """Everything the process holds on the GPU (``reserved`` + runtime reserve)."""
        return self.reserved_bytes + self.by_category.get("reserve", 0.0)

    @property
    def headroom_bytes(self) -> float:
        """``capacity - device`` (negative: it does not fit)."""
        return self.capacity_bytes - self.device_bytes

    @property
    def fits(self) -> bool:
        return self.headroom_bytes >= 0


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
    rebuilt ones), so the planner's memory floor counts it (:attr:`RankMemory.floor_bytes`).

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


BUFFERS_SOURCE = (
    "framework buffers: the framework profile's GEMM workspaces (Transformer Engine's "
    "get_cublas_workspace, transformer_engine/pytorch/cpp_extensions/gemm.py; PyTorch's two "
    "CUBLAS_WORKSPACE_CONFIG-sized cuBLAS workspaces), TE's dummy weight gradients "
    "(get_dummy_wgrad), deferred output-layer weight gradients and gradient buckets (DDP's "
    "bucket copy, ZeRO's reduce bucket) (sim.memory.rank_memory.framework_buffer_bytes; "
    "sim.memory.framework_memory); with a chunked (PatrickStar) policy also the GPU share "
    "its memory tracer keeps out of reach, 1 - overall_gpu_mem_ratio (sim.memory.memtracer)"
)
"""Where :func:`framework_buffer_bytes` (the ``framework`` category of a GPU's peak) comes
from, for ``results.csv``'s ``peak_reserve_source`` (:func:`sim.plan.point_row.peak_reserve_source`)."""


def framework_buffer_bytes(pairs: Sequence[Pair]) -> float:
    """Bytes of the framework's own persistent buffers on the GPU: Transformer Engine's dummy
    weight gradients (one per weight shape over every chunk, :func:`~sim.memory.
    framework_memory.dummy_wgrad_bytes`), GEMM workspaces allocated through PyTorch (TE's,
    and PyTorch's cuBLAS workspaces of the forward's and autograd's threads, each
    ``CUBLAS_WORKSPACE_CONFIG``'s size or ``RuntimeReserve.cublas_workspace_bytes``:
    :func:`~sim.memory.cublas_workspace.torch_cublas_bytes`), the output layer's deferred
    weight-gradient buffers (:func:`deferred_wgrad_bytes`), and the gradient-reduction
    buffers: DDP's bucket copy of the
    GPU gradients with data parallelism, or a plan's own bucket (ZeRO's
    ``grad_bucket_bytes``). None on a rank that counts tensors only (a CPU rank)."""
    ctx0 = pairs[0][0]
    rv = ctx0.topology.gpu(ctx0.gpu_index).reserve
    if not rv.working:
        return 0.0
    fw = ctx0.framework
    out = fw.workspace_bytes + torch_cublas_bytes(
        rv.cublas_workspace_bytes, fw.cublas_workspace_config
    )
    if fw.dummy_wgrads:
        out += dummy_wgrad_bytes((w for c, _ in pairs for w in c.layer_work), ctx0.dtype_bytes)
    out += sum(deferred_wgrad_bytes(ctx) for ctx, _ in pairs)
    for ctx, plan in pairs:
        if plan.grad_bucket_bytes is not None:
            out += plan.grad_bucket_bytes
        elif fw.bucket_copy and ctx.dp_width > 1:
            out += plan.grad_bytes
    return out


def deferred_wgrad_bytes(ctx: StageContext) -> float:
    """Bytes the output layer of ``ctx``'s stage holds for its deferred weight gradient when
    the stage's forwards peak (:mod:`sim.memory.layer_work`, "deferred embedding weight
    gradient"): ``n = min(limit, m)`` micro-batches' inputs (``n = m`` with no limit) and the
    output gradients of ``min(n, m - 1)`` (the last micro-batch's backward comes after its
    forward); 0 without deferral or without the output layer.

    Example:
        limit 2, m = 4, inputs 1 and gradients 10 bytes per micro-batch: 2 + 2 x 10 = 22.
    """
    limit = ctx.framework.work.wgrad_deferral
    inputs = sum(w.deferred[0] for w in ctx.layer_work)
    grads = sum(w.deferred[1] for w in ctx.layer_work)
    if limit is None or inputs + grads <= 0:
        return 0.0
    m = ctx.microbatches
    n = m if limit == 0 else min(limit, m)
    return n * inputs + min(n, m - 1) * grads


def rank_memory(pairs: Sequence[Pair]) -> RankMemory:
    """The peak of the GPU running ``pairs`` (its stage chunks, finalized plans), by category
    (module doc)."""
    act = activation_peak(pairs)
    cats = {c: 0.0 for c in CATEGORIES}
    for _, plan in pairs:
        cats["weights"] += plan.weight_bytes
        cats["gradients"] += plan.grad_bytes
        cats["optimizer"] += plan.optimizer_bytes
        cats["framework"] += plan.framework_bytes + plan.framework_buffer_bytes
        cats["allocator"] += plan.allocator_bytes
        cats["reserve"] += plan.reserve_bytes
    cats["activations"] = act.activations
    cats["working"] = act.working
    cats["buffers"] = act.buffers + act.fsdp.buffers
    cats["weights"] += act.fsdp.weights
    cats["gradients"] += act.fsdp.gradients
    ctx0 = pairs[0][0]
    charged = sum(p.static_gpu_bytes + p.overhead_bytes for _, p in pairs)
    ops = ((s, op) for s, op, _ in ctx0.ops)
    return RankMemory(
        gpu=ctx0.gpu,
        stages=tuple(c.stage for c, _ in pairs),
        by_category=cats,
        capacity_bytes=ctx0.capacity_bytes,
        peak_at=act.at,
        floor_bytes=charged + kept_peak(ops, {c.stage: p for c, p in pairs}, ctx0.overlapped),
    )

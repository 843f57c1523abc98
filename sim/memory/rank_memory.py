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
* **allocator**: what PyTorch's caching allocator reserves beyond the allocated bytes
  (:func:`allocator_margin_bytes`, a replay of the rank's tensors through
  :mod:`sim.memory.allocator`);
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
from functools import lru_cache

from sim.memory.allocator import AllocatorConfig, Op, replay
from sim.memory.context import StageContext
from sim.memory.estimate import swap_live
from sim.memory.framework_memory import dummy_wgrad_bytes
from sim.memory.layer_work import stash_tensors
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
    cached outputs) and ``buffers`` (pipeline receive and send buffers), at ``at``."""

    activations: float
    working: float
    buffers: float
    at: str

    @property
    def total(self) -> float:
        return self.activations + self.working + self.buffers


def activation_peak(pairs: Sequence[Pair]) -> ActivationPeak:
    """Walk the rank's actions (module doc) and return the largest moment."""
    by_stage = {ctx.stage: (ctx, plan) for ctx, plan in pairs}
    extra = {s: stage_transients(c, p) for s, (c, p) in by_stage.items()}
    cache = sum(output_cache(c) for c, _ in pairs)
    ops = pairs[0][0].ops or tuple((s, op, 0) for s in by_stage for op in ("F", "B"))
    live: dict[int, deque[float]] = {s: deque() for s in by_stage}
    total = 0.0
    best = ActivationPeak(0.0, 0.0, 0.0, "")
    for stage, op, _ in ops:
        if stage not in by_stage:
            continue
        ctx, plan = by_stage[stage]
        moving = _moving(ctx, plan)
        if op == "F":
            kept = plan.resident_act_bytes
            acts = total + kept + plan.rebuild_bytes + moving
            cand = ActivationPeak(acts, extra[stage][0] + cache, ctx.input_bytes, f"{stage}F")
            live[stage].append(kept)
            total += kept
        elif op in BACKWARD_OPS:
            acts = total + plan.rebuild_bytes + moving
            held = ctx.out_bytes + ctx.input_bytes
            cand = ActivationPeak(acts, extra[stage][1] + cache, held, f"{stage}{op}")
            if op in DONE_OPS and live[stage]:
                total -= live[stage].popleft()
        else:
            continue
        if cand.total > best.total:
            best = cand
    return best


def kept_peak(ops: Iterable[tuple[int, str]], plans: dict[int, StagePlan]) -> float:
    """The largest kept stash (plus the running action's rebuilt bytes) a rank holds over
    ``ops`` (``(stage, op)`` in program order; stages not in ``plans`` are skipped): each
    forward keeps its stage's ``resident_act_bytes`` until the backward that ends its
    micro-batch. The engine's ledger holds at least this much besides its charges at t = 0 at
    those moments (a forward allocates its kept, swapped and rebuilt bytes, a backward its
    rebuilt ones), so the planner's memory floor counts it (:attr:`RankMemory.floor_bytes`).

    Example:
        >>> plans = {0: StagePlan(act_bytes=4.0, resident_act_bytes=4.0)}
        >>> kept_peak([(0, "F"), (0, "F"), (0, "B"), (0, "F"), (0, "B")], plans)
        8.0
    """
    live: dict[int, deque[float]] = {s: deque() for s in plans}
    total = best = 0.0
    for stage, op in ops:
        plan = plans.get(stage)
        if plan is None:
            continue
        if op == "F":
            total += plan.resident_act_bytes
            live[stage].append(plan.resident_act_bytes)
            best = max(best, total + plan.rebuild_bytes)
        elif op in BACKWARD_OPS:
            best = max(best, total + plan.rebuild_bytes)
            if op in DONE_OPS and live[stage]:
                total -= live[stage].popleft()
    return best


def framework_buffer_bytes(pairs: Sequence[Pair]) -> float:
    """Bytes of the framework's own persistent buffers on the GPU: Transformer Engine's dummy
    weight gradients (one per weight shape over every chunk, :func:`~sim.memory.
    framework_memory.dummy_wgrad_bytes`), GEMM workspaces allocated through PyTorch (TE's,
    and PyTorch's cuBLAS workspace of the compute stream, ``RuntimeReserve.
    cublas_workspace_bytes``), and the gradient-reduction buffers: DDP's bucket copy of the
    GPU gradients with data parallelism, or a plan's own bucket (ZeRO's
    ``grad_bucket_bytes``). None on a rank that counts tensors only (a CPU rank)."""
    ctx0 = pairs[0][0]
    rv = ctx0.topology.gpu(ctx0.gpu_index).reserve
    if not rv.working:
        return 0.0
    fw = ctx0.framework
    out = fw.workspace_bytes + rv.cublas_workspace_bytes
    if fw.dummy_wgrads:
        out += dummy_wgrad_bytes((w for c, _ in pairs for w in c.layer_work), ctx0.dtype_bytes)
    for ctx, plan in pairs:
        if plan.grad_bucket_bytes is not None:
            out += plan.grad_bucket_bytes
        elif fw.bucket_copy and ctx.dp_width > 1:
            out += plan.grad_bytes
    return out


def tensor_program(pairs: Sequence[Pair]) -> list[Op]:
    """The rank's tensors in the order the caching allocator sees them (an allocation
    sequence, not a measurement), from model construction through the simulated iterations:

    * the model's parameters, one tensor per weight matrix (the layers' GEMM weights,
      :class:`~sim.memory.layer_work.LayerWork`, and the rest of each layer as one);
    * a framework with contiguous buffers (Megatron-Core's ``_ParamAndGradBuffer``) then
      allocates one gradient buffer per chunk and, with a distributed optimizer, one parameter
      buffer, and frees the parameters' own storage (``param.data = new_param_data``); DDP
      allocates its flat bucket copies; the optimizer's fp32 master copies follow
      (``clone().float()``), one per parameter (of its shard);
    * its actions in program order (``StageContext.ops``): a forward runs its layers in
      order, each allocating its stash tensors (:func:`~sim.memory.layer_work.stash_tensors`,
      scaled to what the plan keeps on the GPU) and then its transient, freed again, and the
      part it swaps out (freed when copied); a backward brings that part back and runs them
      last first, each allocating its transient and then freeing it and the oldest
      micro-batch's stash of that layer; recomputed bytes live through the action; the first
      backward of a stage allocates TE's dummy weight
      gradients (kept); per-tensor gradients (no contiguous buffer) at the first backward too;
    * Adam's moments at the first optimizer step (``torch.optim`` creates its state lazily),
      one pair per parameter tensor, carved from whatever the first iteration left cached;
      then the second iteration (:data:`REPLAY_STEPS`).
    """
    ops: list[Op] = []
    by_stage = {ctx.stage: (ctx, plan) for ctx, plan in pairs}
    chunk = {s: k for k, s in enumerate(by_stage)}  # names free of stage numbers: alike ranks
    params = {s: _param_tensors(c) for s, (c, _) in by_stage.items()}  # replay alike
    for s, (_, plan) in by_stage.items():
        ops.extend(("alloc", ("p", chunk[s], i), plan.weight_bytes * sh) for i, sh in params[s])
    for s, (ctx, plan) in by_stage.items():
        k = chunk[s]
        if not ctx.framework.bucket_copy:
            ops.append(("alloc", ("g", k), plan.grad_bytes))
            if plan.dp_sharded:
                ops.append(("alloc", ("pbuf", k), plan.weight_bytes))
                ops.extend(("free", ("p", k, i), 0.0) for i, _ in params[s])
        ops.extend(("alloc", ("m", k, i), plan.optimizer_bytes * sh / 3) for i, sh in params[s])
    ops.append(("alloc", "framework", framework_buffer_bytes(pairs) - _dummy(pairs)))
    layers = {s: _layer_tensors(c, p) for s, (c, p) in by_stage.items()}
    order = pairs[0][0].ops or tuple((s, op, 0) for s in by_stage for op in ("F", "B"))
    m = pairs[0][0].microbatches
    live: dict[int, deque[int]] = {s: deque() for s in by_stage}
    started: set[int] = set()
    dummies: set[tuple[int, int]] = set()
    steps = 0
    n = 0
    for stage, op, mb in order:
        if op != STEP_OP and mb % m >= REPLAY_MICROBATCHES:
            continue
        if op == STEP_OP:
            steps += 1
            if steps > REPLAY_STEPS:
                break
            if steps > 1:
                continue
            for s, (_, plan) in by_stage.items():
                for i, sh in params[s]:
                    ops.append(("alloc", ("adam", chunk[s], i, 0), plan.optimizer_bytes * sh / 3))
                    ops.append(("alloc", ("adam", chunk[s], i, 1), plan.optimizer_bytes * sh / 3))
            continue
        if stage not in by_stage or op not in ("F", *BACKWARD_OPS):
            continue
        ctx, plan = by_stage[stage]
        n += 1
        if op == "F":
            live[stage].append(n)
            ops.append(("alloc", ("rebuild", n), plan.rebuild_bytes))
            for j, (stash, fwd, _) in enumerate(layers[stage]):
                ops.extend(("alloc", (n, j, i), size) for i, size in enumerate(stash))
                if fwd > 0:
                    ops.append(("alloc", ("work", n, j), fwd))
                    ops.append(("free", ("work", n, j), 0.0))
            ops.append(("alloc", ("swap", n), plan.swap_bytes))  # copied out after the F
            ops.append(("free", ("swap", n), 0.0))
            ops.append(("free", ("rebuild", n), 0.0))
            continue
        if stage not in started:
            started.add(stage)
            _first_backward(ops, ctx, plan, params[stage], dummies, chunk[stage])
        done = op in DONE_OPS and bool(live[stage])
        oldest = live[stage].popleft() if done else None
        ops.append(("alloc", ("rebuild", n), plan.rebuild_bytes))
        ops.append(("alloc", ("swap", n), plan.swap_bytes))  # copied back in before the B
        for j in reversed(range(len(layers[stage]))):
            stash, _, bwd = layers[stage][j]
            if bwd > 0:
                ops.append(("alloc", ("work", n, j), bwd))
                ops.append(("free", ("work", n, j), 0.0))
            if oldest is not None:
                ops.extend(("free", (oldest, j, i), 0.0) for i in reversed(range(len(stash))))
        ops.append(("free", ("swap", n), 0.0))
        ops.append(("free", ("rebuild", n), 0.0))
    return ops


STEP_OP = "STEP"
REPLAY_STEPS = 2
TENSORS_PER_LAYER = 4
"""Stash tensors per layer the replay allocates (:func:`_merged`)."""
REPLAY_MICROBATCHES = 8
"""Micro-batches of each iteration the replay runs (the first ones; :func:`allocator_margin_bytes`
says what it assumes of the others)."""
"""Optimizer steps the allocator replay runs through: the first leaves Adam's moments in the
cache's holes, the second shows the steady fragmentation (later ones repeat it)."""


def _param_tensors(ctx: StageContext) -> list[tuple[int, float]]:
    """``(index, share of the stage's parameters)`` of each parameter tensor: the layers'
    GEMM weights and one tensor for the rest of each layer."""
    total = sum(x.param_bytes for x in ctx.layers)
    if total <= 0:
        return []
    out: list[float] = []
    for layer, work in zip(ctx.layers, ctx.layer_work, strict=True):
        weights = [r * c * ctx.dtype_bytes for r, c in work.weights]
        if sum(weights) > layer.param_bytes:
            weights = []
        rest = layer.param_bytes - sum(weights)
        out.extend(w / total for w in weights if w > 0)
        if rest > 0:
            out.append(rest / total)
    return list(enumerate(out))


def _dummy(pairs: Sequence[Pair]) -> float:
    ctx0 = pairs[0][0]
    if not ctx0.framework.dummy_wgrads:
        return 0.0
    return dummy_wgrad_bytes((w for c, _ in pairs for w in c.layer_work), ctx0.dtype_bytes)


def _first_backward(
    ops: list[Op],
    ctx: StageContext,
    plan: StagePlan,
    params: list[tuple[int, float]],
    dummies: set[tuple[int, int]],
    chunk: int,
) -> None:
    """What a stage's first backward allocates for good: TE's dummy weight gradient of each
    weight shape not in ``dummies`` yet (added), and per-tensor gradients without a
    contiguous buffer."""
    if ctx.framework.dummy_wgrads:
        d = ctx.dtype_bytes
        for shape in dict.fromkeys(s for w in ctx.layer_work for s in w.weights):
            if shape not in dummies:
                dummies.add(shape)
                ops.append(("alloc", ("dummy", shape), shape[0] * shape[1] * d))
    if ctx.framework.bucket_copy:
        ops.extend(("alloc", ("g", chunk, i), plan.grad_bytes * sh) for i, sh in params)


def _layer_tensors(
    ctx: StageContext, plan: StagePlan
) -> list[tuple[tuple[float, ...], float, float]]:
    """Per layer of the stage: its kept stash tensors (:func:`~sim.memory.layer_work.
    stash_tensors` at what the plan keeps) and its forward and backward transients."""
    kept = plan.resident_act_bytes / plan.act_bytes if plan.act_bytes > 0 else 1.0
    return [
        (_merged(stash_tensors(work, layer.act_bytes * kept)), work.fwd_bytes, work.bwd_bytes)
        for layer, work in zip(ctx.layers, ctx.layer_work, strict=True)
    ]


def _merged(tensors: tuple[float, ...], most: int = TENSORS_PER_LAYER) -> tuple[float, ...]:
    """``tensors`` with the smallest neighbouring pair merged until at most ``most`` remain
    (tensors a layer allocates together and frees together; the replay's cost is linear in
    them, and merging the small ones keeps the large sizes apart).

    Example:
        >>> _merged((1.0, 2.0, 30.0, 4.0, 50.0), 3)
        (33.0, 4.0, 50.0)
    """
    out = list(tensors)
    while len(out) > most:
        i = min(range(len(out) - 1), key=lambda k: out[k] + out[k + 1])
        out[i : i + 2] = [out[i] + out[i + 1]]
    return tuple(out)


def allocator_margin_bytes(pairs: Sequence[Pair]) -> float:
    """Bytes PyTorch's caching allocator reserves beyond the allocated peak on this rank:
    ``max_memory_reserved - max_memory_allocated`` of a replay of :func:`tensor_program`
    through :class:`~sim.memory.allocator.CachingAllocator` with the framework's allocator
    options; 0 on a rank that counts tensors only. Where more stashes are in flight than the
    replay runs (:data:`REPLAY_MICROBATCHES`) the further ones are taken to reuse the blocks of
    the first (an assumption: identical micro-batches allocate identical tensors, and the best
    fit hands each the block its twin freed)."""
    ctx0 = pairs[0][0]
    if not ctx0.topology.gpu(ctx0.gpu_index).reserve.replays_allocator:
        return 0.0
    ops = tuple(tensor_program(pairs))
    return _margin(ops, ctx0.framework.allocator)


@lru_cache(maxsize=4096)
def _margin(ops: tuple[Op, ...], config: AllocatorConfig) -> float:
    peaks = replay(ops, config)
    return float(max(0, peaks.reserved - peaks.allocated))


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
    cats["buffers"] = act.buffers
    ctx0 = pairs[0][0]
    charged = sum(p.static_gpu_bytes + p.overhead_bytes for _, p in pairs)
    ops = ((s, op) for s, op, _ in ctx0.ops)
    return RankMemory(
        gpu=ctx0.gpu,
        stages=tuple(c.stage for c, _ in pairs),
        by_category=cats,
        capacity_bytes=ctx0.capacity_bytes,
        peak_at=act.at,
        floor_bytes=charged + kept_peak(ops, {c.stage: p for c, p in pairs}),
    )

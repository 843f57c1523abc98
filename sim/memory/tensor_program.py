"""The caching allocator's view of a rank: its tensors in allocation order, and the margin
PyTorch's caching allocator reserves beyond the allocated peak.

:func:`tensor_program` writes a rank's allocations and frees (an allocation sequence built from
the rank memory model's pieces, :mod:`sim.memory.rank_memory`, not a measurement);
:func:`allocator_margin_bytes` replays it through :class:`~sim.memory.allocator.CachingAllocator`
and returns ``max_memory_reserved - max_memory_allocated``: the ``allocator`` category of a
GPU's peak, which the fit verdict counts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from functools import lru_cache

from sim.memory.allocator import AllocatorConfig, AllocatorPeaks, Op, replay
from sim.memory.context import StageContext
from sim.memory.flat_reduce import param_shares, reduce_bucket_bytes
from sim.memory.framework_memory import dummy_wgrad_bytes
from sim.memory.layer_work import stash_tensors
from sim.memory.plan import StagePlan
from sim.memory.rank_memory import (
    BACKWARD_OPS,
    DONE_OPS,
    Pair,
    framework_buffer_bytes,
    rank_memory,
)
from sim.memory.step_moment import step_transient_bytes

STEP_OP = "STEP"
REPLAY_STEPS = 2
"""Optimizer steps the allocator replay runs through: the first leaves Adam's moments in the
cache's holes, the second shows the steady fragmentation (later ones repeat it)."""
REPLAY_MICROBATCHES = 8
"""Micro-batches of each iteration the replay runs (the first ones; :func:`allocator_margin_bytes`
says what it assumes of the others)."""


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
      order, each allocating its stash tensors one block each, as autograd saves them
      (:func:`~sim.memory.layer_work.stash_tensors`, scaled to what the plan keeps on the GPU;
      never merged: a merged request needs a hole as large as the sum, where PyTorch places
      each tensor in its own best-fit block, ``get_free_block``), and then its transient, freed
      again, and the part it swaps out (freed when copied); a backward brings that part back
      and runs them last first, each allocating its transient and then freeing it and the
      oldest micro-batch's stash of that layer; recomputed bytes live through the action; the
      first backward of a stage allocates TE's dummy weight gradients (kept); per-tensor
      gradients (no contiguous buffer) at the first backward too;
    * Adam's moments at the first optimizer step (``torch.optim`` creates its state lazily),
      one pair per parameter tensor, carved from whatever the first iteration left cached;
      then the second iteration (:data:`REPLAY_STEPS`); before each step, a framework that
      reduces through flat buckets one at a time allocates its largest and frees it
      (:func:`~sim.memory.flat_reduce.reduce_bucket_bytes`); each chunk's step allocates its
      transient around it (:mod:`sim.memory.step_moment`, :func:`_step`).
    """
    by_stage = {ctx.stage: (ctx, plan) for ctx, plan in pairs}
    chunk = {s: k for k, s in enumerate(by_stage)}  # names free of stage numbers: alike ranks
    params = {s: _param_tensors(c) for s, (c, _) in by_stage.items()}  # replay alike
    ops = _construction(by_stage, chunk, params)
    ops.append(("alloc", "framework", framework_buffer_bytes(pairs) - _dummy(pairs)))
    layers = {s: _layer_tensors(c, p) for s, (c, p) in by_stage.items()}
    ctx0 = pairs[0][0]
    order = ctx0.ops or tuple((s, op, 0) for s in by_stage for op in ("F", "B"))
    m = ctx0.microbatches
    live: dict[int, deque[int]] = {s: deque() for s in by_stage}
    started: set[int] = set()
    dummies: set[tuple[int, int]] = set()
    steps = 0
    bucket = reduce_bucket_bytes(pairs)
    n = 0
    held: list[list[Op]] = []  # a combined step's forward, merged with its backward
    for pos, (stage, op, mb) in enumerate(order):
        if op != STEP_OP and mb % m >= REPLAY_MICROBATCHES:
            continue
        if op == STEP_OP:
            steps += 1
            if steps > REPLAY_STEPS:
                break
            if bucket > 0:  # the reduction's flat bucket, freed after its copy back
                ops.extend((("alloc", "reduce", bucket), ("free", "reduce", 0.0)))
            for s, (ctx, plan) in by_stage.items():  # chunk after chunk, as the engine steps
                ops.extend(_step(ctx, plan, params[s], chunk[s], first=steps == 1))
            continue
        if stage not in by_stage or op not in ("F", *BACKWARD_OPS):
            continue
        ctx, plan = by_stage[stage]
        n += 1
        if op == "F":
            live[stage].append(n)
            parts = _forward(n, plan, layers[stage])
            if pos in ctx0.overlapped:
                held = parts
            else:
                ops.extend(x for part in parts for x in part)
            continue
        if stage not in started:
            started.add(stage)
            _first_backward(ops, ctx, plan, params[stage], dummies, chunk[stage])
        done = op in DONE_OPS and bool(live[stage])
        oldest = live[stage].popleft() if done else None
        parts = _backward(n, plan, layers[stage], oldest)
        ops.extend(x for part in _interleaved(held, parts) for x in part)
        held = []
    ops.extend(x for part in held for x in part)
    return ops


def _step(
    ctx: StageContext, plan: StagePlan, params: list[tuple[int, float]], chunk: int, first: bool
) -> list[Op]:
    """The optimizer step of one chunk (:func:`tensor_program`): its transient
    (:func:`~sim.memory.step_moment.step_transient_bytes`) as one block per parameter tensor,
    in the tensors' shares (Megatron's ``main_param.grad = main_grad.float()`` and DeepSpeed's
    ``p.grad.to(fp32)`` copy each parameter's gradient on its own; DeepSpeed's flat fp32 buffer
    is taken as those pieces too: an assumption), Adam's moments at the ``first`` step (kept),
    the transient freed after."""
    held = step_transient_bytes(ctx.framework.step_transient, plan)
    ops: list[Op] = []
    if held > 0:
        ops.extend(("alloc", ("step", chunk, i), held * sh) for i, sh in params)
    if first:
        for i, sh in params:
            ops.append(("alloc", ("adam", chunk, i, 0), plan.optimizer_bytes * sh / 3))
            ops.append(("alloc", ("adam", chunk, i, 1), plan.optimizer_bytes * sh / 3))
    if held > 0:
        ops.extend(("free", ("step", chunk, i), 0.0) for i, _ in params)
    return ops


def _construction(
    by_stage: dict[int, Pair],
    chunk: dict[int, int],
    params: dict[int, list[tuple[int, float]]],
) -> list[Op]:
    """The model's construction (:func:`tensor_program`'s first two items): every stage's
    parameters, then per stage its contiguous gradient buffer (and, sharded, its parameter
    buffer, freeing the parameters' own storage) and its fp32 master copies (bytes)."""
    ops: list[Op] = []
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
    return ops


def _forward(n: int, plan: StagePlan, layers: list) -> list[list[Op]]:
    """Forward ``n``'s tensors: the rebuilt bytes, then each layer's stash and transient (one
    list per layer), then the swapped part copied out and the rebuilt bytes freed (the last
    list)."""
    out: list[list[Op]] = [[("alloc", ("rebuild", n), plan.rebuild_bytes)]]
    for j, (stash, fwd, _) in enumerate(layers):
        part: list[Op] = [("alloc_all", (n, j), stash)]
        if fwd > 0:
            part.append(("touch", ("work", n, j), fwd))
        out.append(part)
    out[-1].append(("touch", ("swap", n), plan.swap_bytes))
    out[-1].append(("free", ("rebuild", n), 0.0))
    return out


def _backward(n: int, plan: StagePlan, layers: list, oldest: int | None) -> list[list[Op]]:
    """Backward ``n``'s tensors, freeing micro-batch ``oldest``'s stash: the rebuilt and
    swapped-in bytes, then each layer last first (its transient, its stash freed), then the
    two freed (the last list)."""
    first: list[Op] = [("alloc", ("rebuild", n), plan.rebuild_bytes)]
    first.append(("alloc", ("swap", n), plan.swap_bytes))  # copied back in before the B
    out = [first]
    for j in reversed(range(len(layers))):
        stash, _, bwd = layers[j]
        part: list[Op] = []
        if bwd > 0:
            part.append(("touch", ("work", n, j), bwd))
        if oldest is not None:
            part.append(("free_all", (oldest, j), 0.0))
        out.append(part)
    out[-1] += [("free", ("swap", n), 0.0), ("free", ("rebuild", n), 0.0)]
    return out


def _interleaved(fwd: list[list[Op]], bwd: list[list[Op]]) -> list[list[Op]]:
    """A combined step's two actions layer by layer (:mod:`sim.memory.overlapped`): the
    forward's ``t``-th part, then the backward's; ``bwd`` alone without a forward."""
    out: list[list[Op]] = []
    for t in range(max(len(fwd), len(bwd))):
        out += fwd[t : t + 1] + bwd[t : t + 1]
    return out


def _param_tensors(ctx: StageContext) -> list[tuple[int, float]]:
    """``(index, share of the stage's parameters)`` of each parameter tensor: the layers'
    GEMM weights and one tensor for the rest of each layer."""
    return list(enumerate(param_shares(ctx)))


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
        (stash_tensors(work, layer.act_bytes * kept), work.fwd_bytes, work.bwd_bytes)
        for layer, work in zip(ctx.layers, ctx.layer_work, strict=True)
    ]


MARGIN_SOURCE = (
    "allocator margin: max_memory_reserved - max_memory_allocated of a replay of the rank's "
    "tensors through PyTorch's CUDACachingAllocator rules (c10/cuda/CUDACachingAllocator.cpp "
    "@ pytorch/pytorch 001074d; sim.memory.allocator, "
    "sim.memory.tensor_program.allocator_margin_bytes); the allocation order is modelled, not "
    "measured, and micro-batches past the replayed ones reuse the first's blocks (assumption)"
)
"""Where :func:`allocator_margin_bytes` (the ``allocator`` category of a GPU's peak) comes
from, for ``results.csv``'s ``peak_reserve_source`` (:func:`sim.plan.point_row.peak_reserve_source`)."""


def allocator_margin_bytes(pairs: Sequence[Pair]) -> float:
    """Bytes PyTorch's caching allocator reserves beyond the allocated peak on this rank:
    ``max_memory_reserved - max_memory_allocated`` of a replay of :func:`tensor_program`
    through :class:`~sim.memory.allocator.CachingAllocator` with the framework's allocator
    options; 0 on a rank that counts tensors only. Where more stashes are in flight than the
    replay runs (:data:`REPLAY_MICROBATCHES`) the further ones are taken to reuse the blocks of
    the first (an assumption: identical micro-batches allocate identical tensors, and the best
    fit hands each the block its twin freed).

    The allocator releases its cached segments rather than fail (:mod:`sim.memory.allocator`):
    where the margin would not fit beside the rank's allocated peak and runtime reserve
    (``pairs``' plans carry the reserve), the replay runs again with what the GPU leaves it
    (where that replay reserves more, the GPU overflows either way and the first margin is
    kept)."""
    ctx0 = pairs[0][0]
    if not ctx0.topology.gpu(ctx0.gpu_index).reserve.replays_allocator:
        return 0.0
    ops = tuple(tensor_program(pairs))
    config = ctx0.framework.allocator
    peaks = _peaks(ops, config, math.inf)
    margin = float(max(0, peaks.reserved - peaks.allocated))
    room = ctx0.capacity_bytes - sum(p.reserve_bytes for _, p in pairs)
    room -= rank_memory(pairs).allocated_bytes
    if margin <= room:
        return margin
    capped = _peaks(ops, config, peaks.allocated + max(room, 0.0))
    return min(margin, float(max(0, capped.reserved - capped.allocated)))


@lru_cache(maxsize=4096)
def _peaks(ops: tuple[Op, ...], config: AllocatorConfig, capacity_bytes: float) -> AllocatorPeaks:
    return replay(ops, config, capacity_bytes)

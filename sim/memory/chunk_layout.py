"""Where a PatrickStar stage replica's chunks live (:mod:`sim.memory.chunked`, its module doc):
the replica's owned 16-bit chunks packed as PatrickStar packs them, those that stay on the GPU
and those streamed through a staging area, the optimizer chunks hybrid Adam keeps on the GPU,
and the host bytes of the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.hardware.host_memory import cached_pinned_bytes
from sim.memory.chunks import pack, steady_misses, utilization
from sim.memory.context import StageContext
from sim.memory.estimate import activation_peak_bytes, budget_bytes
from sim.memory.memtracer import (
    PINNED_ROUNDING,
    chunkable_gpu_bytes,
    gpu_adam_chunk_count,
    gpu_adam_chunks,
)
from sim.memory.plan import StagePlan
from sim.memory.reserve import overhead
from sim.memory.tensors import stage_groups

MIB = 2**20
STAGING = 2
"""Chunk slots kept free for streaming (PatrickStar's 2-chunk margin)."""


@dataclass(frozen=True)
class ChunkLayout:
    """Where a stage replica's chunks live.

    Attributes:
        chunks: 16-bit chunks the replica owns (``n``; dummy chunks included).
        real: of those, chunks holding parameters: only they have optimizer chunks.
        elems: capacity of a chunk in elements (``C``): a chunk's bytes, however full it is.
        slot_bytes: GPU bytes of one 16-bit chunk (with its gradient when ``m > 1``).
        resident: chunks that stay on the GPU.
        misses: ``(in forwards, in backwards)`` per iteration, by Belady over the op order.
        free_bytes: GPU bytes left for chunks after activations, weight versions and
            PatrickStar's limits (:mod:`sim.memory.memtracer`).
        sys_bytes: the replica's other tensors at their peak (PatrickStar's ``sys`` memory).
        utilization: share of the chunks' capacity its parameters fill (:func:`pack`).
    """

    chunks: int
    real: int
    elems: float
    slot_bytes: float
    resident: int
    misses: tuple[int, int]
    free_bytes: float
    sys_bytes: float = 0.0
    utilization: float = 1.0

    @property
    def streamed(self) -> int:
        return self.chunks - self.resident


def owned_chunks(ctx: StageContext, chunk_elems: int) -> tuple[int, int, float]:
    """``(16-bit chunks the replica owns, real ones among them, utilization)``: the stage's
    parameter groups packed as PatrickStar packs them (:func:`~sim.memory.chunks.pack`),
    padded with dummy chunks to whole groups of ``w`` (``client.append_dummy_chunk``; a dummy
    is all-gathered, so its owner allocates it, but it has no optimizer chunks: those are
    built per parameter, ``append_tensor_as_ref``); replica ``r`` owns chunk ``r`` of each.

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    used = pack(stage_groups(ctx.layers, ctx.dtype_bytes), chunk_elems)
    w, r = ctx.dp_width, ctx.replica % ctx.dp_width
    real = max(0, math.ceil((len(used) - r) / w))
    return math.ceil(len(used) / w), real, utilization(used, chunk_elems)


def gathered_live_bytes(ctx: StageContext, elems: float, msc: bool = False) -> float:
    """GPU bytes of the remote chunks live during an action: one chunk group's,
    ``(w - 1) * chunk``, or one chunk with memory-saving communication (0 without data
    parallelism). Nothing is gathered ahead (the calls are synchronous,
    :mod:`sim.memory.chunked`)."""
    if ctx.dp_width <= 1:
        return 0.0
    return (1 if msc else ctx.dp_width - 1) * elems * ctx.state.weight


def sys_bytes(ctx: StageContext, act: StagePlan) -> float:
    """The replica's tensors other than chunks at their peak: activations, receive buffers and
    working memory (``torch.cuda.memory_allocated`` sees them; the CUDA context and the
    allocator's slack it does not)."""
    peak = activation_peak_bytes(act, ctx)
    return peak + overhead(ctx, peak, 0.0)["working_bytes"]


def chunk_layout(
    ctx: StageContext,
    act: StagePlan,
    chunk_elems: int,
    msc: bool = False,
    tracer_msc: bool | None = None,
) -> ChunkLayout:
    """Pack the replica's owned parameters and decide which 16-bit chunks stay
    (:mod:`sim.memory.chunked`). ``msc``: one remote chunk is live, not a group;
    ``tracer_msc``: the memory tracer keeps one chunk free for it, not a group (None: as
    ``msc``; False for ``v045``, :mod:`sim.memory.chunked`).

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    m, d, w = ctx.microbatches, ctx.state.weight, ctx.dp_width
    n, real, util = owned_chunks(ctx, chunk_elems)
    e = float(chunk_elems)
    slot = e * (d + (ctx.state.grad if m > 1 else 0))
    versions = (ctx.weight_versions - 1) * n * e * d
    gathered = gathered_live_bytes(ctx, e, msc)
    peak = activation_peak_bytes(act, ctx)
    runtime = sum(overhead(ctx, peak, 0.0).values())  # reserve, allocator, working memory
    sys = sys_bytes(ctx, act)
    own_budget = budget_bytes(ctx) - peak - runtime - versions - gathered
    kept_one = msc if tracer_msc is None else tracer_msc
    tracer = chunkable_gpu_bytes(ctx.capacity_bytes, sys, w, chunk_elems, d, kept_one)
    free = min(own_budget, tracer - gathered - versions)
    if free >= n * slot:
        return ChunkLayout(n, real, e, slot, n, (0, 0), free, sys, util)
    staging = 2 * STAGING * e * d  # this action's staging area and the next one's
    resident = min(n - 1, max(0, math.floor((free - staging) / slot)))
    cache = max(1, min(resident + STAGING, n - 1))  # fewer slots than chunks: it streams
    misses = steady_misses(ctx.order or ("F", "B") * m, n, cache)
    return ChunkLayout(n, real, e, slot, resident, misses, free, sys, util)


def gpu_optimizer_chunks(ctx: StageContext, lay: ChunkLayout, msc: bool = False) -> int:
    """Optimizer chunk groups (fp32 weight, momentum, variance) kept and updated on the GPU:
    hybrid Adam's margin (:func:`~sim.memory.memtracer.gpu_adam_chunks`; ``msc``: the tracer
    counts one remote chunk, not a group's, False for ``v045``) as the step counts its chunks
    (:func:`~sim.memory.memtracer.gpu_adam_chunk_count`), within what the chunks may use
    during a forward or backward next to the resident 16-bit chunks (otherwise PatrickStar
    evicts them to the host), and only for resident chunks."""
    if ctx.state.optimizer <= 0:
        return lay.real  # sgd: no optimizer state
    d, e = ctx.state.weight, int(lay.elems)
    w = ctx.dp_width
    margin = gpu_adam_chunks(ctx.capacity_bytes, lay.sys_bytes, lay.chunks, w, e, d, msc)
    staging = 2 * STAGING * e * d if lay.streamed else 0.0
    room = (lay.free_bytes - lay.resident * lay.slot_bytes - staging) / (e * ctx.state.optimizer)
    count = gpu_adam_chunk_count(margin)
    return max(0, min(lay.real, lay.resident, count, math.floor(room)))


def host_chunk_bytes(ctx: StageContext, lay: ChunkLayout, os_gpu_chunks: int) -> float:
    """Host bytes of the replica's chunks: the optimizer chunks not on the GPU (three fp32
    chunks each) and the streamed 16-bit chunks (with a gradient chunk when ``m > 1``), each a
    pinned allocation (``Chunk.allocate_payload``: ``pin_memory=True`` on the CPU). Streamed
    chunks come and go; torch's host allocator keeps each size class's peak
    (:func:`~sim.hardware.host_memory.cached_pinned_bytes`, under PatrickStar's torch,
    :data:`~sim.memory.memtracer.PINNED_ROUNDING`)."""
    e, d, g = lay.elems, ctx.state.weight, ctx.state.grad
    peaks: dict[float, int] = {}
    if ctx.state.optimizer > 0:
        peaks[e * 4] = round(ctx.state.optimizer / 4) * (lay.real - os_gpu_chunks)
    peaks[e * d] = peaks.get(e * d, 0) + lay.streamed
    if ctx.microbatches > 1:
        peaks[e * g] = peaks.get(e * g, 0) + lay.streamed
    return cached_pinned_bytes(peaks, PINNED_ROUNDING)

"""Policy ``chunked`` (PatrickStar, memory.md §5.4): model states in chunks on GPU or host.

Per stage replica, with ``P`` parameters in chunks of ``C`` elements (``chunked:64``: 64M
elements, the default):

* **16-bit chunks** (2 B/param; plus a 2 B/param gradient chunk when gradients accumulate over
  ``m > 1`` micro-batches, else the gradient reuses the parameter chunk, PatrickStar's 14 B/param)
  take the GPU memory left after the activations (the non-model memory of
  :func:`~sim.memory.estimate.activation_peak_bytes`). If all fit they stay; otherwise the GPU
  keeps ``r`` chunks plus a 2-chunk staging area through which every F and B streams the missing
  ones in from the host (a cache of ``r + 2`` chunks evicting by Belady, :mod:`sim.memory.chunks`;
  misses counted over the stage's real op order; the next action's staging is prefetched while
  the current one runs, so two staging areas are reserved), and every B writes the gradients of
  streamed chunks back to the host (they overwrite the staged parameter chunk, as in PatrickStar,
  so they take no extra GPU memory).
* **Optimizer chunks** (fp32 weight, m, v: 12 B/param) fill what is left on the GPU (updated
  there by GPU Adam); the rest live on the host and are updated by CPU Adam, with the gradients
  of resident chunks copied down before and their weights copied up after the host step.
* **Data parallelism** (ZeRO-style): each of the ``w`` replicas owns ``1/w`` of the optimizer
  chunks; gradients are reduce-scattered and weights all-gathered around the step. 16-bit
  chunks are cached whole on each GPU (PatrickStar also shards and all-gathers them on access;
  not modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.memory.base import MemoryPolicy, StageContext
from sim.memory.chunks import chunk_count, steady_misses
from sim.memory.compose import describe, gib
from sim.memory.estimate import activation_peak_bytes, budget_bytes, copy_s
from sim.memory.plan import StagePlan, Transfer
from sim.memory.states import optimizer_step_s
from sim.memory.zero_offload import adam_rate

MIB = 2**20
STAGING = 2
"""Chunk slots kept free for streaming (PatrickStar's 2-chunk margin)."""


@dataclass(frozen=True)
class ChunkLayout:
    """Where a stage's chunks live.

    Attributes:
        chunks: 16-bit chunks of the stage (``n``).
        elems: parameters per chunk.
        slot_bytes: GPU bytes of one 16-bit chunk (with its gradient when ``m > 1``).
        resident: chunks that stay on the GPU.
        misses: ``(in forwards, in backwards)`` per iteration, by Belady over the op order.
        free_bytes: GPU budget left for model states after activations and weight versions.
    """

    chunks: int
    elems: float
    slot_bytes: float
    resident: int
    misses: tuple[int, int]
    free_bytes: float

    @property
    def streamed(self) -> int:
        return self.chunks - self.resident


def chunk_layout(ctx: StageContext, act: StagePlan, chunk_elems: int) -> ChunkLayout:
    """Pack the stage's parameters and decide which 16-bit chunks stay (module doc)."""
    m, d = ctx.microbatches, ctx.state.weight
    n = chunk_count(ctx.params, chunk_elems)
    elems = ctx.params / n  # chunks hold P/n each (the last one's slack is not counted)
    slot = elems * (d + (ctx.state.grad if m > 1 else 0))
    versions = (ctx.weight_versions - 1) * ctx.params * d
    free = budget_bytes(ctx) - activation_peak_bytes(act, ctx) - versions
    if free >= n * slot:
        return ChunkLayout(n, elems, slot, n, (0, 0), free)
    staging = 2 * STAGING * elems * d  # this action's staging area and the next one's
    resident = min(n - 1, max(0, math.floor((free - staging) / slot)))
    cache = max(1, min(resident + STAGING, n - 1))  # fewer slots than chunks: it streams
    misses = steady_misses(ctx.order or ("F", "B") * m, n, cache)
    return ChunkLayout(n, elems, slot, resident, misses, free)


def chunk_states(
    ctx: StageContext, act: StagePlan, chunk_elems: int
) -> tuple[StagePlan, float, dict]:
    """``act`` with its model states in chunks; the estimated seconds added per iteration; notes."""
    lay = chunk_layout(ctx, act, chunk_elems)
    m, d, g, o = ctx.microbatches, ctx.state.weight, ctx.state.grad, ctx.state.optimizer
    e, stream = lay.elems, lay.streamed
    fetch = sum(lay.misses) / (2 * m) * e * d
    used = lay.resident * lay.slot_bytes + (2 * STAGING * e * d if stream else 0.0)
    own = ctx.params / ctx.dp_width
    os_gpu = min(own, max(0.0, lay.free_bytes - used) // (e * o) * e, lay.resident * e)
    os_host = own - os_gpu
    back = os_host * lay.resident / lay.chunks  # host-updated, 16-bit copy on the GPU
    hbm = ctx.topology.gpu(ctx.gpu_index).hbm_bandwidth_Bps
    versions = (ctx.weight_versions - 1) * ctx.params * d
    plan = replace(
        act,
        weight_bytes=lay.resident * lay.slot_bytes + versions,
        grad_bytes=0.0,
        optimizer_bytes=os_gpu * o,
        optimizer_s=optimizer_step_s(os_gpu, hbm, ctx.state),
        host_bytes=os_host * o + stream * e * (d + g),
        host_optimizer_s=os_host / adam_rate(ctx),
        step_transfers_before=_copy(ctx.gpu, ctx.host, back * g, "grads"),
        step_transfers_after=_copy(ctx.host, ctx.gpu, back * d, "weights"),
        fetch_bytes=fetch,
        fetch_source=ctx.host if fetch else None,
        fetch_live_bytes=STAGING * e * d if stream else None,
        writeback_bytes=stream * e * g,
        dp_sharded=ctx.dp_width > 1,
        dp_grad_bytes=ctx.params * g,
    )
    added = (
        2
        * m
        * max(
            0.0, copy_s(ctx, ctx.host, ctx.gpu, fetch, ctx.host_sharers) - min(ctx.fwd_s, ctx.bwd_s)
        )
        + plan.host_optimizer_s
        + copy_s(ctx, ctx.gpu, ctx.host, back * g)
        + copy_s(ctx, ctx.host, ctx.gpu, back * d)
        + plan.optimizer_s
        - ctx.resident_plan().optimizer_s
    )
    notes = dict(
        chunks=lay.chunks,
        chunk_mib=round(lay.slot_bytes / MIB, 1),
        resident_chunks=lay.resident,
        streamed_chunks=stream,
        misses_per_iteration=sum(lay.misses),
        optimizer_on_gpu_share=round(os_gpu / own, 3) if own else 1.0,
        host_state_gib=gib(plan.host_bytes),
    )
    return plan, added, notes


def _copy(src: str, dst: str, nbytes: float, what: str) -> tuple[Transfer, ...]:
    return (Transfer(src, dst, nbytes, f"{what} {src}->{dst}"),) if nbytes > 0 else ()


class ChunkedPolicy(MemoryPolicy):
    """PatrickStar-style chunked model states; activations stay resident.

    Args:
        chunk_melems: chunk size in millions (2**20) of elements.
    """

    name = "chunked"
    description = "model states in chunks on GPU or host, Belady eviction, hybrid Adam"

    def __init__(self, chunk_melems: int = 64):
        self.chunk_elems = chunk_melems * MIB

    @classmethod
    def from_args(cls, args: list[str]) -> ChunkedPolicy:
        if not args:
            return cls()
        if len(args) > 1 or not args[0].isdigit() or int(args[0]) < 1:
            raise ValueError(
                f"use chunked:N with N the chunk size in M elements, got {':'.join(args)!r}"
            )
        return cls(int(args[0]))

    def plan(self, ctx: StageContext) -> StagePlan:
        plan, added, notes = chunk_states(ctx, ctx.resident_plan(), self.chunk_elems)
        return describe(ctx, plan, f"chunks of {self.chunk_elems // MIB}M", added, **notes)

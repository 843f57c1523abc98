"""Policy ``chunked`` (PatrickStar, Fang et al. TPDS 2022 / arXiv 2108.05818; memory.md §5.4):
model states in chunks on GPU or host, partitioned over the data-parallel replicas.

``chunked[:N][:recompute]``: chunks of ``N`` M (2**20) elements (default 64, PatrickStar's
usual size); ``recompute``: full activation checkpointing of every layer, as PatrickStar always
ran (paper §7 "activation checkpointing"; ``examples/run_transformers.sh`` passes
``--use_ckp``). Per stage replica, with ``P`` parameters, ``w`` replicas, chunks of ``C``:

* **Chunk groups and owners** (paper §5 "distributed"; ``patrickstar/core/chunk_list.py``
  ``new_chunk`` returns ``(comm_group_idx, comm_group_offset)``): the ``n = ceil(P / C)`` 16-bit
  chunks form groups of ``w`` (padded with dummy chunks, ``client.py``
  ``append_dummy_chunk``); replica ``r`` owns chunk ``r`` of every group, ``P / w`` parameters.
* **All-gather before use** (``client.py`` ``access_dist``: the owned chunk is brought to the
  GPU, then ``_fetch_remote_chunks`` all-gathers the group): before each F and each B the
  stage's chunk groups are all-gathered (``2P`` bytes); the remote chunks are freed after use,
  so one group's ``(w - 1)`` remote chunks are live, two with the next one prefetched
  (PatrickStar's chunkable-memory margin ``2 * chunk_size * world_size``,
  ``core/memtracer/memtracer.py``; ``client.py`` ``param_fp16_chunks_max_mem_usage``:
  own chunks + ``(world_size - 1)`` chunks).
* **Reduce-scatter after the backward** (``client.py`` ``release_dist``: the group's gradient
  chunks are reduce-scattered to their owners when the backward releases them): ``2P`` bytes
  per B.
* **Owned 16-bit chunks** (2 B/param; plus a 2 B/param gradient chunk when gradients accumulate
  over ``m > 1`` micro-batches, else the gradient reuses the parameter chunk, PatrickStar's
  14 B/param) take the GPU memory left after the activations and the gathered groups. If they
  do not all fit, the GPU keeps ``r`` of them plus a 2-chunk staging area through which each F
  and B streams the others in from the host (Belady eviction, :mod:`sim.memory.chunks`,
  ``core/eviction_policy.py``), and every B writes the gradients of streamed chunks back.
* **Optimizer chunks** (fp32 weight, m, v: 12 B/param) exist for owned chunks only: ``12P / w``;
  they fill what is left on the GPU (GPU Adam, PatrickStar's hybrid Adam margin,
  ``memtracer.update_margin_mem``); the rest live in host DRAM (one pool per server, shared by
  all ranks) and CPU Adam updates them (replicas on one socket one after another), with their
  gradients copied down before and their weights up after the host step.

Per replica and ``m = 1``: ``14P / w`` bytes of model state over GPU and host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.memory.base import MemoryPolicy
from sim.memory.chunks import chunk_count, steady_misses
from sim.memory.compose import describe, gib, resident_plan
from sim.memory.context import StageContext
from sim.memory.estimate import activation_peak_bytes, budget_bytes, copy_s
from sim.memory.plan import StagePlan, Transfer
from sim.memory.reserve import overhead
from sim.memory.states import optimizer_step_s
from sim.memory.zero_offload import (
    RECOMPUTE,
    adam_rate,
    base_plan,
    parse_options,
    socket_sharers,
    with_overhead,
)

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


def owned_chunks(params: float, chunk_elems: int, dp_width: int) -> tuple[int, float]:
    """``(chunks a replica owns, parameters per chunk)``: ``ceil(n / w)`` groups of ``w``
    chunks, one owned per group, the ``params / w`` owned parameters spread evenly over them
    (the dummy chunks that pad the last group hold none)."""
    groups = math.ceil(chunk_count(params, chunk_elems) / dp_width)
    return groups, params / dp_width / groups


def gathered_live_bytes(ctx: StageContext, elems: float) -> float:
    """GPU bytes of one chunk group's remote chunks, ``(w - 1) * chunk`` (0 without data
    parallelism); the engine and the estimate count two (the next group is prefetched)."""
    return (ctx.dp_width - 1) * elems * ctx.state.weight


def chunk_layout(ctx: StageContext, act: StagePlan, chunk_elems: int) -> ChunkLayout:
    """Pack the replica's owned parameters and decide which 16-bit chunks stay (module doc)."""
    m, d = ctx.microbatches, ctx.state.weight
    n, elems = owned_chunks(ctx.params, chunk_elems, ctx.dp_width)
    slot = elems * (d + (ctx.state.grad if m > 1 else 0))
    versions = (ctx.weight_versions - 1) * ctx.params / ctx.dp_width * d
    gathered = 2 * gathered_live_bytes(ctx, elems)
    peak = activation_peak_bytes(act, ctx)
    runtime = sum(overhead(ctx, peak, 0.0).values())  # reserve, allocator, working memory
    free = budget_bytes(ctx) - peak - runtime - versions - gathered
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
    e, stream, w = lay.elems, lay.streamed, ctx.dp_width
    fetch = sum(lay.misses) / (2 * m) * e * d
    used = lay.resident * lay.slot_bytes + (2 * STAGING * e * d if stream else 0.0)
    own = ctx.params / w
    room = max(0.0, lay.free_bytes - used) // (e * o) * e if o > 0 else own  # sgd: no state
    os_gpu = min(own, room, lay.resident * e)
    os_host = own - os_gpu
    back = os_host * lay.resident / lay.chunks  # host-updated, 16-bit copy on the GPU
    hbm = ctx.topology.gpu(ctx.gpu_index).hbm_bandwidth_Bps
    versions = (ctx.weight_versions - 1) * own * d
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
        gather_bytes=ctx.params * d if w > 1 else 0.0,
        gather_live_bytes=gathered_live_bytes(ctx, e),
        scatter_bytes=ctx.params * g if w > 1 else 0.0,
        grad_bucket_bytes=0.0,  # gradients reduce-scatter from the chunks they overwrite
        dp_sharded=w > 1,
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
        - resident_plan(ctx).optimizer_s
    )
    notes = dict(
        chunks=lay.chunks,
        chunk_mib=round(lay.slot_bytes / MIB, 1),
        resident_chunks=lay.resident,
        streamed_chunks=stream,
        owned_chunks=lay.chunks,
        misses_per_iteration=sum(lay.misses),
        optimizer_on_gpu_share=round(os_gpu / own, 3) if own else 1.0,
        host_state_gib=gib(plan.host_bytes),
    )
    return plan, added, notes


def _copy(src: str, dst: str, nbytes: float, what: str) -> tuple[Transfer, ...]:
    return (Transfer(src, dst, nbytes, f"{what} {src}->{dst}"),) if nbytes > 0 else ()


class ChunkedPolicy(MemoryPolicy):
    """PatrickStar-style chunked model states (module doc).

    Args:
        chunk_melems: chunk size in millions (2**20) of elements.
        recompute: checkpoint every layer's activations too (PatrickStar's setting).
    """

    name = "chunked"
    description = "model states in chunks owned across replicas, on GPU or host; ':recompute'"

    def __init__(self, chunk_melems: int = 64, recompute: bool = False):
        self.chunk_elems = chunk_melems * MIB
        self.recompute = recompute
        self.mode = "full" if recompute else None

    @classmethod
    def from_args(cls, args: list[str]) -> ChunkedPolicy:
        size, words = parse_options(cls.name, args, (RECOMPUTE,))
        return cls(64 if size is None else size, RECOMPUTE in words)

    def plan_all(self, contexts, fixed=()) -> list[StagePlan]:
        out = []
        for ctx in contexts:
            act = base_plan(ctx, self.recompute)
            plan, added, notes = chunk_states(ctx, act, self.chunk_elems)
            added += (socket_sharers(contexts, ctx) - 1) * plan.host_optimizer_s
            added += ctx.microbatches * plan.recompute_s
            label = f"chunks of {self.chunk_elems // MIB}M"
            if self.recompute:
                label += ", full recompute"
            out.append(describe(ctx, with_overhead(ctx, plan), label, added, **notes))
        return out

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]

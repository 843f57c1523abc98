"""PatrickStar's per-iteration chunk traffic on the GPU: how often each 16-bit chunk is fetched
from its owner, what the collectives cost against a ring all-gather, and the memsets around
each fetch (Tencent/PatrickStar@2384535; :mod:`sim.memory.chunked` uses it).

* **Fetches per chunk** (``--with_mem_saving_com``, ``MSC=1`` in every benchmark script): a chunk
  is broadcast from its owner when a tensor of it is first accessed and released when all its
  tensors are done (``client._fetch_remote_chunks``: ``is_visiting`` returns early, else
  ``torch.distributed.broadcast``; ``client.release_dist``: once ``chunk.all_tensor_state``
  holds, ``visiting_finish`` and the non-owners' ``release_payload``). A forward fetches every
  chunk once. With activation checkpointing (HF ``gradient_checkpointing``; PatrickStar's
  hooks run again in the recomputed forward, ``core/hook.py``) the backward fetches a chunk for
  the recompute of its last block; if every tensor of the chunk belongs to that block, the
  recomputed forward leaves them all ``HOLD_AFTER_FWD``, ``release_dist`` (training stage
  FWD) finds the chunk ready and releases it, and the block's backward fetches it again
  (``pre_sub_module_backward_function`` → ``access_dist``). A chunk spanning two blocks keeps
  tensors of the other in ``HOLD`` or ``HOLD_AFTER_BWD`` and is held through
  (``engine._set_state_after_forward`` resets the forward's states to ``HOLD``). Per
  iteration: ``2`` fetches per chunk, ``3`` for a chunk within one checkpointed block
  (:func:`fetches_per_iteration`); each backward reduces each chunk once.
* **Broadcasts, not all-gathers** (PatrickStar's ``doc/optimization_options.md``: "reduce
  scatter is replaced with Nx reduce. all gather is replaced with Nx bcast"): a ring broadcast
  or reduce of ``C`` bytes takes ``C / busbw`` where a ring all-gather or reduce-scatter of
  ``w * C`` bytes takes ``(w - 1) * C / busbw`` (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``:
  busbw = algbw for Broadcast and Reduce, algbw * (n - 1) / n for AllGather and
  ReduceScatter); pipesim times the fetches as all-gathers of ``w / (w - 1)`` times their bytes
  (:func:`msc_factor`).
* **Memsets** (:func:`memset_bytes`): every fetch gives a non-owner a zeroed payload, either
  ``torch.zeros`` at allocation (``Chunk.allocate_payload``) or, with ``--with_mem_cache``
  (``CACHE=1``, run_transformers.sh's default), ``payload.zero_()`` when the released payload
  is pushed back into the cache (``MemoryCache.push``): one write of the chunk per remote
  fetch. After each reduce the owner averages its chunk (``payload /= world_size``,
  ``release_dist``): a read and a write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.memory.chunks import pack_owned
from sim.memory.context import StageContext
from sim.memory.tensors import param_groups, stage_hidden
from sim.trace.schema import LayerProfile

CHECKPOINTED = "block"
"""Layers whose forward is recomputed under full checkpointing (the transformer blocks; the
embedding and the head are not checkpointed by HF's ``gradient_checkpointing``)."""


def chunk_blocks(
    layers: Sequence[LayerProfile], dtype_bytes: int, chunk_elems: int
) -> tuple[int, int]:
    """``(chunks, within)``: the stage's chunks packed as PatrickStar packs them
    (:func:`~sim.memory.chunks.pack_owned`) and how many of them hold tensors of one checkpointed
    block only (module doc).

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    h = stage_hidden(layers, dtype_bytes)
    groups = [(i, g) for i, layer in enumerate(layers) for g in param_groups(layer, dtype_bytes, h)]
    used, owners = pack_owned(groups, chunk_elems)
    within = sum(
        1 for o in owners if len(o) == 1 and layers[next(iter(o))].name.startswith(CHECKPOINTED)
    )
    return len(used), within


def fetches_per_iteration(chunks: int, within: int, recompute: bool) -> int:
    """Fetches of the stage's ``chunks`` chunks in one forward and backward: two each, one more
    for each of the ``within`` chunks inside one checkpointed block when ``recompute``."""
    return 2 * chunks + (within if recompute else 0)


def msc_factor(w: int) -> float:
    """Time of ``w`` ring broadcasts (or reduces) of ``C`` bytes over that of a ring all-gather
    (or reduce-scatter) of ``w * C``: ``w / (w - 1)`` (module doc); 1 for ``w < 2``."""
    return w / (w - 1) if w > 1 else 1.0


def memset_bytes(fetches: float, owned: int, w: int, chunk_bytes: float) -> float:
    """HBM bytes per forward and backward of one replica's chunk memsets (module doc): ``fetches`` chunk
    fetches of the stage, of which a replica receives ``(w - 1) / w``, each zeroing a chunk of
    ``chunk_bytes``; and the average of its ``owned`` chunks after their reduce (read and
    write). 0 without data parallelism."""
    if w < 2:
        return 0.0
    return (fetches * (w - 1) / w + 2 * owned) * chunk_bytes


@dataclass(frozen=True)
class ChunkTraffic:
    """A replica's chunk collectives per action and memsets per forward and backward
    (:mod:`sim.memory.chunk_comm`).

    Attributes:
        fetches: chunk fetches of the stage per forward and backward.
        gather_bytes: bytes timed as the all-gather before each forward or backward.
        scatter_bytes: bytes timed as the reduce-scatter after each backward.
        memset_bytes: HBM bytes of the memsets per forward and backward.
    """

    fetches: int
    gather_bytes: float
    scatter_bytes: float
    memset_bytes: float

    def memset_s(self, hbm_Bps: float) -> float:
        """Seconds of the memsets at the GPU's memory-bound rate ``hbm_Bps``."""
        return self.memset_bytes / hbm_Bps


def chunk_traffic(
    ctx: StageContext, owned: tuple[int, int], chunk_elems: int, msc: bool, recompute: bool
) -> ChunkTraffic:
    """The replica's chunk traffic (:mod:`sim.memory.chunk_comm`): without ``msc`` every group
    of ``w`` chunks is all-gathered before each forward and backward and reduce-scattered
    after it (dummy chunks included); with it each chunk holding parameters is broadcast per
    fetch (two per iteration, three inside one checkpointed block under ``recompute``) and
    reduced once, timed as all-gathers and reduce-scatters of ``w / (w - 1)`` times the bytes.
    The memsets run once per fetch and reduce; they are charged in the optimizer step's GPU
    time, one forward and backward's worth per step, as
    :func:`~sim.memory.chunk_step.grad_hooks_s` charges the gradient path (PatrickStar runs one
    micro-batch per step; a schedule that steps after every micro-batch, PipeDream's, gets
    them once per micro-batch). Nothing without data parallelism. ``owned``: the replica's ``(chunks, real chunks)``
    (:class:`~sim.memory.chunk_layout.ChunkLayout`); ``chunk_elems``: a chunk's capacity.

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    w, d, g, e = ctx.dp_width, ctx.state.weight, ctx.state.grad, float(chunk_elems)
    n, owned_real = owned
    if w <= 1:
        return ChunkTraffic(0, 0.0, 0.0, 0.0)
    if msc:
        real, within = chunk_blocks(ctx.layers, ctx.dtype_bytes, chunk_elems)
        fetches = fetches_per_iteration(real, within, recompute)
        f = msc_factor(w)
        gather, scatter = fetches / 2 * e * d * f, real * e * g * f
    else:
        fetches = 2 * n * w
        gather, scatter = n * w * e * d, n * w * e * g
    memsets = memset_bytes(fetches, owned_real, w, e * d)
    return ChunkTraffic(fetches, gather, scatter, memsets)

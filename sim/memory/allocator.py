"""PyTorch's CUDA caching allocator: allocated and reserved bytes of a sequence of tensors.

``torch.cuda.max_memory_allocated`` counts the blocks the caching allocator hands out;
``max_memory_reserved`` the segments it obtained from ``cudaMalloc`` and keeps cached. Both are
what a user of PyTorch sees (Megatron logs ``mem-max-allocated-bytes`` and
``mem-reserved-bytes``), and an out-of-memory error comes when a new *segment* cannot be
reserved, so the fit verdict needs the reserved peak. The rules, from
``c10/cuda/CUDACachingAllocator.cpp`` (pytorch/pytorch@001074d, the constants identical in
torch 2.13's ``c10/core/AllocatorConfig.h`` at cf30153) and PyTorch's "CUDA semantics: memory
management" notes:

* every request is rounded up to a multiple of 512 B (``kMinBlockSize``; ``round_size``), or
  with ``roundup_power2_divisions`` to the next of ``divisions`` steps between two powers of
  two (``roundup_power2_next_division``);
* requests of at most 1 MiB (``kSmallSize``) come from the small pool, larger ones from the
  large pool (``get_pool``); a free block is reused best-fit within its pool (``get_free_block``,
  blocks ordered by size), a block of at least ``max_split_size`` only for a request of at
  least that size and less than 20 MiB (``max_non_split_rounding``) smaller;
* with no cached block large enough a new segment is reserved (``get_allocation_size``): 2 MiB
  (``kSmallBuffer``) for a small request, 20 MiB (``kLargeBuffer``) for one under 10 MiB
  (``kMinLargeAlloc``), else the request rounded up to 2 MiB (``kRoundLarge``);
* a block is split when the rest is at least 512 B in the small pool and more than 1 MiB in the
  large pool (``should_split``); otherwise the whole block is handed out and counted as
  allocated; a freed block merges with free neighbours of its own segment only
  (``free_block``, ``try_merge_blocks``); segments are kept until ``empty_cache`` (which
  training loops do not call);
* ``expandable_segments:True`` (``ExpandableSegment``): one segment per pool whose physical
  pages (2 MiB in the small pool, 20 MiB in the large one) are mapped on demand at its end,
  so freed blocks anywhere in it merge, and any rest of at least 512 B is split off.

* when a new segment would not fit in the GPU (``capacity_bytes``), the allocator returns every
  cached segment no live block uses to the driver and tries again (``malloc``: ``alloc_block``
  fails, ``release_cached_blocks``, ``alloc_block`` again; with the default
  ``max_split_size`` ``release_available_cached_blocks`` frees nothing), so cached segments
  never cause an out-of-memory error, only free blocks inside segments still in use do. With
  ``expandable_segments`` every free block unmaps its whole pages (``unmap_block``), and the
  pages an allocation covers are mapped again (``map_block``).

One stream is modelled (blocks freed on another stream wait for its events; training loops
allocate activations on the compute stream). :class:`CachingAllocator` replays
``alloc``/``free`` calls (and, as shortcuts with the same peaks, a transient's ``touch`` and a
layer's stash as one ``alloc_all``/``free_all``); :func:`replay` runs a list of them and
returns the peaks. The sizes are :mod:`sim.memory.allocator_rules`; the blocks and segments, with
their splits and merges, :mod:`sim.memory.allocator_blocks`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sim.memory.allocator_blocks import Block, BlockLists, FreeBlock, Segment
from sim.memory.allocator_rules import (
    LARGE_BUFFER_BYTES,
    MAX_NON_SPLIT_ROUNDING_BYTES,
    MIB,  # noqa: F401 (replay's example uses it)
    MIN_BLOCK_BYTES,
    SMALL_BUFFER_BYTES,
    SMALL_SIZE_BYTES,
    AllocatorConfig,
    is_small,
    round_size,
    segment_size,
)


class CachingAllocator(BlockLists):
    """A replay of the caching allocator's block and segment rules (module doc).

    Attributes:
        allocated: bytes of blocks handed out now (``allocated_bytes.all.current``).
        reserved: bytes of segments reserved now (``reserved_bytes.all.current``).
        capacity_bytes: what the allocator may reserve before it releases its cached segments
            (module doc; inf: never).
        requested: bytes requested by the live tensors (``requested_bytes``).
        peak_allocated, peak_reserved, peak_requested: their maxima so far.
    """

    def __init__(self, config: AllocatorConfig | None = None, capacity_bytes: float = math.inf):
        self.config = config or AllocatorConfig()
        self.capacity_bytes = capacity_bytes
        self.allocated = self.reserved = self.requested = 0
        super().__init__()
        self.peak_allocated = self.peak_reserved = self.peak_requested = 0
        self._live: dict[object, tuple[Block, int]] = {}
        self._groups: dict[object, list[tuple[Block, int]]] = {}
        self._expandable: dict[bool, int] = {}
        self._divisions = self.config.roundup_power2_divisions
        self._cap = self.config.max_split_size_bytes
        self._sizes: dict[float, tuple[int, int, bool]] = {}  # bytes -> asked, size, pool

    # -- public ------------------------------------------------------------------------
    def alloc(self, key: object, nbytes: float) -> None:
        """Allocate a tensor of ``nbytes`` named ``key`` (a new key; 0 bytes is ignored).

        Raises:
            KeyError: ``key`` is live already.
        """
        if nbytes <= 0:
            return
        if key in self._live or key in self._groups:
            raise KeyError(f"{key!r} is allocated already")
        self._live[key] = self._take(nbytes)

    def alloc_all(self, key: object, sizes: Sequence[float]) -> None:
        """Allocate tensors of ``sizes`` bytes in order, named ``key`` together (a layer's
        stash: :meth:`free_all` frees them), as :meth:`alloc` of each would.

        Raises:
            KeyError: ``key`` is live already.
        """
        if key in self._live or key in self._groups:
            raise KeyError(f"{key!r} is allocated already")
        self._groups[key] = [self._take(n) for n in sizes if n > 0]

    def touch(self, nbytes: float) -> None:
        """Allocate a tensor of ``nbytes`` and free it at once (a transient: a layer's working
        memory), as :meth:`alloc` then :meth:`free` of a new key. Where a cached block fits
        that leaves the cache as it was (the block split off is merged back, and a block in
        the cache has no free neighbour), so only the peaks are counted."""
        if nbytes <= 0:
            return
        asked, size, small, pool, i = self._request(nbytes)
        if i is None or pool[i][3].unmapped:
            self._give(*self._take(nbytes))
            return
        found = pool[i][0]
        handed = size if self._splits(found - size, size, small) else found
        self.peak_allocated = max(self.peak_allocated, self.allocated + handed)
        self.peak_requested = max(self.peak_requested, self.requested + asked)

    def free(self, key: object) -> None:
        """Free the tensor ``key`` (unknown keys are ignored)."""
        entry = self._live.pop(key, None)
        if entry is not None:
            self._give(*entry)

    def free_all(self, key: object) -> None:
        """Free the tensors :meth:`alloc_all` named ``key``, last first (unknown keys are
        ignored)."""
        for entry in reversed(self._groups.pop(key, ())):
            self._give(*entry)

    # -- internals ----------------------------------------------------------------------
    def _take(self, nbytes: float) -> tuple[Block, int]:
        """The block handed out for a request of ``nbytes`` (> 0) and the bytes asked."""
        asked, size, small, pool, i = self._request(nbytes)  # the best fit, else a new block
        block = self._new_block(small, size) if i is None else pool.pop(i)[3]
        unmapped = block.unmapped
        whole = block.size
        if self._splits(whole - size, size, small):
            block = self._split(block, size)
        if unmapped:  # map_block: the pages the allocation covers come back first
            block.unmapped = 0
            page = SMALL_BUFFER_BYTES if small else LARGE_BUFFER_BYTES
            need = unmapped if block.size == whole else min(unmapped, page * math.ceil(size / page))
            if self.reserved + need > self.capacity_bytes:
                self._release_cached()
            self._grow(need)
            if block.next is not None and block.size < whole:
                block.next.unmapped = unmapped - need
        block.free = False
        self.allocated += block.size
        self.requested += asked
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        if self.requested > self.peak_requested:
            self.peak_requested = self.requested
        return block, asked

    def _give(self, block: Block, asked: int) -> None:
        """Return ``block`` (handed out for ``asked`` bytes) to the cache."""
        self.allocated -= block.size
        self.requested -= asked
        block.free = True
        self._merge(block)

    def _request(self, nbytes: float) -> tuple[int, int, bool, list[FreeBlock], int | None]:
        """A request of ``nbytes`` (> 0): the bytes asked, its rounded size, its pool (small or
        large, :func:`is_small`), that pool's free list and where the block it takes is in it
        (:meth:`_fit`; None: a new block)."""
        known = self._sizes.get(nbytes)  # tensors of a size recur: rounded once
        if known is None:
            asked = math.ceil(nbytes)
            size = round_size(asked, self._divisions)
            known = self._sizes[nbytes] = (asked, size, is_small(size))
        asked, size, small = known
        pool = self._free[small]
        return asked, size, small, pool, self._fit(pool, size)

    def _fit(self, pool: list[FreeBlock], size: int) -> int | None:
        """Where in ``pool`` (a pool's free blocks) the block a request of ``size`` takes is:
        the smallest cached block that fits (only that one is considered, as
        ``get_free_block`` takes the set's lower bound), unless the oversize rules refuse it
        (None: a new block is made)."""
        i = bisect_left(pool, (size,))
        if i == len(pool):
            return None
        found = pool[i][0]
        cap = self._cap
        if size < cap <= found:
            return None  # an oversize block is not split for a smaller request
        if size >= cap and found >= size + MAX_NON_SPLIT_ROUNDING_BYTES:
            return None
        return i

    def _new_block(self, small: bool, size: int) -> Block:
        if self.config.expandable_segments:
            return self._expand(small, size)
        nbytes = segment_size(size)
        if self.reserved + nbytes > self.capacity_bytes:
            self._release_cached()
        seg = Segment(small, size=nbytes)
        self._segments.append(seg)
        block = Block(len(self._segments) - 1, 0, nbytes, small)
        seg.tail = block
        self._grow(nbytes)
        return block

    def _expand(self, small: bool, size: int) -> Block:
        page = SMALL_BUFFER_BYTES if small else LARGE_BUFFER_BYTES
        if small not in self._expandable:
            self._segments.append(Segment(small))
            self._expandable[small] = len(self._segments) - 1
        idx = self._expandable[small]
        seg = self._segments[idx]
        for attempt in (0, 1):
            tail = seg.tail if seg.tail is not None and seg.tail.free else None
            have = tail.size if tail else 0
            mapped = page * math.ceil((size - have) / page)
            if attempt or self.reserved + mapped <= self.capacity_bytes:
                break
            self._release_cached()
        self._grow(mapped)
        seg.size += mapped
        if tail is not None:
            self._unlist(tail)
            tail.size += mapped
            return tail
        block = Block(idx, seg.size - mapped, mapped, small)
        block.prev = seg.tail
        if seg.tail is not None:
            seg.tail.next = block
        seg.tail = block
        return block

    def _release_cached(self) -> None:
        """``release_cached_blocks``: every segment that is one free block goes back to the
        driver; in an expandable segment every free block unmaps its whole pages
        (``unmap_block``). Without a wholly free segment (``_whole_free``) nothing goes."""
        expandable = self.config.expandable_segments
        if not expandable and not self._whole_free:
            return
        self._whole_free = False  # the scan releases every one
        for small, pool in self._free.items():
            keep = []
            for entry in pool:
                block = entry[3]
                if expandable:
                    self._unmap(small, block)
                    keep.append(entry)
                elif block.prev is None and block.next is None:
                    self.reserved -= block.size
                    seg = self._segments[block.segment]
                    seg.size, seg.tail = 0, None
                else:
                    keep.append(entry)
            self._free[small] = keep

    def _unmap(self, small: bool, block: Block) -> None:
        page = SMALL_BUFFER_BYTES if small else LARGE_BUFFER_BYTES
        start = page * math.ceil(block.offset / page)
        end = page * ((block.offset + block.size) // page)
        pages = max(0, end - start)
        if pages > block.unmapped:
            self.reserved -= pages - block.unmapped
            block.unmapped = pages

    def _grow(self, nbytes: int) -> None:
        self.reserved += nbytes
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved

    def _splits(self, rest: int, size: int, small: bool) -> bool:
        """Whether a block ``rest`` bytes larger than the request ``size`` is split
        (``should_split``)."""
        if small or self.config.expandable_segments:
            return rest >= MIN_BLOCK_BYTES
        return size < self._cap and rest > SMALL_SIZE_BYTES


OPS = ("alloc", "free", "touch", "alloc_all", "free_all")
"""What :func:`replay` runs (:data:`Op`)."""

Op = tuple[str, object, Any]
"""``("alloc", key, bytes)``, ``("free", key, 0)``, ``("touch", key, bytes)`` (allocated and
freed at once: :meth:`CachingAllocator.touch`), ``("alloc_all", key, (bytes, ...))`` and
``("free_all", key, 0)`` (tensors allocated and freed together:
:meth:`CachingAllocator.alloc_all`)."""


@dataclass(frozen=True)
class AllocatorPeaks:
    """Peaks of a replay, in bytes: ``allocated`` (what ``max_memory_allocated`` reports),
    ``reserved`` (``max_memory_reserved``) and ``requested`` (the tensors' own bytes at the
    allocated peak's end state is not tracked: the largest sum of live requests)."""

    allocated: int
    reserved: int
    requested: int

    @property
    def fragmentation_bytes(self) -> int:
        """``reserved - allocated``: segments' bytes no live block uses at the reserved peak's
        scale (rounding of segments, splits that cannot be reused)."""
        return self.reserved - self.allocated


def replay(
    ops: Iterable[Op], config: AllocatorConfig | None = None, capacity_bytes: float = math.inf
) -> AllocatorPeaks:
    """Run ``ops`` (``(op, tensor name, bytes)``, ``op`` one of :data:`OPS`) through a
    :class:`CachingAllocator` (that may reserve ``capacity_bytes`` before it releases its
    cached segments) and return its peaks (bytes).

    Raises:
        ValueError: an op not in :data:`OPS`.

    Example:
        >>> ops = [("alloc", "a", 16 * MIB), ("alloc", "b", 16 * MIB), ("free", "a", 0),
        ...        ("free", "b", 0), ("alloc", "c", 32 * MIB)]
        >>> p = replay(ops)  # two 16 MiB segments cannot merge: a third one is reserved
        >>> p.allocated // MIB, p.reserved // MIB
        (32, 64)
        >>> p = replay(ops, AllocatorConfig(expandable_segments=True))
        >>> p.allocated // MIB, p.reserved // MIB
        (32, 40)
    """
    alloc = CachingAllocator(config, capacity_bytes)
    for op, key, nbytes in ops:
        if op == "alloc":
            alloc.alloc(key, nbytes)
        elif op == "touch":
            alloc.touch(nbytes)
        elif op == "alloc_all":
            alloc.alloc_all(key, nbytes)
        elif op == "free_all":
            alloc.free_all(key)
        elif op == "free":
            alloc.free(key)
        else:
            raise ValueError(f"unknown allocator op {op!r}; use {', '.join(OPS)}")
    return AllocatorPeaks(alloc.peak_allocated, alloc.peak_reserved, alloc.peak_requested)

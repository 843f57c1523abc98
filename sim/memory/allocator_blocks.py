"""The caching allocator's blocks and segments, as data: each segment a list of blocks by
address (``prev``/``next``), each pool's cached free blocks a list by size (``get_free_block``'s
set), and the two changes of shape the allocator makes to them: a block split in two
(``split``'s remainder after it) and a freed block merged with its free neighbours of the same
segment (``free_block``, ``try_merge_blocks`` in ``c10/cuda/CUDACachingAllocator.cpp``,
pytorch/pytorch@001074d).

:class:`BlockLists` holds them; :class:`sim.memory.allocator.CachingAllocator` decides when to
split, which block to take and when to reserve or release segments.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass


class Block:
    """A block of a segment: a doubly linked list by address (``prev``/``next``)."""

    __slots__ = ("segment", "offset", "size", "small", "free", "prev", "next", "unmapped")

    def __init__(self, segment: int, offset: int, size: int, small: bool):
        self.segment, self.offset, self.size, self.small = segment, offset, size, small
        self.free = True
        self.unmapped = 0  # bytes of its pages unmapped by a release (expandable segments)
        self.prev: Block | None = None
        self.next: Block | None = None


FreeBlock = tuple[int, int, int, Block]
"""A cached free block in its pool's list, ``(size, segment, offset, block)``: sorted as
``get_free_block``'s set is (by size, then address; ``(segment, offset)`` is unique, so the
block itself is never compared)."""


@dataclass
class Segment:
    """A segment: its pool (``small``), its bytes (mapped ones, for an expandable segment) and
    its last block by address."""

    small: bool
    size: int = 0
    tail: Block | None = None  # the last block by address


class BlockLists:
    """The segments (by index) and each pool's free list (``True``: the small pool)."""

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self._free: dict[bool, list[FreeBlock]] = {True: [], False: []}
        self._whole_free = False
        """Whether a block listed since this was last cleared is a whole segment (no
        neighbour): where it is False no cached segment is wholly free (a free block's
        neighbours change only as it is freed, merged and listed again)."""

    def _split(self, block: Block, size: int) -> Block:
        """``block`` cut to ``size`` bytes, the rest a free block after it."""
        rest = block.size - size
        remainder = Block(block.segment, block.offset + size, rest, block.small)
        remainder.prev, remainder.next = block, block.next
        if block.next is not None:
            block.next.prev = remainder
        else:
            self._segments[block.segment].tail = remainder
        block.next = remainder
        block.size = size
        self._list(remainder)
        return block

    def _merge(self, block: Block) -> None:
        """Free ``block`` into its pool's list, merged with its free neighbours first
        (``try_merge_blocks`` with the next block, then the previous one)."""
        nxt = block.next
        if nxt is not None and nxt.free:
            self._unlist(nxt)
            self._absorb(block, nxt)
        prev = block.prev
        if prev is not None and prev.free:
            self._unlist(prev)
            self._absorb(prev, block)
            block = prev
        self._list(block)

    def _absorb(self, block: Block, nxt: Block) -> None:
        """``block`` grown over ``nxt``, the block after it, which leaves the address list."""
        block.size += nxt.size
        block.unmapped += nxt.unmapped
        block.next = nxt.next
        if nxt.next is not None:
            nxt.next.prev = block
        else:
            self._segments[block.segment].tail = block

    def _list(self, block: Block) -> None:
        """Cache ``block`` in its pool's free list."""
        if block.prev is None and block.next is None:
            self._whole_free = True
        insort(self._free[block.small], (block.size, block.segment, block.offset, block))

    def _unlist(self, block: Block) -> None:
        """Take ``block`` out of its pool's free list (if it is there)."""
        pool = self._free[block.small]
        i = bisect_left(pool, (block.size, block.segment, block.offset))
        if i < len(pool) and pool[i][3] is block:
            del pool[i]

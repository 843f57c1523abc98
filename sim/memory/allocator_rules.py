"""PyTorch's CUDA caching allocator, its sizes: how a request is rounded, which pool it comes
from, and how large a segment it reserves when no cached block fits; the options of
``PYTORCH_CUDA_ALLOC_CONF`` that change them (:class:`AllocatorConfig`).

From ``c10/cuda/CUDACachingAllocator.cpp`` (pytorch/pytorch@001074d, the constants identical in
torch 2.13's ``c10/core/AllocatorConfig.h`` at cf30153); :mod:`sim.memory.allocator` replays
the blocks and segments these sizes give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIB = 1 << 20
MIN_BLOCK_BYTES = 512
"""``kMinBlockSize``: every size is rounded to a multiple of 512 bytes."""
SMALL_SIZE_BYTES = MIB
"""``kSmallSize``: the largest small-pool request."""
SMALL_BUFFER_BYTES = 2 * MIB
"""``kSmallBuffer``: small-pool segment size (and its expandable page size)."""
MIN_LARGE_ALLOC_BYTES = 10 * MIB
"""``kMinLargeAlloc``: requests between 1 and 10 MiB take a 20 MiB segment."""
ROUND_LARGE_BYTES = 2 * MIB
"""``kRoundLarge``: larger requests get a segment rounded up to 2 MiB."""
LARGE_BUFFER_BYTES = 20 * MIB
"""``kLargeBuffer``: large segment for mid-size requests (and the large pool's expandable page
size, ``large_segment_size_mb`` in torch 2.13)."""
MAX_NON_SPLIT_ROUNDING_BYTES = 20 * MIB
"""``max_non_split_rounding_mb`` default: how much larger an unsplit cached oversize block may
be than the request."""


@dataclass(frozen=True)
class AllocatorConfig:
    """``PYTORCH_CUDA_ALLOC_CONF`` options the model follows (defaults: PyTorch's).

    Attributes:
        expandable_segments: ``expandable_segments:True``.
        roundup_power2_divisions: ``roundup_power2_divisions`` (0: 512-byte rounding only).
        max_split_size_bytes: ``max_split_size_mb`` in bytes (inf: unlimited).
    """

    expandable_segments: bool = False
    roundup_power2_divisions: int = 0
    max_split_size_bytes: float = math.inf

    def __post_init__(self) -> None:
        if self.roundup_power2_divisions < 0:
            raise ValueError("roundup_power2_divisions must be >= 0")
        if self.max_split_size_bytes <= LARGE_BUFFER_BYTES:
            raise ValueError("max_split_size must be more than 20 MiB (PyTorch's lower limit)")


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """``size`` rounded up to the next of ``divisions`` equal steps between the powers of two
    around it (``roundup_power2_next_division``; ``divisions`` taken as its power-of-two floor).

    Example:
        >>> roundup_power2_next_division(1200, 4)  # steps of 256 between 1024 and 2048
        1280
        >>> roundup_power2_next_division(1024, 4)
        1024
    """
    if size & (size - 1) == 0:
        return size
    floor2 = 1 << (size.bit_length() - 1)
    step = floor2 >> (divisions.bit_length() - 1)
    if step == 0:
        return floor2 << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


def round_size(nbytes: float, divisions: int = 0) -> int:
    """The block size of a request of ``nbytes`` (``round_size``).

    Example:
        >>> round_size(1), round_size(512), round_size(513), round_size(1200, divisions=4)
        (512, 512, 1024, 1536)
    """
    size = math.ceil(nbytes)
    if size < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    if divisions > 1 and size > MIN_BLOCK_BYTES * divisions:
        return roundup_power2_next_division(size, divisions)
    return -(-size // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def is_small(size: int) -> bool:
    """Whether a rounded request comes from the small pool (``size <= 1 MiB``)."""
    return size <= SMALL_SIZE_BYTES


def segment_size(size: int) -> int:
    """Bytes of the new segment a rounded request ``size`` reserves (``get_allocation_size``).

    Example:
        >>> [segment_size(n) // MIB for n in (512, MIB, MIB + 512, 10 * MIB, 11 * MIB + 1)]
        [2, 2, 20, 10, 12]
    """
    if size <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return ROUND_LARGE_BYTES * math.ceil(size / ROUND_LARGE_BYTES)

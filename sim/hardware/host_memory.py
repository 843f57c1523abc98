"""Host memory as the OS and torch's pinned-memory allocator give it to a training process.

* **Usable DRAM** (:func:`os_usable_bytes`). Linux reports as ``MemTotal`` the installed DRAM
  minus what it reserves at boot, first of all the page map: one 64-byte ``struct page`` per
  4 KiB page (``include/linux/mm_types.h``; ``MemTotal``: "Total usable RAM (i.e. physical RAM
  minus a few reserved bits and the kernel binary code)", ``Documentation/filesystems/proc.rst``),
  ``1/64`` of the DRAM. Check: a 2x EPYC 7742 node with 1 TiB and A100-SXM4-40GB GPUs (a DGX
  A100's configuration) reports ``MemTotal: 1056649460 kB`` = 1007.7 GiB = 98.4 % of 1 TiB
  (a public ``/proc/meminfo`` listing); ``1024 * 63/64`` = 1008 GiB. Frameworks size their host
  pools from this figure (PatrickStar: ``psutil.virtual_memory().total``,
  ``patrickstar/utils/memory_monitor.py``).
* **Pinned blocks** (:func:`pinned_block_bytes`). ``pin_memory=True`` allocations go through
  torch's ``CachingHostAllocator``: torch 2.x rounds every request up to the next power of two
  (``c10::llvm::PowerOf2Ceil(size)`` in ``CachingHostAllocatorImpl::allocate``,
  ``aten/src/ATen/core/CachingHostAllocator.h``; pytorch/pytorch#150517; measured 1.78x for a
  2.25 GiB request on torch 2.13, wtdcode/vllm-backport#67); torch 1.x allocated the exact size
  (``cudaHostAlloc(&ptr, size, ...)`` in ``aten/src/ATen/cuda/CachingHostAllocator.cpp``,
  ``CUDAHostAllocator::allocate``). Neither splits a block.
* **Caching** (:func:`cached_pinned_bytes`). A freed pinned block goes back to the allocator's
  free list of its size class and is never returned to the OS (``free``: ``free_list_[index]
  .list_.push_back(block)``; only ``empty_cache`` releases it) and a request is served from the
  free list of its own size class (``get_free_block(roundSize)``). Bytes that move between
  size classes over an iteration (PatrickStar's fp16 and fp32 chunks) therefore hold each
  class's own peak: the host keeps ``sum(peak per class)``, not the peak of the sum.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

PAGE_BYTES = 4096
"""x86-64 base page."""

STRUCT_PAGE_BYTES = 64
"""``sizeof(struct page)`` on x86-64 (``include/linux/mm_types.h``)."""

MEMMAP_SHARE = STRUCT_PAGE_BYTES / PAGE_BYTES
"""Share of installed DRAM the kernel's page map takes before ``MemTotal`` (1/64)."""

POWER_OF_TWO = "power-of-two"
EXACT = "exact"
PINNED_ROUNDING = POWER_OF_TWO
"""How pinned allocations are sized: torch 2.x (this project pins torch 2.13) rounds them up to
a power of two (module doc)."""


def os_usable_bytes(installed_bytes: float) -> float:
    """``MemTotal`` of a host with ``installed_bytes`` of DRAM: ``installed * (1 - 1/64)``.

    Raises:
        ValueError: a negative size.
    """
    if installed_bytes < 0:
        raise ValueError(f"installed DRAM must be >= 0, got {installed_bytes}")
    return installed_bytes * (1.0 - MEMMAP_SHARE)


def pinned_block_bytes(nbytes: float, rounding: str = PINNED_ROUNDING) -> float:
    """Bytes one pinned allocation of ``nbytes`` takes (module doc); 0 for 0.

    Raises:
        ValueError: an unknown ``rounding`` or a negative size.
    """
    if nbytes < 0:
        raise ValueError(f"a pinned allocation must be >= 0 bytes, got {nbytes}")
    if rounding == EXACT or nbytes == 0:
        return float(nbytes)
    if rounding != POWER_OF_TWO:
        raise ValueError(f"rounding must be {POWER_OF_TWO!r} or {EXACT!r}, got {rounding!r}")
    return float(2 ** math.ceil(math.log2(math.ceil(nbytes))))


def pinned_bytes(sizes: Iterable[float], rounding: str = PINNED_ROUNDING) -> float:
    """Bytes a set of live pinned allocations takes, each rounded on its own."""
    return sum(pinned_block_bytes(s, rounding) for s in sizes)


def cached_pinned_bytes(peak_blocks: Mapping[float, int], rounding: str = PINNED_ROUNDING) -> float:
    """Host bytes the caching allocator keeps for blocks that come and go: for each request
    size (bytes), the peak number live at once over the run, each class on its own (module
    doc: a cached block serves only its own size class)."""
    return sum(n * pinned_block_bytes(size, rounding) for size, n in peak_blocks.items())

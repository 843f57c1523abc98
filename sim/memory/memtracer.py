"""PatrickStar's memory tracer: how much of the GPU and the host its chunks may use.

Source: Tencent/PatrickStar ``patrickstar/core/memtracer/memtracer.py`` (``RuntimeMemTracer``,
commit 122e55e) and ``patrickstar/core/client.py`` (``param_fp16_chunks_max_mem_usage``).
``C`` is the chunk size in elements, ``w`` the data-parallel world size, ``T`` the GPU's total
memory as CUDA reports it (``torch.cuda.get_device_properties(rank).total_memory``).

* **GPU** (``__init__``): ``overall_gpu_mem = T * overall_gpu_mem_ratio`` (default 0.8): chunks
  and every other tensor (``sys`` = ``torch.cuda.memory_allocated()`` minus the chunks,
  ``utils/memory_monitor.py``) share it; the CUDA context and NCCL's buffers are outside.
  After the warm-up, chunks may use at moment ``t`` of a forward or backward
  (``available_chunk_mem``) ``overall_gpu_mem - max(sys[t], sys[t+1]) - w * 2 * C`` bytes
  (one chunk group of 16-bit chunks kept free for the next all-gather; one chunk with
  memory-saving communication, MSC, which broadcasts the chunks one by one, from 2b29d81 and
  44104b8, 2021-12-17; up to v0.4.5 a group with MSC too: ``- world_size * 2 *
  self._default_chunk_size`` at e98f4e1 ``memtracer.py``).
* **Hybrid Adam** (``update_margin_mem``, after the warm-up backward): ``margin = overall_gpu_mem
  - max(sys) - param_fp16_chunks_max_mem_usage`` with the latter ``n * 2C + (w - 1) * 2C``
  (``n`` chunks owned, plus one group's remote chunks), or ``n * 2C + 2C`` with MSC from
  b4cd853 (2021-12-16; at 2384535 ``client.py`` 311-334); up to v0.4.5 the group's with MSC
  too (e98f4e1 ``client.py`` 307-321); ``margin / (12 C) * margin_use_ratio``
  (default 0.8) chunk groups of fp32 parameter, momentum and variance may be updated on the
  GPU ("12 = 4 + 4 + 4 fp32 + m + v"): the step's first ``ceil(margin) - 1`` owned chunks
  (:func:`gpu_adam_chunk_count`); the rest go through CPU Adam.
* **Host** (``__init__``): ``overall_cpu_mem = psutil total * overall_cpu_mem_ratio (0.8) /
  world_size``: chunks a rank may keep in host DRAM. ``psutil``'s total is ``MemTotal``
  (:func:`sim.hardware.host_memory.os_usable_bytes`). On one server ``world_size`` is its ranks.

The two ratios leave ``(1 - 0.8)`` of the GPU and of the host out of the chunks' reach; the
plan charges that share (less the CUDA runtime, which lies outside ``overall_gpu_mem`` anyway)
as the framework's, so the ledger overflows exactly when PatrickStar would not place its chunks.

**Chunk size** (:func:`chunk_candidates`): PatrickStar's benchmark searches chunk sizes from
312M down to 64M elements in steps of 32M (``examples/run_transformers.sh``, ``CS_SEARCH``,
``for((i=312;i>=64;i-=32))``) and reports each one's utilization (``eval_chunk_size.py``); a
size is only possible when the largest parameter group fits in a chunk. Where no size up to
312M holds it, the candidates here continue upwards in the same 32M steps up to twice the
largest group (an assumption: PatrickStar's script stops at 312M and its A100 benchmark sets
256M or 384M by hand, ``examples/benchmark/run_a100_benchmark_large_model.sh``). The policy
runs the candidate the search recommends: of those that fit, the smallest footprint, i.e. the
best utilization (:func:`search_score`; the search times nothing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.hardware.host_memory import EXACT
from sim.memory.chunks import pack, utilization

MIB = 2**20
OVERALL_GPU_MEM_RATIO = 0.8
"""``overall_gpu_mem_ratio`` default (``RuntimeMemTracer.__init__``)."""
OVERALL_CPU_MEM_RATIO = 0.8
"""``overall_cpu_mem_ratio`` default."""
MARGIN_USE_RATIO = 0.8
"""``margin_use_ratio`` default: share of the post-warm-up margin given to GPU Adam chunks."""
OS_BYTES = 12
"""fp32 parameter + momentum + variance bytes per element ("12 = 4 + 4 + 4")."""
SEARCH_MELEMS = tuple(range(312, 63, -32))
"""Chunk sizes (M elements) PatrickStar's ``CS_SEARCH`` tries."""
SEARCH_STEP_MELEMS = 32
PINNED_ROUNDING = EXACT
"""How torch sizes PatrickStar's pinned CPU chunks: exactly. PatrickStar runs on torch 1.x (its
README tests the ``nvcr.io/nvidia/pytorch:21.06-py3`` image, torch 1.9), whose caching host
allocator allocates the requested size (:mod:`sim.hardware.host_memory`); under torch 2.x every chunk
would take the next power of two."""


def overall_gpu_bytes(cuda_total_bytes: float) -> float:
    """GPU bytes chunks and other tensors may use together: ``0.8 T``."""
    return OVERALL_GPU_MEM_RATIO * cuda_total_bytes


def chunkable_gpu_bytes(
    cuda_total_bytes: float,
    sys_bytes: float,
    dp_width: int,
    chunk_elems: int,
    d: int,
    msc: bool = False,
) -> float:
    """Chunk bytes allowed on the GPU during a forward or backward whose other tensors peak at
    ``sys_bytes``: ``0.8 T - sys - w * C * d`` (``d`` bytes per 16-bit element); with
    memory-saving communication accounted (``msc``) one chunk is kept free, not a group
    (``available_chunk_mem``: ``msc_factor = 1 if with_mem_saving_comm else world_size``, from
    44104b8; PatrickStar up to v0.4.5 keeps a group with MSC too: pass ``msc=False``)."""
    kept = 1 if msc else dp_width
    return overall_gpu_bytes(cuda_total_bytes) - sys_bytes - kept * chunk_elems * d


def gpu_adam_chunks(
    cuda_total_bytes: float,
    sys_bytes: float,
    owned: int,
    dp_width: int,
    chunk_elems: int,
    d: int,
    msc: bool = False,
) -> float:
    """Optimizer chunk groups hybrid Adam updates on the GPU (``update_margin_mem``), >= 0.
    The 16-bit chunks it counts (``client.param_fp16_chunks_max_mem_usage``) are the owned ones
    and a group's remote chunks, or one chunk with memory-saving communication accounted
    (``msc``, from b4cd853; up to v0.4.5 a group with MSC too: pass ``msc=False``)."""
    remote = 1 if msc else dp_width - 1
    fp16 = owned * chunk_elems * d + remote * chunk_elems * d
    margin = overall_gpu_bytes(cuda_total_bytes) - sys_bytes - fp16
    return max(0.0, margin / (chunk_elems * OS_BYTES) * MARGIN_USE_RATIO)


def gpu_adam_chunk_count(margin: float) -> int:
    """Optimizer chunks hybrid Adam updates on the GPU for a margin of ``margin`` chunk groups
    (:func:`gpu_adam_chunks`): ``FP32ChunkReadBuffer.access_from_cache`` counts the owned chunks
    as the step visits them, ``cached_chunk_num += 1``, and sends a chunk to the GPU while
    ``cached_chunk_num < margin_chunk_num_for_gpu_adam`` (Tencent/PatrickStar@4ef26cc
    ``patrickstar/ops/chunk_io_buff.py`` 235-236; the same at 6ee4fe8 and 2384535): chunks
    1, 2, ... strictly below the margin, ``ceil(margin) - 1`` of them (``floor(margin)`` but for
    a whole margin, which gets one fewer), never fewer than 0.

    >>> gpu_adam_chunk_count(3.62), gpu_adam_chunk_count(3.0), gpu_adam_chunk_count(0.4)
    (3, 2, 0)
    """
    return max(0, math.ceil(margin) - 1)


def host_chunk_cap_bytes(mem_total_bytes: float, ranks: int) -> float:
    """Host bytes one rank's chunks may take: ``0.8 * MemTotal / ranks``."""
    return OVERALL_CPU_MEM_RATIO * mem_total_bytes / max(1, ranks)


def gpu_framework_bytes(cuda_total_bytes: float, runtime_bytes: float) -> float:
    """GPU bytes out of the chunks' and tensors' reach that the runtime reserve (context,
    cuBLAS, NCCL, allocator margin: ``runtime_bytes``) does not already cover."""
    return max(0.0, (1 - OVERALL_GPU_MEM_RATIO) * cuda_total_bytes - runtime_bytes)


def host_framework_bytes(mem_total_bytes: float, ranks: int) -> float:
    """Host bytes per rank out of the chunks' reach: ``0.2 * MemTotal / ranks``."""
    return (1 - OVERALL_CPU_MEM_RATIO) * mem_total_bytes / max(1, ranks)


def chunk_candidates(groups: Sequence[float]) -> list[int]:
    """Chunk sizes (elements) to try for parameter ``groups``: PatrickStar's search sizes that
    hold the largest group; if none does, the 32M steps above 312M from the first that holds
    it up to twice it (module doc)."""
    largest = max(groups, default=0.0)
    melems = [m for m in SEARCH_MELEMS if m * MIB >= largest]
    if not melems:
        m = SEARCH_MELEMS[0] + SEARCH_STEP_MELEMS
        while m * MIB < largest:
            m += SEARCH_STEP_MELEMS
        melems.append(m)
        while (m := m + SEARCH_STEP_MELEMS) * MIB <= 2 * largest:
            melems.append(m)
    return sorted(m * MIB for m in melems)


def best_utilization(groups: Sequence[float]) -> int:
    """The candidate chunk size (:func:`chunk_candidates`) whose chunks the parameters fill
    best, as PatrickStar's search reports it; ties go to the smaller size."""
    return max(chunk_candidates(groups), key=lambda c: utilization(pack(groups, c), c))


def search_score(
    groups: list[float], chunk_elems: int, short: float, added_ms: float
) -> tuple[float, float, float]:
    """Sort key of a candidate chunk size (smallest first): of the sizes whose plans fit
    (``short == 0`` bytes lacking), the one whose chunks the parameters ``groups`` fill best,
    ties to the smaller size; then, where none fits, the fewest bytes lacking and the least
    ``added_ms``.

    PatrickStar's chunk-size search (``CS_SEARCH=1 bash run_transformers.sh``, 312M down to
    64M elements; ``examples/eval_chunk_size.py``) drops the sizes whose chunks do not fit
    (``chunk_schema_valid_check``) and reports for the rest the chunks' overall size and
    utilization (``client.get_overall_chunk_size``), "to find a CS with less memory footprint"
    (Tencent/PatrickStar@2384535 ``examples/README.md``, "Search the best chunk size"): the
    smallest overall size, which for the same parameters is the highest utilization
    (:func:`best_utilization`, as :mod:`sim.memory.auto` picks it). It
    does not time them. Assumption: the published runs used the size the search recommends
    (which size each used is not recorded; the A100 benchmark scripts sweep 256M and 384M,
    ``examples/benchmark/run_a100_benchmark_*.sh``).

    Example:
        >>> M = 2**20
        >>> search_score([90 * M, 90 * M], 100 * M, 0.0, 5.0) < search_score(
        ...     [90 * M, 90 * M], 200 * M, 0.0, 1.0)  # 90 % full beats 90 %: tie, smaller
        True
    """
    if short > 0:
        return (short, 0.0, added_ms)
    return (0.0, -utilization(pack(groups, chunk_elems), chunk_elems), chunk_elems)

"""Megatron-Core's MoE paged stash: the fused grouped MLP's saved tensors copied into pages.

**What runs** (``--moe-paged-stash``; Megatron-Bridge's 26.06+ full-iteration MXFP8 MoE recipes
set ``moe_paged_stash=True`` with ``moe_expert_rank_capacity_factor``: GPT-OSS, Qwen3,
DeepSeek-V3/V4, NVIDIA-NeMo/Megatron-Bridge@067f987 ``src/megatron/bridge/perf_recipes/
gpt_oss/common.py`` lines 23-41, with a host spill buffer, ``moe_paged_stash_buffer_size_factor_cpu`` 1.0, that balanced routing leaves unused). Megatron-Core wraps the experts of Transformer Engine's fused
grouped MLP in a ``saved_tensors_hooks`` context (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/moe/experts.py`` lines 766-828, ``moe/paged_stash.py``
``on_save_for_backward`` 684-778): every tensor the fused op saves for its backward that
Transformer Engine marks as a grouped tensor is packed into fixed-size pages of a preallocated
buffer, and unpacked into a fresh tensor before the experts' backward. The marked tensors
(NVIDIA/TransformerEngine@d0067d0 ``transformer_engine/pytorch/ops/fused/grouped_mlp.py``
lines 1747-1806, ``utils.py`` ``mark_grouped_tensor`` 308-328; MXFP8 keeps only the columnwise
copies of the GEMM inputs, lines 1765-1770), per row an expert receives:

* the first GEMM's input, columnwise MXFP8: ``w`` bytes of data and ``w / 32`` of E8M0 scales
  (``w``: the row width, the latent width of a latent MoE);
* the first GEMM's output (the activation's input), BF16 (``c_dtype``, line 1407): ``2 up``
  bytes (``up``: the first GEMM's width, ``2 f_e`` gated);
* the routing probability, fp32: 4 bytes;
* the second GEMM's input, columnwise MXFP8: ``f_e`` bytes and ``f_e / 32`` of scales.

Each is one Triton kernel, timed at its measured speed (:mod:`sim.compute.stash_copy_speed`),
over the rows the rank received (the device-side token count, not the
capacity-padded buffer: ``paged_stash_copy_kernel`` / ``paged_stash_pop_kernel``,
``moe/ops/paged_stash.py``), which reads and writes every byte: **forward** a copy into the
pages after the experts (``stash_paged_tensors``, ``paged_stash.py`` 478-502), with two
``zero_`` fills of its page record and spill flag and a ``copy_`` of the free-list head
(``offload_to_stash`` 198-249), and the token count's ``sum`` and ``clone`` before the experts
(``experts.py`` 780, ``get_paged_stash_context`` 871); **backward** a copy out of the pages
before the experts' backward (``reload_paged_tensors`` 516-549) and a ``copy_`` of the free-list
tail (``reload_from_stash`` 251-298). The bookkeeping kernels move next to nothing: one chain of
launches each way (a kernel whose ``batch`` is their count, :mod:`sim.compute.kernels`).

**Timing.** The copies run on the manager's pack stream (one stream for both ways,
``paged_stash.py`` 404-407) while the compute stream goes on (the next layer's attention and
dispatch; the experts of the next MoE layer wait for it, ``PipelinePreScheduleFunction``
301-328). They are timed in line with the compute stream (an assumption): a copy is bound by
HBM and by the SMs it gets, and the kernels it runs beside are either persistent compute
kernels that hold every SM (cuDNN attention, the CuTe-DSL grouped GEMMs) or memory-bound ones
that use the same HBM, so little of it hides (Megatron-LM#6414 offers CuTe-DSL copies of 32
threads per CTA because they "leave more SM capacity for the compute the pack stream overlaps
with": the default Triton copy takes SMs from it); the copy's time is an upper bound of its
cost.

Not modelled: the last MoE layer of a stage whose backward follows at once keeps its tensors
(``PipelinePostScheduleFunction`` 343-357: one layer of a stage's ``L``), every layer is charged;
the pages' memory (sized from the balanced token count times
``moe_paged_stash_buffer_size_factor_cuda``) is counted as the activations it holds.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.kernels import Kernel, mem
from sim.compute.stash_copy_speed import META_SUFFIX
from sim.hardware.formats import FP32_BYTES

SCALE_BLOCK = 32
"""Elements per MXFP8 scale (E8M0, one byte), along the token dimension of a columnwise copy."""
ACT_IN_BYTES = 2
"""Bytes per element of the saved first-GEMM output (BF16, ``c_dtype``)."""
PROB_BYTES = FP32_BYTES
"""Bytes of a row's routing probability (fp32)."""
FWD_SMALL_KERNELS_PER_TENSOR = 3
"""``page_record.zero_()``, ``spilled_to_host.zero_()``, ``free_list_head.copy_()``."""
FWD_SMALL_KERNELS_PER_LAYER = 2
"""``tokens_per_expert.sum()`` and its ``clone()`` (the stash context's token count)."""
BWD_SMALL_KERNELS_PER_TENSOR = 1
"""``free_list_tail.copy_()``."""


def saved_row_bytes(w: int, up: int, fe: int) -> tuple[tuple[str, float], ...]:
    """``(tensor, bytes per received row)`` of each tensor the fused grouped MLP stashes under
    MXFP8 (module doc): row width ``w``, first-GEMM width ``up``, expert width ``fe``.

    Example: GPT-OSS (2880, 5760, 2880): 2880 + 90 + 11520 + 4 + 2880 + 90 = 17464 bytes.
        >>> sum(b for _, b in saved_row_bytes(2880, 5760, 2880))
        17464.0
    """
    return (
        ("fc1_x", float(w)),
        ("fc1_x_scale", w / SCALE_BLOCK),
        ("act_in", float(ACT_IN_BYTES * up)),
        ("probs", float(PROB_BYTES)),
        ("fc2_x", float(fe)),
        ("fc2_x_scale", fe / SCALE_BLOCK),
    )


def stash_fwd(rows: float, w: int, up: int, fe: int) -> list[Kernel]:
    """The forward's kernels for ``rows`` received rows (module doc): each tensor's copy into
    the pages (reads and writes its bytes) and the small bookkeeping kernels (no bytes)."""
    tensors = saved_row_bytes(w, up, fe)
    small = FWD_SMALL_KERNELS_PER_LAYER + FWD_SMALL_KERNELS_PER_TENSOR * len(tensors)
    copies = [mem(f"paged_stash_{name}", 2.0 * rows * b) for name, b in tensors]
    return copies + [replace(mem("paged_stash" + META_SUFFIX, 0.0), batch=small)]


def stash_bwd(rows: float, w: int, up: int, fe: int) -> list[Kernel]:
    """The backward's kernels (module doc): each tensor copied out of the pages, and the
    free-list tail's ``copy_`` per tensor."""
    tensors = saved_row_bytes(w, up, fe)
    copies = [mem(f"paged_reload_{name}", 2.0 * rows * b) for name, b in tensors]
    small = BWD_SMALL_KERNELS_PER_TENSOR * len(tensors)
    return copies + [replace(mem("paged_reload" + META_SUFFIX, 0.0), batch=small)]

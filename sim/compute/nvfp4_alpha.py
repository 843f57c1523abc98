"""The per-tensor scale kernel Transformer Engine launches before each NVFP4 GEMM.

NVFP4 (``NVFP4BlockScaling``) keeps a per-tensor fp32 amax beside its E4M3 block scales. TE's
cuBLASLt path folds the two operands' per-tensor scales into the GEMM's ``alpha`` on the
device, before every NVFP4 GEMM: ``cublas_gemm`` calls ``nvte_nvfp4_compute_per_tensor_scale``
when an operand carries an amax (NVIDIA/TransformerEngine@71bbefb, TE 2.14, the 26.04
containers' ``common/gemm/cublaslt_gemm.cu`` 363-384; the same call at @70f5366 line 361, @5671fd3
385, @4220403 385, @d0067d0 383), which launches
``compute_nvfp4_per_tensor_scale_kernel<<<1, 1, 0, stream>>>`` on the GEMM's stream
(``common/recipe/nvfp4.cu`` 912-938 at @71bbefb): one single-thread kernel that reads the two
amaxes and writes one fp32, then the GEMM reads it. A dense NVFP4 linear pays it once per GEMM
(forward, input gradient and, the recipe's weight gradient being NVFP4 too, weight gradient);
``GroupedLinear``'s multi-stream loop (``multi_stream_cublas_gemm``, cublaslt_gemm.cu
969-1022) calls ``nvte_cublas_gemm_v2`` once per expert, so a grouped GEMM of ``c`` experts
launches ``c`` of them, one per local expert and GEMM: a cost that grows with the local experts
at a fixed token count (issue 26 item 7, ``measurements/megatron-bridge/moe_layer_gaps.md``,
"moefixed, session 13").

**Device.** One memory-bound kernel of :data:`ALPHA_BYTES` per GEMM (:func:`alpha_kernels`),
timed as every kernel is (:func:`sim.compute.kernels.kernel_time_s`: the GPU's
``kernel_overhead_s``, an assumption of the presets); a grouped GEMM's ``c`` of them are one
kernel of ``batch`` = ``c``, which runs ``c - 1`` launches back to back at
:data:`~sim.compute.kernels.BACK_TO_BACK_S` after the first, as the per-expert casts are
(:mod:`sim.compute.quantize`; the loop spreads them over 4 streams, each before its GEMM:
counted as one chain, an assumption).

**Host.** One C++ kernel launch per expert GEMM in ``GroupedLinear``'s per-expert host work
(:func:`alpha_launches`, :func:`sim.compute.te_grouped_host.per_expert_s`). A dense linear's
host work is the Transformer Engine module's measured figure (``te_module``), which does not
itemize its launches: not added there.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.kernels import Kernel, mem

ALPHA_FORMAT = "nvfp4"
"""The GEMM format whose cuBLASLt call computes the per-tensor scale first (module doc)."""
ALPHA_BYTES = 12
"""HBM bytes of one per-tensor scale kernel: two fp32 amaxes read, one fp32 written."""
ALPHA_PREFIX = "nvfp4_alpha_"
"""Name prefix of the kernels :func:`alpha_kernels` adds (then the GEMM's own name)."""


def alpha_launches(recipe: str | None) -> int:
    """Per-tensor scale kernels one GEMM launches under Transformer Engine recipe ``recipe``
    (a :mod:`sim.compute.precision` name; None: 16 bits): 1 for NVFP4, else 0 (module doc).

    >>> alpha_launches("nvfp4"), alpha_launches("mxfp8"), alpha_launches(None)
    (1, 0, 0)
    """
    return 1 if recipe == ALPHA_FORMAT else 0


def alpha_kernels(phase: list[Kernel]) -> list[Kernel]:
    """The per-tensor scale kernels of ``phase``'s NVFP4 GEMMs (module doc), in order: one per
    GEMM, a grouped GEMM's as one kernel of ``batch`` = its experts, each of
    :data:`ALPHA_BYTES` per launch; none for other kernels, nor for a batched GEMM that is not
    ``GroupedLinear``'s loop (the fused grouped MLP's CuTe-DSL kernel calls no cuBLASLt); ``[]``
    for a phase without NVFP4 GEMMs. Raises nothing.

    >>> from sim.compute.kernels import gemm
    >>> g = replace(gemm("expert_up[64]", 64, 32, 16, 1, 8), grouped="fwd", precision="nvfp4")
    >>> [(k.name, k.batch, k.bytes) for k in alpha_kernels([g, gemm("qkv", 8, 8, 8, 2)])]
    [('nvfp4_alpha_expert_up[64]', 8, 96.0)]
    """
    out = []
    for kern in phase:
        if kern.kind != "gemm" or kern.precision != ALPHA_FORMAT:
            continue
        if kern.batch > 1 and not kern.grouped:  # the fused grouped MLP's kernel: no cuBLASLt
            continue
        launches = kern.batch if kern.grouped else 1
        out.append(replace(mem(ALPHA_PREFIX + kern.name, ALPHA_BYTES * launches), batch=launches))
    return out


__all__ = ["ALPHA_BYTES", "ALPHA_FORMAT", "ALPHA_PREFIX", "alpha_kernels", "alpha_launches"]

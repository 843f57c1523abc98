"""The casts Transformer Engine runs around MXFP8 attention (``fp8_dpa``): Q, K, V in the
forward and the output gradient in the backward, quantized apart from the attention kernel.

cuDNN's FP8 attention kernels take quantized inputs; its benchmark quantizes them before timing
(NVIDIA/cudnn-frontend@3929da2 ``benchmark/sdpa_benchmark_training/benchmark_single_sdpa.py``,
the ``mxfp8`` inputs and scale tensors built ahead of the timed graphs), so
:mod:`sim.compute.swa_speed` and :mod:`sim.compute.fp8_attention_speed` time the kernel alone.
Megatron-Core hands Transformer Engine 16-bit Q, K, V (the recipes set
``fp8_dot_product_attention``, not ``fp8_multi_head_attention``), and TE's fused attention casts
them itself (NVIDIA/TransformerEngine@4220403, v2.16, the Bridge 26.06 container's
``attention/dot_product_attention/backends.py``):

* forward (``FusedAttnFunc.forward``, line 1390): ``combine_and_quantize(qkv_layout, q,
  k, v, QKV_quantizer, used_in_backward=is_training)``, which for an MXFP8 quantizer and the
  ``sbhd_sbhd_sbhd`` layout calls ``mxfp8_quantize_fast_path`` (``dot_product_attention/
  utils.py`` lines 2520-2672, 2675-2728): one quantize launch per tensor, each writing the data
  row-wise and column-wise ("MXFP8 attention requires quantization along S and D dimensions",
  its doc) with one E8M0 scale byte per 32 elements, then ``multi_tensor_transpose_to_bhsd``
  of the row-wise and of the column-wise scales and ``multi_tensor_swizzle_scales_for_gemm``
  of each (in place): 3 + 4 launches;
* backward (``FusedAttnFunc.backward``, line 1651): ``mxfp8_quantize_fast_path`` of the
  output gradient ``dO``: 1 + 4 launches. The output itself stays 16-bit (``out_`` is a plain
  tensor for MXFP8, lines 1410 and 1462-1466), as do ``dQ, dK, dV`` (lines 1746-1747; 16-bit
  inputs: neither dequantized nor re-quantized, lines 1792-1805).

Bytes per element (:data:`MXFP8_CAST_BYTES`): read 2, write two copies of ``1 + 1/32``; each
scale pass reads and writes both scale copies, ``2 x 2/32``. Elements: Q, K, V are the QKV
linear's output (the ``qkv`` GEMM's ``m x n``), ``dO`` the attention output's (queries x heads x
head dim of the ``attn`` kernel). Assumptions: the QKV quantizer keeps both usages in training
(the fast path's branches set them only for forward-only or backward-only use, utils.py
2710-2723); each ``multi_tensor_*`` call is one launch. Per-tensor FP8 attention (the FP8
recipes') casts and MLA layers (no ``qkv`` GEMM) are not counted.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem

MXFP8_BLOCK = 32
"""Elements per MXFP8 scale (one E8M0 byte)."""
MXFP8_CAST_BYTES = 2.0 + 2 * (1.0 + 1.0 / MXFP8_BLOCK) + 2 * (2 * 2.0 / MXFP8_BLOCK)
"""HBM bytes per element of the fast path (module doc): the cast, ``2 + 2 x (1 + 1/32)``, and
the two scale passes, ``2 x (2 x 2/32)``: 4.3125."""
SCALE_LAUNCHES = 4
"""Two ``multi_tensor_transpose_to_bhsd`` and two ``multi_tensor_swizzle_scales_for_gemm``
calls per fast path (module doc)."""


def dpa_casts(fwd: list[Kernel], fmt: str) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, input-gradient)`` cast kernels TE adds around attention in format ``fmt``
    for a layer whose forward kernels are ``fwd`` (module doc); none for a format other than
    ``mxfp8`` or a layer without a ``qkv`` GEMM and an ``attn`` kernel.

    Example: 2 x 4 = 8 tokens, QKV width 6 (Q 4, K 1, V 1), 2 heads of 2 (``m=4`` queries,
    ``batch=2``): forward 48 elements, 7 launches; backward 16 elements, 5 launches.

    >>> from sim.compute.kernels import Kernel, gemm
    >>> fwd = [gemm("qkv", 8, 6, 4, 2), Kernel("flash_attn_fwd", "attn", 0.0, 0.0, 4, 4, 2, 2)]
    >>> f, b = dpa_casts(fwd, "mxfp8")
    >>> f[0].bytes, f[0].batch, b[0].bytes, b[0].batch
    (207.0, 7, 69.0, 5)
    """
    if fmt != "mxfp8":
        return [], []
    qkv = [k for k in fwd if k.name == "qkv"]
    attn = [k for k in fwd if k.kind == "attn"]
    if not qkv or not attn:
        return [], []
    qkv_elems = sum(k.m * k.n * k.batch for k in qkv)
    out_elems = sum(k.m * k.batch * k.k for k in attn)
    cast_f = mem("quantize_dpa_qkv", qkv_elems * MXFP8_CAST_BYTES)
    cast_b = mem("quantize_dpa_dout", out_elems * MXFP8_CAST_BYTES)
    return [_launches(cast_f, 3 + SCALE_LAUNCHES)], [_launches(cast_b, 1 + SCALE_LAUNCHES)]


def _launches(kern: Kernel, n: int) -> Kernel:
    return Kernel(kern.name, kern.kind, kern.flops, kern.bytes, batch=n)

"""The casts Transformer Engine's fused grouped MLP does not run in MXFP8: its kernels write them.

Under an MXFP8 recipe the fused grouped MLP (:mod:`sim.compute.moe`, "Fused grouped MLP";
Transformer Engine's ``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8`` /
``BackwardGroupedMLP_CuTeGEMMDSwiGLU_MXFP8`` at v2.16, the ``GroupedMLP_CuTeGEMMGLU`` op at
v2.17) quantizes two of the four grouped GEMMs' operands with separate kernels and gets the
other two from its CuTe-DSL GEMMs' epilogues:

* **cast**: the first GEMM's input (``tex.group_quantize`` of the permuted rows,
  NVIDIA/TransformerEngine@4220403 (v2.16) ``pytorch/ops/fused/forward_grouped_mlp.py`` line
  257) and the second GEMM's output gradient (``tex.group_quantize``, or
  ``bgrad_group_quantize`` with a bias, ``pytorch/ops/fused/backward_grouped_mlp.py`` lines
  402-421);
* **written by a kernel**: the second GEMM's input is the GLU kernel's ``d_tensor`` /
  ``d_col_tensor`` with their MXFP8 scales (``forward_grouped_mlp.py`` lines 360-370: the
  row-wise copy feeds the second GEMM, the column-wise one its weight gradient), and the first
  GEMM's output gradient the dGLU kernel's ``d_row_tensor`` / ``d_col_tensor``
  (``backward_grouped_mlp.py`` lines 515-525, wrapped as the first GEMM's quantized gradient,
  566-580). The same at v2.17.1 (@4329ff8 ``pytorch/ops/fused/grouped_mlp.py`` lines 1342-1349
  and 1776-1796, the MXFP8 branches).

So no quantize kernel runs for the second GEMM's input nor for the first GEMM's output gradient:
:func:`epilogue_cast`. NVFP4 is not so: from v2.17 the fused op takes NVFP4 too, but casts both
with ``group_quantize`` (the same lines' ``use_nvfp4`` branches, 1258-1290 and 1887-1897), and
v2.16 fuses MXFP8 only (``pytorch/ops/_common.py`` ``fuse_grouped_mlp_ops`` line 245:
``not recipe.mxfp8()`` returns the ops unfused). The epilogues' writes are not timed apart: a
fused kernel is timed as its GEMM (:mod:`sim.compute.moe`, an assumption).
"""

from __future__ import annotations

from sim.compute.kernels import Kernel

FORMAT = "mxfp8"
"""The format whose fused kernels write the quantized operands (module doc)."""
EPILOGUE_CASTS = frozenset({("fwd", "expert_down"), ("in", "expert_up")})
"""``(role, linear)`` of the casts a fused grouped MLP's epilogues stand in for: the second
GEMM's input (``fwd``) and the first GEMM's output gradient (``in``, the input gradient's
operand), in :mod:`sim.compute.quantize`'s roles."""


def epilogue_cast(kern: Kernel, linear: str, role: str, fmt: str) -> bool:
    """Whether the cast of ``kern``'s operand (its input for role ``fwd``, its output gradient
    for role ``in``; ``linear`` its linear layer's name) is written by a fused grouped MLP
    kernel in format ``fmt`` (module doc), so that no quantize kernel runs for it. A fused
    grouped MLP's GEMMs are the expert GEMMs without a ``grouped`` pass
    (:func:`sim.compute.moe.grouped` with ``fused``).

    Example: the second GEMM of a fused MXFP8 grouped MLP has its input written; that of
    Transformer Engine's ``GroupedLinear`` (``grouped`` ``"fwd"``) has it cast.

    >>> from sim.compute.moe import grouped
    >>> fused = grouped("expert_down[64]", 64, 128, 32, 2, 4, "fwd", fused=True)
    >>> loop = grouped("expert_down[64]", 64, 128, 32, 2, 4, "fwd")
    >>> [epilogue_cast(k, "expert_down", "fwd", "mxfp8") for k in (fused, loop)]
    [True, False]
    >>> epilogue_cast(fused, "expert_down", "fwd", "nvfp4")
    False
    """
    fused = kern.kind == "gemm" and not kern.grouped
    return fmt == FORMAT and fused and (role, linear) in EPILOGUE_CASTS

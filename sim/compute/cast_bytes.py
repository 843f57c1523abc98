"""What quantizing moves and keeps: the bytes per element of a low-precision recipe's casts, of
Transformer Engine's quantized weight cache and of the parameters ``--fp8-param-gather`` gathers.

The recipes themselves (:class:`~sim.compute.precision.Recipe`: data and scale bytes, per-tensor
or block scales, amax pass, weight cache) are :mod:`sim.compute.precision`'s, with their
sources. "TE" below is NVIDIA/TransformerEngine@d0067d0 and Megatron NVIDIA/Megatron-LM@d98e8a6,
as there.

Per linear layer ``Y = X W`` three operands are quantized (TE ``linear.py:370-500,
896-1060``): the input ``X`` (row-wise for the forward GEMM, column-wise for the weight
gradient), the weight ``W`` (row-wise forward, column-wise for the input gradient) and the
output gradient ``dY`` (row-wise for the input gradient, column-wise for the weight gradient);
the outputs are 16-bit. One quantize kernel per operand (the kernels cast both usages in one
pass: TE ``cast_transpose`` for per-tensor FP8, ``quantize_transpose_{square,vector}_blockwise``
for blocks, ``cast_mxfp8_2D_kernel`` with row- and column-wise scaling; torchao casts each
usage apart) moves, per element, :func:`cast_bytes_per_element`: the 16-bit input read once
(twice with a separate amax pass: TE's current scaling ``nvte_compute_amax`` then
``nvte_quantize_v2``, ``transformer_engine/pytorch/csrc/quantizer.cpp:979-1033``; NVFP4's
per-tensor amax) and each quantized copy written with its scales. A per-tensor FP8 copy serves
both usages on a GPU whose tensor cores take any FP8 layout (Blackwell); Hopper keeps a
transposed copy (TE ``float8_tensor.py:414-430``, ``utils.py:658-663``). Block-scaled formats
keep one copy per usage, as scales run along one axis.

Transformer Engine caches the quantized weights across the micro-batches of a step
(``is_first_microbatch``: TE ``module/base.py:792-886``; Megatron passes it,
``megatron/core/transformer/module.py:114-133``): the cache is persistent memory
(:func:`weight_copy_bytes_per_param`) and the weight is quantized once per step. torchao
quantizes the weight in every forward and backward and keeps no copy.
"""

from __future__ import annotations

from sim.compute.precision import Recipe

DTYPE_BYTES = 2.0
"""Bytes of the 16-bit tensors a recipe quantizes (bf16 training)."""


def cast_bytes_per_element(
    recipe: Recipe, usages: int, non_tn: bool, weight: bool = False
) -> float:
    """HBM bytes per element of quantizing one 16-bit tensor for ``usages`` (1 or 2) GEMM
    operand layouts (module doc): reads ``2`` (once more with an amax pass, and once per usage
    when the library casts each usage apart), writes ``copies x (data + scales)``.

    Example (per-tensor FP8, both usages): Hopper ``2 + 2 x 1 = 4``; Blackwell ``2 + 1 = 3``;
    current scaling adds the amax read: 6 and 5. A library that casts each usage apart with
    a dynamic per-tensor scale (torchao's tensorwise) reads the tensor twice per usage:
    ``2 x 2 x 2 + 2 x 1 = 10``.
    """
    copies = recipe.copies(non_tn) if usages > 1 else 1
    scale = recipe.weight_scale_bytes if weight else recipe.scale_bytes
    casts = usages if recipe.cast_per_usage else 1  # each cast reads once more for its amax
    reads = DTYPE_BYTES * (casts + (casts if recipe.cast_per_usage else 1) * recipe.amax_pass)
    return reads + copies * (recipe.data_bytes + scale)


def weight_copy_bytes_per_param(recipe: Recipe, non_tn: bool) -> float:
    """Persistent bytes per low-precision weight element beyond its 16-bit parameter: TE's
    quantized weight cache, row- and column-wise (``copies x (data + weight scales)``); 0 for
    a library that keeps none (torchao).

    Example: per-tensor FP8 on Hopper 2, on Blackwell 1; MXFP8 ``2 x (1 + 1/32) = 2.0625``;
    NVFP4 ``2 x (0.5 + 1/16) = 1.125``.
    """
    if not recipe.weight_cache:
        return 0.0
    return recipe.copies(non_tn) * (recipe.data_bytes + recipe.weight_scale_bytes)


def param_gather_bytes_per_param(recipe: Recipe) -> float:
    """Bytes per low-precision parameter that Megatron's ``--fp8-param-gather`` (NVFP4:
    ``--fp4-param-gather``) all-gathers when the parameters live quantized in the ``uint8``
    parameter buffer: the row-wise quantized data alone (1 B for FP8, 0.5 for NVFP4's packed
    E2M1). The buffer maps only the row-wise data (NVIDIA/Megatron-LM@d98e8a64
    ``megatron/core/distributed/param_and_grad_buffer.py:921-923, 1262-1290``; NVFP4's packed
    row-wise bytes, ``modify_nvfp4_rowwise_storage``); the scales are not gathered: every rank
    computes them from the amaxes Transformer Engine all-reduces over the data-parallel group
    (NVIDIA/TransformerEngine@d0067d0 ``transformer_engine/pytorch/tensor/utils.py:445, 532,
    699, 845-848``; :mod:`sim.memory.param_cast`). Not Transformer Engine's
    MXFP8, gathered in 16 bits through the gradient buffer
    (:func:`sim.memory.precision.gathers_through_grad_buffer`).

    Example: per-tensor or blockwise FP8 ``1.0``; NVFP4 ``0.5`` (not ``0.5 + 1/16``).
    """
    return recipe.data_bytes


__all__ = [
    "DTYPE_BYTES",
    "cast_bytes_per_element",
    "param_gather_bytes_per_param",
    "weight_copy_bytes_per_param",
]

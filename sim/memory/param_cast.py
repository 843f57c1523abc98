"""The optimizer step's HBM bytes of refreshing quantized parameters (Megatron-Core's
``--fp8-param-gather`` / ``--fp4-param-gather``) for the recipes whose parameters live in the
``uint8`` parameter buffer: per-tensor FP8 (delayed and current scaling), blockwise FP8 and
NVFP4 (Transformer Engine's MXFP8 goes through the gradient buffer:
:func:`sim.memory.precision.grad_buffer_refresh_bytes`).

What the code runs each step (NVIDIA/Megatron-LM@d98e8a64, NVIDIA/TransformerEngine@d0067d0,
``transformer_engine/pytorch/tensor/utils.py``; the same code in TE v2.6 to v2.17):

1. The distributed optimizer's ``_copy_main_params_to_model_params`` calls
   ``quantize_param_shard`` (``megatron/core/optimizer/distrib_optimizer.py:2825-2857``;
   ``quantize_nvfp4_param_shard`` for NVFP4, ``megatron/core/fp4_utils.py:135-173``) instead
   of copying its fp32 shard into the 16-bit parameters; both reach TE's
   ``quantize_master_weights`` (``fp8_utils.py:421-453``; ``utils.py:204-344``).
2. TE first casts each fp32 shard to the parameters' dtype, ``master_weight.to(bf16)``
   (``utils.py:291``): read 4, write 2 per shard parameter, the bytes of the 16-bit copy it
   replaces, which the framework's step already counts (Megatron-LM's ``main_grad_step_bytes``
   reads 4, the fused update writes the 2-byte weight: :mod:`sim.framework.megatron_lm`).
3. Per recipe, over the bf16 shard:

   * delayed scaling (``utils.py:371-463``): one cast with the scale the amax history set,
     recording the amax in the same kernel (``update_quantized``, :434): read 2, write the
     FP8 byte;
   * current scaling (``:466-590``): ``tex.compute_amax`` (:527, read 2), then the cast with
     the scale from the data-parallel group's amax (:590: read 2, write 1);
   * blockwise (``:593-749``): ``fp8_block_scaling_compute_partial_amax`` of each 128x128 block
     (:692, read 2), then ``fp8_block_scaling_partial_cast`` (:747, read 2, write 1);
   * NVFP4 (``:752-965``): ``nvfp4_multi_tensor_compute_partial_amax`` (:834, read 2; 16x16
     tiles and the tensor's amax in one pass), then ``nvfp4_multi_tensor_2d_partial_cast``
     (:956: read 2, write the packed half byte).

   Every recipe but delayed scaling also rebuilds the scales of the whole tensor on every rank
   from the all-reduced amaxes (``multi_tensor_compute_scale_and_scale_inv``, :711; NVFP4's
   ``nvfp4_multi_tensor_fused_scale``, :942): the weight's scales written, ``n x`` its
   scale bytes (4/16384 per element for 128x128 fp32 blocks, 1/16 for NVFP4's E4M3 per 16;
   NVFP4's fp32 tile amaxes and scales, 4 B per 256 elements read and written, are left out:
   under 0.04 B per parameter, assumption).
4. After the all-gather, ``post_all_gather_processing`` (``param_and_grad_buffer.py:336-343``;
   TE ``utils.py:1404-1448``) builds the column-wise copy of every parameter: the per-tensor
   FP8 transpose on a GPU without non-TN FP8 GEMMs (Hopper; none on Blackwell),
   ``_create_columnwise`` for blocks, ``nvfp4_2d_multi_tensor_transpose`` (:1451-1520, data
   and scales): read and write ``data + scales`` per parameter.

So the scales are never all-gathered: each rank computes the same scales from the amaxes it
all-reduces over the data-parallel group (``utils.py:532, 699, 845-848``, before the cast;
delayed scaling's, ``:445``, after it, for the next step's scale from the history), and the
all-gather moves the row-wise data alone (:func:`sim.compute.cast_bytes.param_gather_bytes_per_param`).
Those amax all-reduces are not priced (assumption: one small all-reduce at the step, latency
only): 4 B per tensor for per-tensor FP8 (a few KB per stage), 4 B per 128x128 block for
blockwise (``n / 4096`` B), and for NVFP4 4 B per 16x16 tile plus 4 B per tensor
(``n / 64`` B: 16 MB for 1e9 parameters, a ring moving twice that, about 0.3 ms at 100 GB/s
of bus bandwidth: an estimate; the gap where NVFP4 parameters are gathered).
"""

from __future__ import annotations

from sim.compute.cast_bytes import DTYPE_BYTES
from sim.compute.precision import Recipe

DELAYED = "fp8-delayed"
"""The one recipe whose shard cast takes its scale from the amax history (no amax pass)."""


def shard_cast_bytes_per_param(recipe: Recipe) -> float:
    """HBM bytes per fp32 master-shard parameter that casting it into ``recipe``'s quantized
    parameter moves beyond the 16-bit step's copy (module doc, step 3): the bf16 shard read
    once by the cast and once more by an amax pass (every recipe but delayed scaling), the
    row-wise data written.

    Example: delayed ``2 + 1 = 3``; current scaling and blockwise ``2 + 2 + 1 = 5``; NVFP4
    ``2 + 2 + 0.5 = 4.5``.
    """
    reads = 1 if recipe.name == DELAYED else 2
    return reads * DTYPE_BYTES + recipe.data_bytes


def param_refresh_bytes(params: float, recipe: Recipe, dp_width: int, non_tn: bool) -> float:
    """HBM bytes per step of refreshing ``params`` quantized parameters kept in the parameter
    buffer, on one rank of ``dp_width`` data-parallel replicas, beyond the 16-bit step's
    (module doc): the cast of the rank's shard (``params / dp_width x``
    :func:`shard_cast_bytes_per_param`), the whole tensor's scales rebuilt on every rank
    (``params x weight scale bytes``) and the column-wise copy built after the gather where the
    GPU keeps one (``params x 2 x (data + weight scales)`` per extra copy).

    Example (1,000 parameters, ``dp_width`` 4, per-tensor current scaling on Blackwell: one
    copy serves both layouts): ``250 x (2 + 2 + 1) = 1250``; on Hopper the transpose adds
    ``1000 x 2 x 1``:

    >>> from sim.compute.precision import get_recipe
    >>> param_refresh_bytes(1000, get_recipe("fp8-tensorwise"), 4, True)
    1250.0
    >>> param_refresh_bytes(1000, get_recipe("fp8-tensorwise"), 4, False)
    3250.0
    """
    shard = params / max(dp_width, 1) * shard_cast_bytes_per_param(recipe)
    scales = 0.0 if recipe.per_tensor else params * recipe.weight_scale_bytes
    copy = recipe.data_bytes + recipe.weight_scale_bytes
    return shard + scales + params * 2 * copy * (recipe.copies(non_tn) - 1)

"""What a low-precision recipe adds to a stage's memory plan: quantized weight copies, their
refresh at the step, and the FP8 parameter all-gather (:mod:`sim.compute.precision`).

For the ``n`` low-precision weights of a stage (the linear layers' parameters the recipe
quantizes, on this rank; :attr:`sim.parallel.decoder_shard.DecoderShard.low_params`):

* **memory** (charged with the weights, ``weight_bytes``, and said in the plan's notes):
  Transformer Engine's weight cache, ``n x`` :func:`~sim.compute.cast_bytes.weight_copy_bytes_per_param`
  (per-tensor FP8: 2 bytes on Hopper, 1 on Blackwell; MXFP8 2.06; NVFP4 1.13); with
  ``--fp8-param-gather`` the quantized copies replace the 16-bit parameters instead
  (``n x (copies - 2)``: Megatron builds the model under ``fp8_model_init``,
  ``megatron/core/fp8_utils.py:863-881``). torchao keeps no copy.
* **time**: the cache is refreshed once per step, on the first micro-batch
  (``is_first_microbatch``); modelled at the step (``optimizer_s``) as the cast's HBM bytes
  (:func:`~sim.compute.quantize.weight_quantize_bytes`) over the GPU's achieved HBM rate. With
  FP8 (NVFP4) parameters the optimizer casts its master shard into them, through a bf16 copy
  the framework's step already counts, and the column-wise copies are rebuilt after the
  gather: :func:`sim.memory.param_cast.param_refresh_bytes` (per shard parameter 3 B with
  delayed scaling, 5 with current scaling or blocks, 4.5 with NVFP4; the step's amax
  all-reduces over the data-parallel group are not priced, their sizes there).
* **communication**: with FP8 parameters and a sharded step, the distributed optimizer
  all-gathers the quantized row-wise data instead of 2 bytes per parameter: the buffer of
  quantized parameters is ``uint8`` and their row-wise data live in it
  (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/distributed/param_and_grad_buffer.py:921-923,
  1262-1290``, TE's ``replace_raw_data``, NVIDIA/TransformerEngine@d0067d0
  ``transformer_engine/pytorch/tensor/utils.py:41-70``); each rank computes the scales itself
  from the all-reduced amaxes (:mod:`sim.memory.param_cast`):
  :attr:`~sim.memory.plan.StagePlan.dp_gather_bytes`. The split of those bytes between dense
  and expert groups keeps the reduction's. Transformer Engine's MXFP8 under Megatron-FSDP keeps
  the earlier count (4 B read and the quantized row with its scales written per shard
  parameter, the row with its scales gathered: not re-derived from Megatron-FSDP's code).

**MXFP8 through the gradient buffer** (:func:`gathers_through_grad_buffer`): Megatron-Core
all-gathers Transformer Engine's MXFP8 parameters in 16 bits, through the gradient buffer
(``reuse_grad_buf_for_mxfp8_param_ag``, which Megatron-Bridge sets with every MXFP8 recipe:
NVIDIA-NeMo/Megatron-Bridge@v0.6.0 ``src/megatron/bridge/training/mixed_precision.py:255-280``).
The MXFP8 parameters' buffer is a bf16 view of the gradient buffer
(``param_and_grad_buffer.py:1160-1179``: the first half of an fp32 one), not mapped to the
parameters (``:1262-1266``; TE cannot move an MXFP8 tensor's storage, ``utils.py:83-84``, so
MXFP8 with ``--fp8-param-gather`` runs only this way; Megatron warns without the flag,
``megatron/core/optimizer/optimizer_config.py:416-425``). Per step the optimizer copies its
fp32 shard into the buffer (``megatron/core/optimizer/distrib_optimizer.py:2904-2930``, after
the step, ``optimizer.py:796-808``, or before the next forward with ``overlap_param_gather``,
``training.py:3057-3071``) instead of into the 16-bit parameters: the same bytes, which the
framework's step already counts. The buffer is all-gathered at :data:`PARAM_BUFFER_BYTES` per
parameter; then each bucket's parameters are quantized from it into their MXFP8 copies and the
buffer zeroed for the gradients (``_post_param_sync``, ``param_and_grad_buffer.py:301-334``;
``copy_tensors_to_quantized_params``, ``fp8_utils.py:229-266``; TE
``MXFP8Quantizer.update_quantized``, ``pytorch/tensor/mxfp8_tensor.py:97-119``, writes every
usage the weight keeps): :func:`grad_buffer_refresh_bytes`, charged at the step
(``optimizer_s``; assumption: with ``overlap_param_gather`` they run on the same stream under
the next forward). The memory is the quantized copies as above (no persistent 16-bit buffer: its
storage is the gradients'). Megatron-FSDP turns the reuse off
(``megatron/training/arguments.py:1137``): the quantized model above. NVFP4's
``--fp4-param-gather`` keeps its packed ``uint8`` buffer (``param_and_grad_buffer.py:1268-1276``;
the shared buffer is built for MXFP8 only).
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.cast_bytes import (
    DTYPE_BYTES,
    cast_bytes_per_element,
    param_gather_bytes_per_param,
    weight_copy_bytes_per_param,
)
from sim.compute.precision import TE, Recipe
from sim.compute.precision_rules import LowPrecision
from sim.compute.quantize import weight_quantize_bytes
from sim.hardware.gpu_compute import ComputeSpec
from sim.memory.param_cast import param_refresh_bytes
from sim.memory.plan import StagePlan

MASTER_BYTES = 4.0
"""fp32 master weights the distributed optimizer casts from (Megatron's ``main_param``)."""
PARAM_BUFFER_BYTES = DTYPE_BYTES
"""Bytes per element of the parameter buffer MXFP8 parameters are all-gathered in: a bf16 view
of the gradient buffer whether the gradients are bf16 or fp32 (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/distributed/param_and_grad_buffer.py:1160-1179``)."""


def gathers_through_grad_buffer(recipe: Recipe) -> bool:
    """Whether Megatron-Core all-gathers ``recipe``'s parameters (``--fp8-param-gather``) in 16
    bits through the gradient buffer and quantizes them after (module doc): Transformer
    Engine's MXFP8."""
    return recipe.library == TE and recipe.format == "mxfp8"


def grad_buffer_refresh_bytes(params: float, recipe: Recipe, non_tn: bool) -> float:
    """HBM bytes per step of refreshing ``params`` MXFP8 parameters through the gradient buffer
    beyond the 16-bit step's (module doc): every parameter quantized from the buffer into both
    MXFP8 copies (``params x`` :func:`~sim.compute.cast_bytes.cast_bytes_per_element`,
    ``2 + 2 x (1 + 1/32)``) and the buffer zeroed (``params x 2``). The fp32 shard's copy into
    the buffer (read 4, write 2 per shard parameter) is the step's own: it replaces the copy to
    the 16-bit parameters that the framework's step already counts (Megatron-LM's
    ``main_grad_step_bytes`` / ``step_extra_bytes`` read and the fused update's weight write;
    ``optimizer.py:796-808`` takes one branch or the other).

    >>> from sim.compute.precision import get_recipe
    >>> grad_buffer_refresh_bytes(1000, get_recipe("mxfp8"), False)
    6062.5
    """
    quantize = params * cast_bytes_per_element(recipe, 2, non_tn, weight=True)
    return quantize + params * PARAM_BUFFER_BYTES


def precision_plan(
    plan: StagePlan, params: float, low: LowPrecision, spec: ComputeSpec, dp_width: int
) -> StagePlan:
    """``plan`` with the memory, step time and all-gather bytes of ``params`` low-precision
    weights under ``low`` on ``spec`` at data-parallel width ``dp_width`` (module doc).

    Raises:
        ValueError: ``spec`` does not run the recipe's format.
    """
    if params <= 0:
        return plan
    recipe = low.recipe
    rate = spec.low_rate(recipe.format)
    hbm = spec.hbm_rate_Bps()
    copies = weight_copy_bytes_per_param(recipe, rate.non_tn)
    if low.param_gather and recipe.weight_cache:
        # FSDP keeps only its shard of the (quantized) parameters (sim.memory.fsdp)
        held = params / plan.fsdp.shard if plan.fsdp is not None else params
        extra = held * (copies - DTYPE_BYTES)
        if gathers_through_grad_buffer(recipe) and plan.fsdp is None:
            row = PARAM_BUFFER_BYTES
            cast = grad_buffer_refresh_bytes(params, recipe, rate.non_tn)
        elif recipe.format == "mxfp8":  # under Megatron-FSDP: the earlier count, not re-read
            row = recipe.data_bytes + recipe.weight_scale_bytes
            cast = params / max(dp_width, 1) * (MASTER_BYTES + row)
            cast += params * 2 * recipe.data_bytes * (recipe.copies(rate.non_tn) - 1)
        else:
            row = param_gather_bytes_per_param(recipe)
            cast = param_refresh_bytes(params, recipe, dp_width, rate.non_tn)
        base = plan.grad_bytes if plan.dp_grad_bytes is None else plan.dp_grad_bytes
        gather = max(0.0, base - params * (DTYPE_BYTES - row)) if plan.dp_sharded else None
        how = f"{recipe.label()} parameters ({copies:g} B each instead of 2), gathered at {row:g} B"
    else:
        extra = params * copies
        cast = weight_quantize_bytes(params, recipe, rate)
        gather = plan.dp_gather_bytes
        how = f"{recipe.label()} weight copies, {copies:g} B per parameter"
    note = f"{how}: {params / 1e6:.1f} M low-precision weights, {extra / 2**30:+.3f} GiB"
    return replace(
        plan,
        weight_bytes=plan.weight_bytes + extra,
        optimizer_s=plan.optimizer_s + cast / hbm if plan.optimizer_s > 0 else plan.optimizer_s,
        dp_gather_bytes=gather,
        notes={**plan.notes, "precision": note},
    )

"""What a low-precision recipe adds to a stage's memory plan: quantized weight copies, their
refresh at the step, and the FP8 parameter all-gather (:mod:`sim.compute.precision`).

For the ``n`` low-precision weights of a stage (the linear layers' parameters the recipe
quantizes, on this rank; :attr:`sim.parallel.decoder_shard.DecoderShard.low_params`):

* **memory** (charged with the weights, ``weight_bytes``, and said in the plan's notes):
  Transformer Engine's weight cache, ``n x`` :func:`~sim.compute.precision.weight_copy_bytes_per_param`
  (per-tensor FP8: 2 bytes on Hopper, 1 on Blackwell; MXFP8 2.06; NVFP4 1.13); with
  ``--fp8-param-gather`` the quantized copies replace the 16-bit parameters instead
  (``n x (copies - 2)``: Megatron builds the model under ``fp8_model_init``,
  ``megatron/core/fp8_utils.py:863-881``). torchao keeps no copy.
* **time**: the cache is refreshed once per step, on the first micro-batch
  (``is_first_microbatch``); modelled at the step (``optimizer_s``) as the cast's HBM bytes
  (:func:`~sim.compute.quantize.weight_quantize_bytes`) over the GPU's achieved HBM rate. With
  FP8 parameters the optimizer casts its fp32 master shard (``n / w`` parameters, 4 bytes read,
  the quantized row-wise copy written) and the other copies are rebuilt after the gather
  (``post_all_gather_processing``, ``fp8_utils.py:687-708``: 2 x data bytes per parameter).
* **communication**: with FP8 parameters and a sharded step, the distributed optimizer
  all-gathers the quantized data and scales instead of 2 bytes per parameter
  (``param_and_grad_buffer.py:888-951``): :attr:`~sim.memory.plan.StagePlan.dp_gather_bytes`.
  The split of those bytes between dense and expert groups keeps the reduction's.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.precision import (
    DTYPE_BYTES,
    param_gather_bytes_per_param,
    weight_copy_bytes_per_param,
)
from sim.compute.precision_rules import LowPrecision
from sim.compute.quantize import weight_quantize_bytes
from sim.hardware.gpu_compute import ComputeSpec
from sim.memory.plan import StagePlan

MASTER_BYTES = 4.0
"""fp32 master weights the distributed optimizer casts from (Megatron's ``main_param``)."""


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
        row = param_gather_bytes_per_param(recipe)
        cast = params / max(dp_width, 1) * (MASTER_BYTES + row)
        cast += params * 2 * recipe.data_bytes * (recipe.copies(rate.non_tn) - 1)
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

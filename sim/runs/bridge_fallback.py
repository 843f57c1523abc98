"""The settings every Megatron-Bridge performance recipe shares, for a Megatron-Bridge (or NeMo)
row the recipe table (:mod:`sim.runs.bridge_recipes`) has no entry for: an H100 or H200 row
(``measurements/megatron-bridge/recipes.csv`` was traced for the Blackwell rows only), a
configuration of a later release, or a row read without the table.

Only what the shared code sets for every recipe is set (NVIDIA-NeMo/Megatron-Bridge@067f987df0):

* ``src/megatron/bridge/recipes/common.py:79-88`` (``_pretrain_common``, the base of every
  pre-training recipe): ``DistributedDataParallelConfig(overlap_grad_reduce=True,
  overlap_param_gather=True, use_distributed_optimizer=True)``;
* ``src/megatron/bridge/perf_recipes/_common.py:31-74`` (``_benchmark_common``, called by every
  performance recipe): ``grad_reduce_in_fp32 = False`` (gradients reduced in bf16) and
  ``cross_entropy_fusion_impl = "te"``; the model providers' ``cross_entropy_loss_fusion=True``
  (``recipes.csv``: every row);
* ``perf_recipes/_common.py:99-122`` (``_perf_precision``): FP8 current scaling or delayed
  scaling with ``first_last_layers_bf16 = False`` and, from
  ``src/megatron/bridge/training/mixed_precision.py:217-232, 285-303``, ``fp8_param_gather =
  True`` (NVFP4: ``fp4_param_gather = True``, ``measurements/megatron-bridge/README.md``
  "Precision");
* ``scripts/performance/run_script.py:150-151``: BF16 with Adam runs the precision-aware
  optimizer;
* ``src/megatron/bridge/training/comm_overlap.py:562-586`` (``CommOverlapConfig``, read in
  ``measurements/megatron-bridge/README.md``): with the distributed optimizer and DP > 1 a
  bucket of 128 Mi parameters;
* MoE rows: the tables' footnote (force-balanced, dropless routing) and the ``alltoall``
  dispatcher most recipes set (every B200/B300 MoE recipe up to 26.02.01, README "MoE
  dispatcher"; an assumption for the rest: the 26.08 Qwen3 H100 recipe runs the flex
  dispatcher with HybridEP, ``perf_recipes/qwen/h100/qwen3_moe.py:90-91``).

An H100 row whose configuration is one of its release's H100 recipes also gets that recipe's
own settings (:mod:`sim.runs.bridge_hopper`, ``measurements/megatron-bridge/hopper_recipes.csv``),
stated instead of :data:`FALLBACK_NOTE`; an H100 row whose release's recipe turns one of the
shared settings off gets it off (:mod:`sim.runs.bridge_offswitch`). Otherwise everything a recipe chooses per model and GPU
is left at Megatron-Core's default and stated among the run's approximations
(:data:`FALLBACK_NOTE`): recompute, activation offloading, CUDA
graphs, tensor-parallel communication overlap, the flex dispatcher, MTP, FSDP.
"""

from __future__ import annotations

from typing import Any

from sim.runs.csv_precision import SUBCHANNEL

BUCKET_PARAMS = 134217728
"""``CommOverlapConfig``'s data-parallel bucket, 128 Mi parameters (``comm_overlap.py:562-586``)."""
COMMON: dict[str, Any] = {
    "use-distributed-optimizer": True, "overlap-grad-reduce": True,
    "overlap-param-gather": True, "grad-reduce-in-bf16": True,
    "cross-entropy-loss-fusion": True, "cross-entropy-fusion-impl": "te",
}  # fmt: skip
"""Flags of every recipe (module doc)."""
MOE: dict[str, Any] = {
    "moe-token-dispatcher-type": "alltoall", "moe-router-force-load-balancing": True,
}  # fmt: skip
"""Flags of an MoE row (module doc)."""
SHARED_MTP: dict[str, Any] = {"mtp-num-layers": 2, "mtp-use-repeated-layer": True,
                              "keep-mtp-spec-in-bf16": True}  # fmt: skip
"""Two MTP depths of one shared layer, kept in 16 bits, as every Megatron-Bridge recipe of
Nemotron 3 Super sets them (v0.4.1 and v0.5.0 ``src/megatron/bridge/recipes/nemotronh/
nemotron_3_super.py:94-98``, v0.6.0 ``recipes/nemotronh/h100/nemotron_3_super.py:98-102``),
Ultra (v0.6.0 ``recipes/nemotronh/h100/nemotron_3_ultra.py:61-64``) and 3.5 Lightning (v0.6.0
``recipes/nemotronh/h100/nemotron_3_nano.py:267-270``)."""
MODEL_SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("405b", "", {"account-for-embedding-in-pipeline-split": True,
                  "account-for-loss-in-pipeline-split": True}),
    ("deepseekv3", "w/o mtp", {"mtp-num-layers": 1}),
    ("nemotron_3_super", "", SHARED_MTP), ("nemotron_3_ultra", "", SHARED_MTP),
    ("nemotron_3_5_lightning", "", SHARED_MTP),
)  # fmt: skip
"""``(part of the model name (lower case), unless this part, flags)``: what a model's base
recipe sets on every GPU, which a row without a recipe entry keeps: Llama 3.1 405B counts the
embedding and the loss as pipeline layers (``src/megatron/bridge/recipes/llama/h100/llama3.py:
1227-1228``, ``llama31_405b_pretrain_256gpu_h100_bf16_config``; every 405B row of
``recipes.csv`` too), so that 126 layers fill 128 pipeline stages; DeepSeek-V3 has one MTP
layer (``recipes/deepseek/h100/deepseek_v3.py:137``) unless the table says "w/o MTP"; Nemotron 3
Super, Ultra and 3.5 Lightning run two MTP depths of one shared layer (:data:`SHARED_MTP`)."""
FALLBACK_NOTE = (
    "assumption: no recipe-table entry for this configuration (sim.runs.bridge_fallback): "
    "only the settings every Megatron-Bridge performance recipe shares are set (distributed "
    "optimizer, grad/param overlap, bf16 gradient reduction, TE cross entropy, FP8 parameter "
    "gather, alltoall MoE dispatch); the recipe's own recompute, offloading, CUDA graphs, TP "
    "overlap and dispatcher are Megatron-Core's defaults (none)"
)
"""The approximation a run read with :func:`fallback_flags` carries."""


def fallback_flags(precision: str, moe: bool, dp: int, model: str = "") -> dict[str, Any]:
    """Megatron-LM flags for a Megatron-Bridge row without a recipe entry (module doc).

    Args:
        precision: the row's ``precision`` cell (``BF16``, ``FP8-CS``, ``FP8-DS``...).
        moe: whether the model has experts.
        dp: the data-parallel width (the bucket is set above 1).
        model: the table's model name (:data:`MODEL_SETTINGS`).

    Example:
        >>> sorted(fallback_flags("BF16", False, 1))[-1]
        'use-precision-aware-optimizer'
        >>> fallback_flags("FP8-CS", True, 8)["ddp-bucket-size"]
        134217728
        >>> "mtp-num-layers" in fallback_flags("BF16", True, 8, "DeepSeekV3 (w/o MTP)")
        False
        >>> "fp8-param-gather" in fallback_flags("FP8-SC", True, 8)
        False
    """
    f = dict(COMMON)
    text = precision.lower()
    if any(sc in text for sc in SUBCHANNEL):
        pass  # bf16_with_fp8_subchannel_scaling_mixed: fp8_param_gather = False
    elif "fp4" in text:
        f["fp4-param-gather"] = True  # NVFP4: fp4_param_gather (module doc)
    elif "fp8" in text:
        f["fp8-param-gather"] = True
    elif text.startswith("bf16"):
        f["use-precision-aware-optimizer"] = True
    if moe:
        f |= MOE
    if dp > 1:
        f["ddp-bucket-size"] = BUCKET_PARAMS
    name = model.lower()
    for part, unless, flags in MODEL_SETTINGS:
        if part in name and not (unless and unless in name):
            f |= flags
    return f


NEMO_NOTE = (
    "assumption: NeMo 2.0's performance recipes (NVIDIA/NeMo scripts/performance/llm) are not "
    "traced; the row is read as a Megatron-Bridge row (Megatron-Core under the same launcher "
    "design: Megatron-Bridge's scripts/performance descends from them)"
)
"""The approximation of a row whose framework is NeMo (not Megatron-Bridge)."""

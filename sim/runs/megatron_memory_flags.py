"""Megatron-LM's flags that set the experiment's ``memory:`` fields, for
:func:`sim.runs.megatron_args.read_megatron`: the precision-aware optimizer's dtypes
(:mod:`sim.memory.precision_aware`), the gradient buffer's dtype, the caching allocator's
``expandable_segments``, the workspaces of ``--deterministic-mode`` and TE's grouped GEMM, the
deferred embedding weight gradient and gradient-accumulation fusion. Defaults and sources at
NVIDIA/Megatron-LM@d98e8a64dd as each function says."""

from __future__ import annotations

from typing import Any

from sim.runs.argv import switch_on
from sim.runs.megatron_reading import Reading


def read_memory_options(r: Reading, dist: bool) -> dict[str, Any]:
    """Every ``memory:`` field of the flags in ``r`` (``dist``: the distributed optimizer is
    on), each flag read noted in ``r``: the precision-aware optimizer, the gradient buffer,
    the allocator, then what the flags alone set (:func:`flag_memory_options`)."""
    memory = _precision_aware(r, dist) | _grad_buffer(r) | _allocator(r)
    memory |= flag_memory_options(r.flags)
    return memory


OPTIMIZER_DTYPES = {
    "main-grads-dtype": "main_grads_dtype", "main-params-dtype": "main_params_dtype",
    "exp-avg-dtype": "exp_avg_dtype", "exp-avg-sq-dtype": "exp_avg_sq_dtype",
}  # fmt: skip
"""Megatron's precision-aware optimizer flags -> :class:`~sim.config.MemoryConfig` fields."""
DTYPE_NAMES = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16",
               "bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8", "uint8": "fp8"}  # fmt: skip
"""A dtype as Megatron's flags (``fp32``...) or Megatron-Bridge's configs (``bfloat16``...)
spell it -> pipesim's name."""


def _grad_buffer(r: Reading) -> dict[str, Any]:
    """``--grad-reduce-in-bf16`` as the experiment's ``memory: grad_reduce_in_bf16``: the
    gradient buffer in the parameters' 16-bit dtype instead of fp32 (Megatron-LM's
    ``validate_args`` sets ``accumulate_allreduce_grads_in_fp32`` for ``--bf16`` unless this
    flag; NVIDIA/Megatron-LM@d98e8a64 ``megatron/training/arguments.py``; the buffer's dtype is
    ``DistributedDataParallelConfig.grad_reduce_in_fp32``,
    ``megatron/core/distributed/distributed_data_parallel.py:192``). Megatron-Bridge sets that
    field directly (its performance recipes set it False: NVIDIA-NeMo/Megatron-Bridge@067f987df0
    ``src/megatron/bridge/perf_recipes/_common.py:72-74``), so its configs reach here as this
    flag (:mod:`sim.runs.bridge_recipes`)."""
    if not r.switch("grad-reduce-in-bf16"):
        return {}
    r.mapped("grad-reduce-in-bf16", "memory: grad_reduce_in_bf16 (16-bit gradient buffer)")
    return {"grad_reduce_in_bf16": True}


def _allocator(r: Reading) -> dict[str, Any]:
    """The run's ``PYTORCH_CUDA_ALLOC_CONF`` (an environment variable, not a Megatron flag:
    Megatron-Bridge's performance scripts set it, :mod:`sim.runs.bridge_env`) as the
    experiment's ``memory: expandable_segments``."""
    conf = str(r.text("pytorch-cuda-alloc-conf", ""))
    if not conf:
        return {}
    r.mapped("pytorch-cuda-alloc-conf", "memory: expandable_segments (the caching allocator)")
    return {"expandable_segments": True} if "expandable_segments:True" in conf else {}


DETERMINISTIC_CUBLAS = ":4096:8"
"""``CUBLAS_WORKSPACE_CONFIG`` of a ``--deterministic-mode`` run: Megatron sets it
(``megatron/training/determinism.py`` ``DETERMINISM_ENV_VAR_DEFAULTS``, NVIDIA/Megatron-LM@d98e8a64dd)."""


def workspace_options(flags: dict[str, Any]) -> dict[str, Any]:
    """The workspaces and held buffers three flags add, as the experiment's ``memory:`` fields
    (the flags keep their time notes in :mod:`sim.runs.megatron_table`): ``--deterministic-mode``
    sizes PyTorch's cuBLAS workspaces (``cublas_workspace_config``, :mod:`sim.memory.
    cublas_workspace`), ``--moe-grouped-gemm`` with Transformer Engine adds TE's grouped-GEMM
    workspaces (``te_grouped_gemm``), ``--defer-embedding-wgrad-compute`` keeps the output
    layer's inputs and gradients of ``--wgrad-deferral-limit`` micro-batches
    (``defer_embedding_wgrad``)."""
    out: dict[str, Any] = {}
    if switch_on(flags.get("deterministic-mode")):
        out["cublas_workspace_config"] = DETERMINISTIC_CUBLAS
    if switch_on(flags.get("moe-grouped-gemm")) and flags.get("transformer-impl") != "local":
        out["te_grouped_gemm"] = True
    if switch_on(flags.get("defer-embedding-wgrad-compute")):
        try:
            out["defer_embedding_wgrad"] = max(0, int(float(flags.get("wgrad-deferral-limit", 0))))
        except (TypeError, ValueError):
            out["defer_embedding_wgrad"] = 0
    return out


def loss_options(flags: dict[str, Any]) -> dict[str, Any]:
    """The weight-gradient flags as the experiment's ``memory:`` fields:
    ``--no-gradient-accumulation-fusion`` sets ``gradient_accumulation_fusion: false`` (a
    transient weight gradient per GEMM). The loss flags are the model shape's
    ``cross_entropy_fusion`` (:mod:`sim.runs.megatron_args`), which sets the loss's time and
    memory."""
    out: dict[str, Any] = {}
    if switch_on(flags.get("no-gradient-accumulation-fusion")):
        out["gradient_accumulation_fusion"] = False
    return out


def flag_memory_options(flags: dict[str, Any]) -> dict[str, Any]:
    """Every ``memory:`` field the flags alone set (:func:`workspace_options`,
    :func:`loss_options`): what ``sim import`` and the memory benchmark both read."""
    return workspace_options(flags) | loss_options(flags)


def _precision_aware(r: Reading, dist: bool) -> dict[str, Any]:
    """``--use-precision-aware-optimizer`` and its dtypes as the experiment's ``memory:``
    fields (:mod:`sim.memory.precision_aware`); unmapped where Megatron-Core would refuse them
    (another optimizer than Adam, no distributed optimizer, a dtype it does not take)."""
    aware = r.switch("use-precision-aware-optimizer")
    out: dict[str, Any] = {"precision_aware_optimizer": True} if aware else {}
    for flag, field_name in OPTIMIZER_DTYPES.items():
        value = str(r.text(flag, "fp32")).removeprefix("torch.")
        if value not in DTYPE_NAMES:
            r.unmapped(flag, f"{value!r}: not a dtype Megatron-Core takes")
        elif DTYPE_NAMES[value] != "fp32":
            out[field_name] = DTYPE_NAMES[value]
    if out and not aware:
        for flag in OPTIMIZER_DTYPES:
            if r.has(flag):
                r.unmapped(flag, "lower-precision optimizer state without "
                           "--use-precision-aware-optimizer (Megatron-Core asserts fp32)")  # fmt: skip
        return {}
    if aware and (not dist or str(r.flags.get("optimizer", "adam")) != "adam"):
        r.unmapped("use-precision-aware-optimizer", "needs Adam and the distributed optimizer "
                   "(megatron/core/optimizer/optimizer_config.py asserts both)")  # fmt: skip
        return {}
    for flag in ("use-precision-aware-optimizer", *OPTIMIZER_DTYPES):
        if r.has(flag) and not any(n.name == flag for n in r.notes):
            r.mapped(flag, "memory: precision-aware optimizer (sim.memory.precision_aware)")
    return out

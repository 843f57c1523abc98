"""Adam's state as Megatron-Core's precision-aware optimizer keeps it: bytes per parameter.

``--use-precision-aware-optimizer`` (``OptimizerConfig.use_precision_aware_optimizer``,
NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/optimizer/optimizer_config.py``) hands the master
weights, the moments and the gradients to Transformer Engine's ``FusedAdam`` in the dtypes of
``--main-params-dtype`` (fp32 or fp16), ``--exp-avg-dtype`` and ``--exp-avg-sq-dtype`` (fp32,
fp16, bf16 or fp8) and ``--main-grads-dtype`` (fp32 or bf16); without the flag all four must be
fp32 (the same file's ``__post_init__`` asserts it, and that it runs with the distributed
optimizer and Adam). ``megatron/core/optimizer/__init__.py``
``_get_megatron_optimizer_based_on_param_groups`` builds ``FusedAdam(master_weights=True,
use_decoupled_grad=True, master_weight_dtype=..., exp_avg_dtype=..., exp_avg_sq_dtype=...)``
and, with Transformer Engine 2.1 or later, ``store_param_remainders=True``: for bf16
parameters with an fp32 master, ``FusedAdam`` keeps only the 16 low bits of the master (its
high 16 bits are the bf16 parameter itself), 2 bytes per parameter
(``transformer_engine/pytorch/optimizers/fused_adam.py``). ``use_decoupled_grad`` hands the
gradient shard to the optimizer as ``param.decoupled_grad`` without the ``.float()`` copy the
default path makes of 16-bit gradients (``distrib_optimizer.py::_copy_model_grads_to_main_grads``;
/work/research notes 1-megatron-memory.md §1.3). With ``--main-grads-dtype bf16``
``validate_args`` leaves ``accumulate_allreduce_grads_in_fp32`` off, so the gradient buffer is
bf16 (``megatron/training/arguments.py``).
"""

from __future__ import annotations

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes of one element of each optimizer-state dtype Megatron's flags accept (``fp8``:
``torch.uint8`` moments with a per-tensor scale, the scale not counted)."""


def adam_state_bytes(
    param_dtype: str, main_params: str = "fp32", exp_avg: str = "fp32", exp_avg_sq: str = "fp32"
) -> int:
    """Bytes per parameter of the precision-aware optimizer's master weight and two moments
    (module doc): the master is 2 bytes for bf16 parameters with an fp32 master (the stored
    remainder) or an fp16 master, 4 for other 16-bit parameters with an fp32 master, none for
    fp32 parameters (updated in place).

    Raises:
        ValueError: a dtype not in :data:`DTYPE_BYTES`, or a master dtype other than fp32 and fp16.

    Example:
        >>> adam_state_bytes("bf16", "fp32", "bf16", "bf16")  # 2 (remainder) + 2 + 2
        6
        >>> adam_state_bytes("bf16")  # fp32 moments: 2 + 4 + 4
        10
    """
    for name in (param_dtype, exp_avg, exp_avg_sq):
        if name not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {name!r}; use {', '.join(DTYPE_BYTES)}")
    if main_params not in ("fp32", "fp16"):
        raise ValueError(f"main params dtype {main_params!r}: Megatron takes fp32 or fp16")
    if DTYPE_BYTES[param_dtype] == 4:
        master = 0
    elif main_params == "fp16" or param_dtype == "bf16":
        master = 2
    else:
        master = 4
    return master + DTYPE_BYTES[exp_avg] + DTYPE_BYTES[exp_avg_sq]

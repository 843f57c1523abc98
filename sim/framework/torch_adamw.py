"""``torch.optim.AdamW``'s HBM bytes per parameter per step, by implementation.

Source: the installed torch 2.13.0 (``git_version cf30153``) ``torch/optim/adam.py`` (AdamW is
Adam with ``decoupled_weight_decay=True``, ``optim/adamw.py``), for fp32 parameters,
gradients and moments, ``weight_decay != 0``, float betas and learning rate, not
``capturable``, not ``maximize``, not ``amsgrad`` (torchtitan's ``default_adamw``:
pytorch/torchtitan@b5bcd76 ``torchtitan/components/optimizer/optimizer.py`` 378-398). Each
kernel is counted as the distinct tensors it reads and writes, 4 bytes each (assumption: an
operand passed twice, ``addcmul_(v, g, g)``, is read from HBM once, the second load hitting
the cache line the first brought in).

* ``fused`` (``_fused_adam`` 802-899 -> ``torch._fused_adamw_``, one multi-tensor kernel:
  pytorch/pytorch ``aten/src/ATen/native/cuda/fused_adam_utils.cuh`` ``FusedAdamMathFunctor``
  loads param, grad, ``exp_avg``, ``exp_avg_sq`` and stores param and both moments): read 16,
  write 12: **28**.
* ``foreach`` (``_multi_tensor_adam`` 553-800), eight foreach kernels over the parameter
  lists: ``_foreach_mul_(params)`` (691) 8; ``_foreach_lerp_(exp_avgs, grads)`` (704-706)
  12; ``_foreach_mul_(exp_avg_sqs)`` (708) 8; ``_foreach_addcmul_(exp_avg_sqs, grads,
  grads)`` (721-723) 12; ``_foreach_sqrt(exp_avg_sqs)`` into a new list (789) 8;
  ``_foreach_div_`` (791) 8 and ``_foreach_add_`` (792) 8 of it; ``_foreach_addcdiv_(params,
  exp_avgs, denom)`` (793-798) 16: **80**.
* ``for-loop`` (``_single_tensor_adam`` 347-550), the same passes tensor by tensor:
  ``param.mul_`` (419) 8, ``exp_avg.lerp_`` (456) 12, ``exp_avg_sq.mul_(beta2).addcmul_(grad,
  grad)`` (475) 8 + 12, ``(exp_avg_sq.sqrt() / c).add_(eps)`` (543) 8 + 8 + 8,
  ``param.addcdiv_`` (545) 16: **80**.

The fused update's formula (:func:`sim.memory.states.optimizer_step_s`) and the profiles'
extra step bytes take the fused kernel's 28; :func:`adamw_extra_bytes` is what the other two
move beyond it.
"""

from __future__ import annotations

#: HBM bytes per fp32 parameter of one AdamW step, by torchtitan's ``implementation`` (module doc).
ADAMW_BYTES: dict[str, float] = {"fused": 28.0, "foreach": 80.0, "for-loop": 80.0}


def adamw_extra_bytes(implementation: str) -> float:
    """HBM bytes per fp32 parameter that ``implementation`` moves beyond the fused kernel's 28
    (module doc).

    Raises:
        ValueError: an implementation torch's AdamW does not have.

    Example:
        >>> adamw_extra_bytes("fused"), adamw_extra_bytes("foreach")
        (0.0, 52.0)
    """
    if implementation not in ADAMW_BYTES:
        raise ValueError(
            f"AdamW implementation {implementation!r}: one of {', '.join(ADAMW_BYTES)}"
        )
    return ADAMW_BYTES[implementation] - ADAMW_BYTES["fused"]

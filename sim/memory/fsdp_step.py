"""The optimizer step's HBM bytes beyond the fused update under a framework's FSDP.

:func:`sim.memory.fsdp.fsdp_plan` times the step of a rank's shard as the fused update
(:func:`sim.memory.states.optimizer_step_s`: ``grad + 2 x optimizer + weight`` bytes per shard
parameter: the gradient read, the fp32 master and the moments read and written, the 16-bit
weight written). What else a framework's step moves per shard parameter is its
:class:`FsdpStepWork` (the profile's ``fsdp`` setting, :class:`~sim.memory.fsdp.FsdpSpec`).

Megatron-Core's Megatron-FSDP (``--use-megatron-fsdp``, NVIDIA/Megatron-LM@d98e8a64,
``megatron/core/distributed/fsdp/src/megatron_fsdp/`` ``param_and_grad_buffer.py`` (PGB) and
``megatron_fsdp.py`` (MF), ``megatron/core/optimizer/`` ``optimizer.py`` (OPT) and
``distrib_optimizer.py`` (DO)), per shard parameter with ``g`` bytes per gradient element:

* the gradient shard is kept in the parameters' dtype: ``megatron_fsdp_main_grads_dtype``
  defaults to None, "main gradients will match the dtype of the model compute parameters"
  (``distributed/distributed_data_parallel_config.py`` 195-199), bf16 for FP8 parameters
  (PGB ``_resolve_group_grad_dtype`` 2313-2322); ``grad_reduce_in_fp32`` is not read there;
* ``finish_grad_sync`` -> ``update_main_grads`` (MF 1369-1394, PGB 3351-3414: 3381) gives the
  optimizer ``optimizer_grad.to(param.dtype)``, the fp32 main weight's dtype, unless the
  precision-aware optimizer's decoupled gradient is used: a new fp32 tensor, read ``g`` and
  write 4 (none when ``g`` is 4: ``.to`` returns the tensor itself). It lives until the next
  ``zero_grad`` sets ``param.grad = None`` (PGB 3210), i.e. over the step: the step
  moment's 2 bytes per gradient byte (:mod:`sim.memory.step_moment`, the profile's
  ``step_transient``) on the shard's gradient bytes;
* ``clip_grad_norm`` -> ``get_grad_norm_fp32`` reads those fp32 gradients (OPT 374-388): 4;
* FusedAdam steps the fp32 main weights with the fp32 gradients (OPT 786): the fused
  update with a 4-byte gradient, ``4 - g`` more than its ``g``;
* ``_copy_main_params_to_model_params`` (OPT 808) -> ``copy_main_weights_to_model_weights`` (DO
  2802-2818, PGB 3418-3583: 3569): ``model_param.data.copy_(main_weight)``, read 4 (its 16-bit
  write is the fused update's weight); FP8 parameters go through Transformer Engine's
  ``cast_master_weights_to_fp8`` (``mixed_precision.py`` 266-294), which casts the fp32 shard
  to bf16 first, the same 4 + 2 (its further passes: :mod:`sim.memory.param_cast`);
* the gradient shard is zeroed twice per iteration: ``train_step`` calls every chunk's
  ``zero_grad_buffer()`` then ``optimizer.zero_grad()`` (``megatron/training/training.py``
  3040-3044; Megatron-Bridge's ``train_step`` the same, NVIDIA-NeMo/Megatron-Bridge@006430a
  ``src/megatron/bridge/training/train.py``), whose Megatron-FSDP branch calls
  ``zero_grad_buffer()`` again (DO 2568-2583; MF 1483-1491) -> ``main_grad_buffer.data.zero_()``
  (PGB 3189-3220: 3220), the shard (``data_size`` is the shard's with a distributed buffer, PGB
  1279-1281): ``2 g``;
* no ``check_for_nan_in_grad`` pass and no ``1/w`` scaling pass at the step (the gradients
  are scaled before the reduce-scatter, during the backward).

So ``(g + 4) + (4 - g) + 4 + 4 + 2 g`` bytes with a 16-bit gradient (20 with bf16), ``4 + 4 +
2 x 4 = 16`` with an fp32 one, beyond the fused update's ``g + 2 x 12 + 2``.

torch FSDP2 as torchtitan runs it (pytorch/torchtitan@b5bcd76, torch 2.13.0 ``git_version
cf30153``), per shard parameter, all fp32 (``training.dtype = float32``: the sharded parameter
is the master copy, the reduce-scatter writes fp32 gradients):

* ``train_step`` (``torchtitan/trainer.py`` 916-956) calls ``dist_utils.clip_grad_norm_(...,
  foreach=True)`` (``torchtitan/distributed/utils.py`` 594-673): ``torch.nn.utils.
  get_total_norm`` -> ``torch._foreach_norm`` over the gradient shards (torch
  ``nn/utils/clip_grad.py`` 92-95): read 4; the norm all-reduced (``full_tensor``, then over
  the pipeline); ``clip_grads_with_norm_`` -> ``torch._foreach_mul_(grads, clip_coef_clamped)``
  (``clip_grad.py`` 164-173), always, clipping or not ("multiplying by the clamped coef is
  redundant when the coef is clamped to 1, but doing so avoids a ``if clip_coef < 1:``
  conditional which can require a CPU <=> device synchronization"): read and write 4
  (:attr:`FsdpStepWork.clip_passes`);
* ``optimizers.step()``: ``torch.optim.AdamW`` with ``fused=True`` (``OptimizersContainer.
  Config.implementation = "fused"``, ``torchtitan/components/optimizer/optimizer.py`` 109-111,
  153-166; ``default_adamw``: lr 8e-4, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1, 378-398)
  -> ``torch._fused_adamw_`` (torch ``optim/adam.py`` 802-899), one multi-tensor kernel whose
  ``FusedAdamMathFunctor`` loads the parameter, gradient, ``exp_avg`` and ``exp_avg_sq`` and
  stores the parameter and both moments, not the gradient without a grad scaler
  (pytorch/pytorch ``aten/src/ATen/native/cuda/fused_adam_utils.cuh``): ``4 x 4 + 3 x 4 =
  28``, the fused update's ``4 + 2 x 8 + 4 = 24`` plus the read of the fp32 weight, which is
  the master here (``master_reads`` 1: the fused formula counts the master's read in a
  mixed-precision optimizer's 12 state bytes, not in these 8);
* ``optimizers.zero_grad(set_to_none=...disable_cuda_graphs)`` (``trainer.py`` 845): with
  pipeline parallelism (which refuses CUDA graphs, ``trainer.py`` 168-176) and in torchtitan
  before CUDA graphs (``zero_grad()``, pytorch/torchtitan@34d815c ``torchtitan/train.py``
  441) the gradients are set to None: no pass.

So ``4 + 2 x 4 + 4 = 16`` bytes beyond the fused update's 24 (40 per shard parameter); with
``implementation = "foreach"`` or ``"for-loop"`` (the profile's option
``optimizer_implementation``) AdamW's eight passes move 52 more (:attr:`FsdpStepWork.
update_bytes`, :mod:`sim.framework.torch_adamw`).
torchtitan's default CUDA-graph mode without pipeline parallelism (zeroed, not freed,
gradients that FSDP2 accumulates into: a ``_foreach_zero_`` write and a ``+=`` of every
reduce-scatter output, torch ``_fsdp_collectives.py`` 710-754) is not modelled (assumption:
the eager, set-to-None path).
"""

from __future__ import annotations

from dataclasses import dataclass

FP32_BYTES = 4.0


@dataclass(frozen=True)
class FsdpStepWork:
    """What an FSDP step moves per shard parameter besides the fused update (module doc).

    Attributes:
        grad_cast: a 16-bit gradient shard is cast to a new fp32 tensor for the optimizer
            (read ``g``, write 4), which the update then reads (4 instead of ``g``).
        norm_reads: reads of the optimizer's (fp32 when cast) gradient by the gradient norm.
        master_reads: reads of the fp32 main weight beyond the fused update's (the copy into
            the model's weight shard).
        zero_passes: writes of the gradient shard (``g`` bytes each) per iteration.
        clip_passes: passes that read and write the optimizer's gradient (the clipping
            multiply, ``2 x`` its bytes each).
        update_bytes: bytes a multi-pass update moves beyond one fused kernel's (torch's
            foreach or for-loop AdamW: :mod:`sim.framework.torch_adamw`).
    """

    grad_cast: bool = False
    norm_reads: float = 0.0
    master_reads: float = 0.0
    zero_passes: float = 0.0
    clip_passes: float = 0.0
    update_bytes: float = 0.0

    def __post_init__(self) -> None:
        counts = (self.norm_reads, self.master_reads, self.zero_passes, self.clip_passes)
        if min(*counts, self.update_bytes) < 0:
            raise ValueError("FsdpStepWork counts must be >= 0")

    def bytes_per_param(self, grad_bytes: float) -> float:
        """HBM bytes per shard parameter beyond the fused update, with ``grad_bytes`` bytes
        per element of the gradient shard.

        Example (Megatron-FSDP, module doc): bf16 gradients ``(2 + 4) + (4 - 2) + 4 + 4 +
        2 x 2 = 20``; fp32 ``0 + 0 + 4 + 4 + 2 x 4 = 16``:

        >>> w = FsdpStepWork(grad_cast=True, norm_reads=1, master_reads=1, zero_passes=2)
        >>> w.bytes_per_param(2), w.bytes_per_param(4)
        (20.0, 16.0)

        torchtitan's FSDP2 (fp32 gradients): norm 4, master read 4, clip multiply 2 x 4:

        >>> FsdpStepWork(norm_reads=1, master_reads=1, clip_passes=1).bytes_per_param(4)
        16.0
        """
        cast = self.grad_cast and grad_bytes < FP32_BYTES
        seen = FP32_BYTES if cast else grad_bytes  # the gradient the optimizer reads
        out = (grad_bytes + FP32_BYTES) + (FP32_BYTES - grad_bytes) if cast else 0.0
        out += (self.norm_reads + 2 * self.clip_passes) * seen + self.master_reads * FP32_BYTES
        return out + self.zero_passes * grad_bytes + self.update_bytes

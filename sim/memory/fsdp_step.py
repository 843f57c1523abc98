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

torch FSDP2 as torchtitan runs it has none of these here (its fp32 shards are the master
copy; :class:`FsdpStepWork` zero).
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
    """

    grad_cast: bool = False
    norm_reads: float = 0.0
    master_reads: float = 0.0
    zero_passes: float = 0.0

    def __post_init__(self) -> None:
        if min(self.norm_reads, self.master_reads, self.zero_passes) < 0:
            raise ValueError("FsdpStepWork counts must be >= 0")

    def bytes_per_param(self, grad_bytes: float) -> float:
        """HBM bytes per shard parameter beyond the fused update, with ``grad_bytes`` bytes
        per element of the gradient shard.

        Example (Megatron-FSDP, module doc): bf16 gradients ``(2 + 4) + (4 - 2) + 4 + 4 +
        2 x 2 = 20``; fp32 ``0 + 0 + 4 + 4 + 2 x 4 = 16``:

        >>> w = FsdpStepWork(grad_cast=True, norm_reads=1, master_reads=1, zero_passes=2)
        >>> w.bytes_per_param(2), w.bytes_per_param(4)
        (20.0, 16.0)
        """
        cast = self.grad_cast and grad_bytes < FP32_BYTES
        seen = FP32_BYTES if cast else grad_bytes  # the gradient the optimizer reads
        out = (grad_bytes + FP32_BYTES) + (FP32_BYTES - grad_bytes) if cast else 0.0
        out += self.norm_reads * seen + self.master_reads * FP32_BYTES
        return out + self.zero_passes * grad_bytes

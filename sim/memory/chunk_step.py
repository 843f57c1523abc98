"""The host and HBM time of a PatrickStar optimizer step (:mod:`sim.memory.chunked`, its module
doc): the bytes per element of hybrid Adam's GPU and CPU updates and of the per-parameter
gradient path, and the seconds they take.
"""

from __future__ import annotations

from sim.memory.chunk_hooks import hook_host_s, pre_hook_host_s
from sim.memory.context import StageContext
from sim.memory.zero_offload import ADAM_HOST_BYTES

HOST_ADAM_BYTES = 2 + 3 * 4 + 3 * 4
"""Host DRAM bytes per element of PatrickStar's CPU Adam: its copy of DeepSpeed's loop
(Tencent/PatrickStar@6ee4fe8 and @4ef26cc ``patrickstar/ops/csrc/adam/cpu_adam.cpp``
``Adam_Optimizer::Step``) is called with the 16-bit gradients of the pinned read buffer
(``FP16Adam.ds_cpu_adam_update`` gets ``read_chunk_buff.access_from_cache(...)``, a
``torch.half`` chunk, ``patrickstar/ops/fp16_cpu_adam.py``; ``ds_adam_step`` sets
``grad_half_precision`` from ``grads.options().dtype() == at::kHalf``, ``cpu_adam.cpp`` 737
@4ef26cc), so it loads each gradient as 2 bytes (``SIMD_LOAD_HALF``; ``(float)grads_cast_h[k]``
in the scalar tail) and unscales it in the loop (``loss_scale``); the fp32 weight, momentum and
variance are loaded and stored (4 bytes each, both ways): 26 bytes, against the 28 of DeepSpeed's CPU Adam
with fp32 gradients whose rate ZeRO-Offload's Table 4 measures
(:data:`sim.memory.zero_offload.ADAM_HOST_BYTES`; the rate is taken as bound by DRAM
bandwidth, :mod:`sim.memory.host_adam`)."""

UPLOAD_BYTES = 4
"""Bytes per element of a host-updated weight on its way up: the fp32 master chunk
(``FP16ChunkWriteBuffer``'s two-stage copy, :mod:`sim.memory.chunked`)."""
GPU_ADAM_BYTES = 108
"""HBM bytes per element of hybrid Adam's GPU update, op by op as ``FP16Adam`` runs it
(Tencent/PatrickStar@2384535 ``patrickstar/ops/fp16_cpu_adam.py``, ``fp16_chunk_adam_ops`` and
``torch_adam_update``, no weight decay; each op reads its operands and writes its result):
the 16-bit gradient chunk copied into the read buffer (2 + 2), ``.float()`` (2 + 4),
``grad.div_(loss_scale)`` (4 + 4), ``exp_avg.mul_`` (4 + 4) and ``.add_(grad)`` (8 + 4),
``exp_avg_sq.mul_`` (4 + 4) and ``.addcmul_(grad, grad)`` (12 + 4), ``sqrt()``, ``/ c`` and
``.add_(eps)`` (3 x (4 + 4)), ``data.addcdiv_`` (12 + 4), and the fp32 weight cast into the
16-bit chunk (4 + 2): 108, against a fused kernel's 28 (:func:`~sim.memory.states.
optimizer_step_s`)."""

GRAD_ZERO_BYTES = 2
"""HBM bytes per 16-bit parameter element, once per iteration, of the gradient PatrickStar's
pre-backward hook creates: ``param.grad = torch.zeros_like(tmp_tensor)`` on the first backward
visit (Tencent/PatrickStar@2384535 ``patrickstar/core/hook.py``
``pre_sub_module_backward_function``), a 16-bit write."""
GRAD_HOOK_BYTES = 20
"""HBM bytes per 16-bit parameter element and backward of the per-parameter gradient path of
PatrickStar@2384535: autograd accumulates into that existing gradient (``grad += new``: reads
2 + 2, writes 2) instead of taking the new one; the post-backward hook
(``post_sub_module_backward_function``) runs ``client.optimizer.check_overflow(param)``, whose
``DynamicLossScaler._has_inf_or_nan`` (``patrickstar/fp16/loss_scaler.py``; the benchmark's
``"loss_scale": 0``, ``examples/ps_config.py``) computes ``float(x.float().sum())`` (the fp32
copy: 2 + 4; the sum: 4), then copies the gradient into the parameter's chunk
(``tmp_tensor.copy_(param.grad)``: 2 + 2): 20. Charged in the step's GPU time (the same
iteration time on one stage; the hooks run in the backward), with the host time of the blocking
read per parameter tensor (:func:`grad_hooks_s`)."""


def grad_hooks_s(ctx: StageContext, hbm_Bps: float) -> float:
    """Seconds of PatrickStar's per-parameter gradient path per optimizer step on one replica:
    every parameter of the stage (gathered for its backward) goes through it once
    (:data:`GRAD_ZERO_BYTES` + :data:`GRAD_HOOK_BYTES`), at the GPU's memory-bound rate
    ``hbm_Bps``; and each of its ``param_tensors`` tensors is read back by ``float(...)``, which
    waits for the device, so the device then idles while the host issues the next op and reads
    (:meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s`: weight matrices large, biases
    and LayerNorm vectors small), and runs the hooks' two Python backward nodes per module
    (:func:`~sim.memory.chunk_hooks.hook_host_s`), and the pre-backward hooks' Python, views and
    ``zeros_like`` where the device idles (:func:`~sim.memory.chunk_hooks.pre_hook_host_s`; the
    socket's host model, zero where it is not modelled). PatrickStar runs one
    backward per step (no gradient accumulation in its benchmarks); where pipesim's schedules
    run ``m > 1`` backwards per step, the other ``m - 1`` are left out."""
    hooks_s = hook_host_s(ctx) + pre_hook_host_s(ctx, hbm_Bps)
    return ctx.params * (GRAD_ZERO_BYTES + GRAD_HOOK_BYTES) / hbm_Bps + hooks_s


def host_adam_s(elems: float, adam_params_per_s: float) -> float:
    """Seconds of PatrickStar's CPU Adam over ``elems`` elements on a host whose DeepSpeed CPU
    Adam (fp32 gradients) updates ``adam_params_per_s`` parameters per second: the DRAM-bound
    rate scaled by the bytes each loop streams, :data:`HOST_ADAM_BYTES` (16-bit gradients)
    against :data:`~sim.memory.zero_offload.ADAM_HOST_BYTES`.

    >>> round(host_adam_s(2.8e9, 1e9), 6)
    2.6
    """
    return elems / adam_params_per_s * HOST_ADAM_BYTES / ADAM_HOST_BYTES


def own_threads_wait_s(host_s: float, sharers: int) -> float:
    """Estimated seconds a rank's host step takes beyond ``host_s`` (its CPU Adam at the
    server's whole rate) when it runs on its own ``1 / sharers`` of the server's threads
    (``StagePlan.host_optimizer_thread_share``, :mod:`sim.memory.chunked`):
    ``(sharers - 1) * host_s``.

    >>> own_threads_wait_s(2.0, 8)
    14.0
    """
    return max(0.0, (sharers - 1) * host_s)

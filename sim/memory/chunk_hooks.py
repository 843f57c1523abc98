"""PatrickStar's per-module hooks in the backward on the host: what the device waits for between
one parameter tensor's blocking overflow read and the next (Tencent/PatrickStar@2384535 and
@4ef26cc, the A100 figure's code; :mod:`sim.memory.chunk_step` charges it in ``grad_hooks_s``).

* **Which modules** (``core/hook.py`` ``_register_hooks_recursively``): every module that owns
  parameters of its own (``named_parameters(recurse=False)``), i.e. each leaf ``Linear``,
  ``LayerNorm`` and embedding: one parameter group of :func:`~sim.memory.tensors.param_groups`
  (a Hugging Face ``BertLayer``: query, key, value, two denses, the intermediate and two
  LayerNorms, 8 modules and 16 tensors).
* **Blocking reads, one per tensor** (``post_sub_module_backward_function``: per parameter
  ``client.optimizer.check_overflow(param)`` → ``DynamicLossScaler._has_inf_or_nan``:
  ``float(x.float().sum())``, two ops and a read that waits for the device,
  ``fp16/loss_scaler.py`` 133-155; then ``tmp_tensor.copy_(param.grad)``, a kernel, and
  ``client.release_dist``'s ``param.data = torch.tensor([], ..., device=param.device)``, an op
  without a kernel, ``core/client.py``@4ef26cc 718-722).
  :meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s` prices each, with the copy as a
  third op: a weight matrix is *large* (its ``.float()`` and copy outlast the host's issue of
  the next ops, ``h + read_s`` beyond the device's time), a bias or LayerNorm vector *small*
  (the device finishes its kernels before the host has issued them, ``4h + read_s``, and the
  empty tensor's ``h - launch``, :attr:`~sim.hardware.host_ops.HostOverhead.kernel_launch_s`). A tensor is
  large when it is a group's matrix: one per group larger than ``2h + 2`` elements (LayerNorm
  ``2h``, BERT's classifier ``2h + 2``); every other tensor of ``param_tensors`` is small.
  Without a transformer block to take ``h`` from, every tensor counts as large (the bound
  pipesim used before).
* **Two Python backward nodes per module** (``_pre_backward_module_hook`` applies
  ``PreBackwardFunction`` to the module's outputs, ``_post_backward_module_hook``
  ``PostBackwardFunction`` to its inputs; their ``backward`` calls the pre- and post-backward
  hooks): one each per module and backward, ``function_backward_s`` each. They run after the
  previous module's last blocking read has drained the device and before the next module's
  first kernel (an assumption: adjacent leaf modules; where autograd ops of the model sit
  between two modules their host time is exposed as well and is not counted, a lower bound).
* Not counted (no published per-call figure): the Python of ``access_dist`` / ``release_dist``
  per tensor (chunk and tensor state bookkeeping, ``torch.tensor([])`` per release), and the
  memory tracer's ``trace_memory`` per pre-hook (``torch.cuda.memory_allocated`` and
  ``reset_peak_memory_stats`` every iteration, no synchronisation: ``utils/memory_monitor.py``
  ``get_sys_memory_used``).
"""

from __future__ import annotations

from sim.memory.context import StageContext
from sim.memory.tensors import stage_groups, stage_hidden

HOOK_FUNCTIONS = 2
"""Python backward nodes per hooked module and backward (``PreBackwardFunction``,
``PostBackwardFunction``, ``core/hook.py``)."""

CHECK_OPS = 2
"""Ops of one overflow check before its read (``x.float()``, ``.sum()``)."""

HOOK_OPS = CHECK_OPS + 1
"""Kernels the post-backward hook issues per tensor besides the read's own op: the check's two
and the gradient's copy into its chunk (``tmp_tensor.copy_(param.grad)``)."""


def hooked_tensors(ctx: StageContext) -> tuple[int, int, int]:
    """``(modules, large, small)``: the stage's hooked modules (its parameter groups) and its
    parameter tensors split into weight matrices and vectors (module doc)."""
    groups = stage_groups(ctx.layers, ctx.dtype_bytes)
    tensors = round(ctx.param_tensors)
    h = stage_hidden(ctx.layers, ctx.dtype_bytes)
    if h is None:
        return len(groups), tensors, 0
    large = min(tensors, sum(1 for g in groups if g > 2 * h + 2))
    return len(groups), large, tensors - large


def hook_host_s(ctx: StageContext) -> float:
    """Host seconds per backward, on the device's critical path, of PatrickStar's post-backward
    hook per tensor (its overflow read, the gradient's copy and, for a small tensor, the empty
    tensor release_dist leaves, :meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s`) and
    its two Python backward nodes per hooked module (``function_backward_s`` each); zero where
    the host is not modelled."""
    host = ctx.topology.host(ctx.host).overhead
    modules, large, small = hooked_tensors(ctx)
    reads = host.serial_reads_s(small=small, large=large, ops=HOOK_OPS)
    if not host.eager:
        return reads
    nograd = host.op_s if host.nograd_op_s is None else host.nograd_op_s
    empty = small * max(0.0, nograd - host.kernel_launch_s)  # release_dist's torch.tensor([])
    return reads + empty + modules * HOOK_FUNCTIONS * host.function_backward_s

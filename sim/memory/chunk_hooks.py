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
* **The hooks' Python** (measured: ``measurements/host/patrickstar_hooks.py`` runs PatrickStar's
  own ``pre_sub_module_backward_function`` / ``post_sub_module_backward_function``@4ef26cc on
  this project's CPU and gives their Python beyond the torch ops in units of a no-grad op timed
  in the same process, :data:`PRE_HOOK_PYTHON_OPS`, :data:`POST_HOOK_PYTHON_OPS`,
  :data:`MEMORY_ALLOCATED_OPS`; priced here at the host's op without a kernel, ``nograd_op -
  launch``, 5 us on the presets: pytorch/pytorch#41383's op without autograd). Per tensor the
  pre-backward hook runs ``client.access_dist`` (chunk lookup, the comm group's ids, state
  updates, ``_fetch_remote_chunks``' visiting check, the eviction policy's ``trace_access``,
  a ``logger.debug`` f-string) and, per module, the memory tracer (``trace_memory``: the
  metronome, ``get_sys_memory_used``, whose ``torch.cuda.memory_allocated`` in torch 1.x
  flattens the allocator's 98 statistics in Python, :data:`MEMORY_ALLOCATED_OPS`) and
  ``adjust_chunk_layout`` (after the warm-up a Python loop over every chunk,
  ``chunk_list.get_chunk_memory_used``); the post-backward hook ``client.release_dist`` per
  tensor. Assumption: the Python scales from the measuring host (a loaded 2-core AMD EPYC VM,
  Python 3.11, torch 2.13; medians of 7 processes) to the servers' CPUs as PyTorch's per-op
  dispatch does; the figures' Python 3.8 (NGC 21.xx images) is slower, so a lower bound.
* **The pre-backward hook on the device's critical path** (:func:`pre_hook_host_s`;
  ``pre_sub_module_backward_function``, ``core/hook.py``@6ee4fe8 and @4ef26cc 171-197): it runs
  after the previous module's last blocking read has drained the device. Per parameter, its
  Python, two views without a kernel (``payload.narrow(0, start_offset, numel)``,
  ``core/client.py``@4ef26cc 495-496, and ``ps_attr.set_tensor``'s ``tensor.view(self.shape)``,
  ``core/parameter.py`` 132) and ``param.grad = torch.zeros_like(tmp_tensor)`` (first backward
  visit: one kernel), all without autograd recording (the engine runs the hook with grad mode
  off: :attr:`~sim.hardware.host_ops.HostOverhead.nograd_op_s`, a view ``h - launch``); per
  module ``torch.cuda.memory_allocated``'s Python. The device idles while the host issues them
  but for the weight matrix's ``zeros_like`` (``2 x`` its elements: 16-bit, as
  :data:`~sim.memory.chunk_step.GRAD_ZERO_BYTES`, written at the HBM rate), which runs while
  the host issues the bias after it (a matrix group is a weight and its bias, every other
  tensor a vector: exposed in full). Without a transformer block to take ``h``
  from, one tensor per module is counted. The ``zeros_like`` kernels' HBM time is charged
  already (:data:`~sim.memory.chunk_step.GRAD_ZERO_BYTES`).
* **The post-backward hook's Python** (:func:`hook_host_s`): ``release_dist`` after each small
  tensor's read is exposed (the device is done); after a matrix's read the gradient's copy into
  its chunk (4 bytes per element) outlasts it (assumption).
* Not counted: ``reset_peak_memory_stats`` and the C++ that builds ``memory_stats``' nested
  dict (not timed), the forward's and recomputed forward's hooks (the host runs ahead of the
  GEMMs there but for the first module of each recomputed block).
"""

from __future__ import annotations

from sim.hardware.host_ops import HostOverhead
from sim.memory.context import StageContext
from sim.memory.tensors import stage_groups, stage_hidden

HOOK_FUNCTIONS = 2
"""Python backward nodes per hooked module and backward (``PreBackwardFunction``,
``PostBackwardFunction``, ``core/hook.py``)."""

CHECK_OPS = 2
"""Ops of one overflow check before its read (``x.float()``, ``.sum()``)."""

PRE_HOOK_VIEWS = 2
"""Views without a kernel the pre-backward hook makes per tensor (``narrow``, ``view``)."""

PRE_HOOK_PYTHON_OPS = 5.62
"""Python of PatrickStar's pre-backward hook per tensor beyond its ops, in no-grad ops (its
module's ``trace_memory`` and ``adjust_chunk_layout`` shared by the module's two tensors; the
CUDA calls excluded): ``measurements/host/patrickstar_hooks.yaml`` median (module doc)."""
POST_HOOK_PYTHON_OPS = 1.9
"""Python of the post-backward hook per tensor beyond its ops and the overflow check, in no-grad
ops: ``measurements/host/patrickstar_hooks.yaml`` median."""
MEMORY_ALLOCATED_OPS = 18.01
"""Python of torch 1.x's ``torch.cuda.memory_allocated`` (``memory_stats``' flatten of 98
statistics), in no-grad ops: ``measurements/host/patrickstar_hooks.yaml`` median."""

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
    tensor release_dist leaves and release_dist's Python, :data:`POST_HOOK_PYTHON_OPS`;
    :meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s`) and its two Python backward
    nodes per hooked module (``function_backward_s`` each); zero where the host is not
    modelled."""
    host = ctx.topology.host(ctx.host).overhead
    modules, large, small = hooked_tensors(ctx)
    reads = host.serial_reads_s(small=small, large=large, ops=HOOK_OPS)
    if not host.eager:
        return reads
    unit_s = no_kernel_op_s(host)
    empty = small * (1 + POST_HOOK_PYTHON_OPS) * unit_s  # torch.tensor([]) and the Python
    return reads + empty + modules * HOOK_FUNCTIONS * host.function_backward_s


def no_kernel_op_s(host: HostOverhead) -> float:
    """Host seconds of an op without autograd recording or a kernel: ``nograd_op_s`` less the
    launch (pytorch/pytorch#41383's 5 us on the presets)."""
    nograd = host.op_s if host.nograd_op_s is None else host.nograd_op_s
    return max(0.0, nograd - host.kernel_launch_s)


def pre_hook_host_s(ctx: StageContext, hbm_Bps: float) -> float:
    """Host seconds per backward, on the device's critical path, of PatrickStar's pre-backward
    hooks (module doc): per tensor ``a = (PRE_HOOK_PYTHON_OPS + 2) u + h`` (its Python, two
    views, ``zeros_like``; ``u`` an op without a kernel, ``h = nograd_op_s``), per module
    ``MEMORY_ALLOCATED_OPS u``; a matrix group's bias exposes only ``max(0, a - 2 g /
    hbm_Bps)``, what its weight's ``zeros_like`` of ``g`` elements does not cover. Zero where
    the host is not modelled; a stage without parameters costs 0."""
    host = ctx.topology.host(ctx.host).overhead
    if not host.eager:
        return 0.0
    unit_s = no_kernel_op_s(host)
    nograd_s = host.op_s if host.nograd_op_s is None else host.nograd_op_s
    a_s = (PRE_HOOK_PYTHON_OPS + PRE_HOOK_VIEWS) * unit_s + nograd_s
    modules, large, small = hooked_tensors(ctx)
    per_module_s = modules * MEMORY_ALLOCATED_OPS * unit_s
    hidden = stage_hidden(ctx.layers, ctx.dtype_bytes)
    if hidden is None:
        return modules * a_s + per_module_s
    groups = stage_groups(ctx.layers, ctx.dtype_bytes)
    matrices = [g for g in groups if g > 2 * hidden + 2][:large]
    biases_s = sum(max(0.0, a_s - 2 * g / hbm_Bps) for g in matrices[:small])
    return large * a_s + biases_s + max(0, small - len(matrices)) * a_s + per_module_s

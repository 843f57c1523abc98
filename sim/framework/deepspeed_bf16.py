"""DeepSpeed's ``BF16_Optimizer``: how a bf16 pipeline without ZeRO keeps, reduces and steps its
gradients.

Read at microsoft/DeepSpeed@f5dde36 (2023-06-01, the commit :mod:`sim.framework.deepspeed`
reads). With ``bf16.enabled`` and no ZeRO, ``get_data_types`` makes the gradient-accumulation
dtype fp32 (``deepspeed/runtime/engine.py`` l.839-843) and the engine wraps the optimizer in
``BF16_Optimizer`` (l.1144-1145, ``_configure_bf16_optimizer`` l.1364-1378); a pipeline with
bf16 and ZeRO-2/3 raises ``NotImplementedError`` (``runtime/pipe/engine.py`` l.246-249).

What it keeps (``runtime/bf16_optimizer.py``):

* the bf16 parameters, flattened per parameter group (l.100-107), whole on every replica;
* an fp32 gradient buffer as large as the flat group, ``fp32_groups_gradients_flat``
  (l.123-124), beside the parameters' bf16 ``.grad``, which stays allocated after each backward
  (``update_hp_grads(clear_lp_grads=False)``, pipe/engine.py l.737-739) until
  ``clear_lp_grads`` before the next one (pipe/engine.py l.725-727; bf16_optimizer.py l.267):
  2 + 4 bytes of gradients per parameter (:data:`HP_GRAD_BYTES`,
  :attr:`sim.memory.framework_memory.FrameworkMemory.hp_grad_bytes`);
* the fp32 master copy of its replica's ``1/w`` partition of the flat group only (l.109-118;
  l.153: the wrapped optimizer's parameter group is that partition), hence Adam's moments of
  it too: ``12 / w`` bytes per parameter (:func:`bf16_plan`).

What it runs:

* after every backward of every stage (the last stage's through ``optimizer.backward``,
  l.258-271; the others' in ``_exec_backward_pass``, pipe/engine.py l.725-739),
  ``update_hp_grads`` (l.273-290): per parameter tensor ``hp_grad.add_(lp.grad.to(fp32))``, two
  kernels, the cast reading 2 and writing 4 bytes, the add reading 4 + 4 and writing 4: 18 bytes
  per parameter, 9 per byte of bf16 parameter (:data:`HP_GRAD_UPDATE`,
  :func:`hp_grad_update_s`). ``.grad`` is None before every backward, so autograd never adds
  into it (no ``AccumulateGrad`` add, unlike fp16's
  :data:`sim.framework.megatron_deepspeed.ACCUMULATE_GRAD`);
* the data-parallel reduction, ``_exec_reduce_grads`` -> ``_bf16_reduce_grads`` (pipe/engine.py
  l.242-258), over the fp32 buffers (``get_grads_for_reduction``, l.292-294) through
  ``buffered_allreduce_fallback`` -> ``allreduce_no_retain`` -> ``allreduce_bucket``
  (engine.py l.2245-2256, l.2215-2238), which casts each bucket to ``communication_data_type``
  before the all-reduce and back after it. With bf16 on, that dtype is bf16 unless configured
  (engine.py l.783-794, since deepspeedai/DeepSpeed#3370, 2023-04-25; the same at
  deepspeedai/DeepSpeed@edaa7221): the all-reduce moves 2 bytes per element
  (:data:`COMMUNICATION_BYTES`), not the buffer's 4. The casts move 4 + 2 and 2 + 4 bytes per
  element, the ``mul_(1 / w)`` of the bf16 copy 2 + 2 with ``w > 1`` (postscaled, l.2225-2229)
  (:data:`REDUCE_BYTES`). Assumption: one tensor per bucket (one parameter group, or each group
  above ``MEMORY_OPT_ALLREDUCE_SIZE`` elements). ``flatten`` of one tensor is then a view of it
  (DeepSpeed ``csrc/utils/flatten_unflatten.cpp`` l.15-17 -> PyTorch
  ``torch/csrc/utils/tensor_flatten.h::flatten_dense_tensors``: one tensor returns
  ``t.contiguous().view({-1})``), the cast back writes into the buffer itself, and
  ``allreduce_and_copy``'s ``buf.copy_(synced)`` copies a view onto the same memory (assumption:
  not charged); the bucket is the whole group, one all-reduce;
* the step (``step``, l.234-256): the global norm over the fp32 gradients, a ``norm`` and a
  blocking ``.item()`` per tensor (``runtime/utils.py::get_global_norm_of_tensors`` l.875;
  :data:`NORM_OPS`), reading 4 bytes per parameter; the wrapped optimizer on the partition;
  ``update_lp_params`` (l.316-329): the partition's fp32 to bf16 copy (4 + 2 bytes; the fused
  update's weight write counts the 2) and an all-gather of the bf16 parameters over the
  replicas (``runtime/utils.py::all_gather_dp_groups`` l.923-950; :attr:`sim.memory.plan.
  StagePlan.step_gather`); ``clear_hp_grads`` zeroes the fp32 buffers (l.331-336, 4 bytes)
  (:data:`STEP_BYTES`). Clipping multiplies the gradients only when their norm exceeds
  ``gradient_clipping`` (``utils.py::clip_tensors_by_global_norm`` l.900-904): data-dependent,
  not charged (assumption). No overflow check and no flat fp32 copy at the step (those are
  ``FP16_Optimizer``'s).

Not modelled: the reduction's bf16 copy of the bucket (2 bytes per element, held during the
all-reduce); the all-gather's shards of ``allgather_bucket_size`` (one all-gather here); a
bucket of several parameter groups (flattened into a new fp32 tensor and copied back, 16 bytes
per element more).
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.kernels import mem, phase_time
from sim.engine.stage_cost import StageCost
from sim.framework.settings import Setting
from sim.hardware.gpu_compute import ComputeSpec
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes

BF16 = "microsoft/DeepSpeed@f5dde36 deepspeed/runtime/bf16_optimizer.py"
HP_GRAD_BYTES = Setting(
    4,
    f"{BF16} l.123-124: fp32_groups_gradients_flat, torch.zeros_like(bf16_groups_flat[i], "
    "dtype=torch.float32), beside each parameter's bf16 .grad (kept by "
    "update_hp_grads(clear_lp_grads=False), pipe/engine.py l.737-739)",
)
COMMUNICATION_BYTES = Setting(
    2,
    "microsoft/DeepSpeed@f5dde36 deepspeed/runtime/engine.py l.783-794: "
    "communication_data_type is bf16 with bf16 on unless configured; allreduce_bucket "
    "(l.2215-2238) all-reduces tensor.to(communication_data_type) of the fp32 bucket",
)
HP_GRAD_UPDATE = Setting(
    9.0,
    f"{BF16} l.273-290 update_hp_grads, after every backward: hp_grad.data.add_(lp.grad.data."
    "to(fp32)), per parameter 2 + 4 (cast) + 4 + 4 + 4 (add) = 18 bytes, 9 per bf16 byte; two "
    "kernels per parameter tensor",
)
REDUCE_BYTES = Setting(
    (12.0, 4.0),
    "microsoft/DeepSpeed@f5dde36 deepspeed/runtime/engine.py l.2215-2238 allreduce_bucket on "
    "the fp32 buffer, per element: .to(bf16) 4 + 2 and tensor.copy_ back 2 + 4 always; "
    "mul_(1 / w) of the bf16 copy 2 + 2 when w > 1 (gradient_predivide_factor 1 != w)",
)
STEP_BYTES = Setting(
    (8.0, 4.0),
    f"{BF16} step (l.234-256), per parameter: (whole buffer) get_global_norm_of_tensors "
    "reads the fp32 gradients (4) and clear_hp_grads zeroes them (4); (partition) "
    "update_lp_params copies fp32 to bf16, 4 + 2, of which the fused update's weight "
    "write counts 2: 4",
)
OWN_BUCKET = Setting(
    True,
    "microsoft/DeepSpeed@f5dde36 deepspeed/runtime/engine.py l.2245-2256 allreduce_no_retain "
    "over get_grads_for_reduction (one flat fp32 tensor per parameter group, "
    f"{BF16} l.292-294): allreduce_bucket's self.flatten of a one-tensor bucket returns a view "
    "of it (csrc/utils/flatten_unflatten.cpp l.15-17 -> torch/csrc/utils/tensor_flatten.h::"
    "flatten_dense_tensors; one tensor per bucket: assumption, module doc), so no copy of the "
    "gradients is kept in buckets (FrameworkMemory.bucket_copy False); the bucket's bf16 cast "
    "(2 B per element, during the all-reduce) is not modelled",
)
NORM_OPS = Setting(
    1,
    "microsoft/DeepSpeed@f5dde36 deepspeed/runtime/utils.py l.875: "
    "t.data.float().norm(2).item() per fp32 gradient tensor (get_grads_for_norm, "
    f"{BF16} l.296-314): one op (.float() of an fp32 tensor returns it, no kernel: "
    "assumption, not counted) and a blocking read per tensor, tensor after tensor",
)


def bf16_plan(plan: StagePlan, dp_width: int, state: StateBytes) -> StagePlan:
    """``plan`` (a stage's, with ``state``'s bytes per parameter: bf16 weights, 6-byte
    gradients) as the ``BF16_Optimizer`` runs it over ``dp_width`` replicas (module doc):
    optimizer state ``1/w``; the step's time the fused update of the ``1/w`` partition (its
    gradient read 4 bytes, not ``state.grad``) plus the step's and the reduction's passes
    (:data:`STEP_BYTES`, :data:`REDUCE_BYTES`) over every parameter, at the rate the policy
    timed the fused update; the data-parallel all-reduce of ``2`` bytes per parameter; the
    parameters all-gathered after the step (``step_gather``). A plan without a GPU step, or
    already sharded (ZeRO, FSDP), is returned as it is.

    Example (1e9 parameters, Adam: 6 + 24 + 2 = 32 B timed as 3.2 s; w = 2: the partition's
    update (4 + 24 + 2 + 4) x 5e8, then (8 + 12 + 4) x 1e9 bytes, at 1e10 B/s):
        >>> p = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=6e9,
        ...               optimizer_bytes=12e9, optimizer_s=3.2)
        >>> q = bf16_plan(p, 2, StateBytes(2, 6, 12))
        >>> round(q.optimizer_s, 6), q.optimizer_bytes, q.dp_grad_bytes, q.step_gather
        (4.1, 6000000000.0, 2000000000.0, True)
    """
    sharded = plan.dp_sharded or plan.scatter_bytes > 0 or plan.gather_bytes > 0
    if plan.optimizer_s <= 0 or plan.host_optimizer_s > 0 or plan.fsdp is not None or sharded:
        return plan
    if state.grad <= HP_GRAD_BYTES.value or plan.grad_bytes <= 0:
        return plan
    params = plan.grad_bytes / state.grad
    w = max(1, dp_width)
    rate_Bps = params * state.update_bytes / plan.optimizer_s
    whole, shard = STEP_BYTES.value
    always, with_dp = REDUCE_BYTES.value
    fused = HP_GRAD_BYTES.value + 2 * state.optimizer + state.weight + shard
    per_param = fused / w + whole + always + (with_dp if w > 1 else 0.0)
    return replace(
        plan,
        optimizer_bytes=plan.optimizer_bytes / w,
        optimizer_s=params * per_param / rate_Bps,
        dp_grad_bytes=params * COMMUNICATION_BYTES.value,
        step_gather=w > 1,
        notes={**plan.notes, "bf16_optimizer": f"fp32 gradients, state and update 1/{w}"},
    )


def hp_grad_update_s(
    param_bytes: float, tensors: int, spec: ComputeSpec, bytes_per_byte: float
) -> float:
    """Seconds on ``spec`` of ``update_hp_grads`` after a backward of a stage of
    ``param_bytes`` bf16 parameter bytes in ``tensors`` tensors (:data:`HP_GRAD_UPDATE`): two
    memory-bound kernels per tensor moving ``bytes_per_byte x param_bytes`` in all; 0 without
    parameters.

    Example (2 tensors, 1 MB of parameters, 10 us per kernel, 1 GB/s: 4 x 10 us + 9 MB /
    1 GB/s = 9.04 ms):
        >>> g = ComputeSpec("x", 1e12, 1e12, 1e9, 100, 0.8, 0.6, hbm_efficiency=1.0,
        ...                 kernel_overhead_s=1e-5)
        >>> round(hp_grad_update_s(1e6, 2, g, 9.0), 6)
        0.00904
    """
    if param_bytes <= 0 or tensors <= 0:
        return 0.0
    kernels = [mem("hp_grad_update", bytes_per_byte * param_bytes)]
    kernels += [mem("hp_grad_update", 0.0)] * (2 * tensors - 1)
    return phase_time(kernels, spec, "bf16").total_s


def with_hp_grad_update(cost: StageCost, param_bytes: float, spec: ComputeSpec) -> StageCost:
    """``cost`` with ``update_hp_grads`` at the end of every backward (:func:`hp_grad_update_s`
    over ``param_bytes`` and the stage's ``param_tensors``): its seconds and its two ops per
    tensor (the cast and the add; assumption: the ``.view`` and the loop's bookkeeping not
    counted) on the stage's first layer, whose backward ends the stage's.

    Example:
        >>> g = ComputeSpec("x", 1e12, 1e12, 1e9, 100, 0.8, 0.6, hbm_efficiency=1.0,
        ...                 kernel_overhead_s=1e-5)
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, bwd_layers=((1.0, 20.0, 0.0),), param_tensors=(1, 1))
        >>> d = with_hp_grad_update(c, 1e6, g)
        >>> round(d.bwd_s, 5), round(d.bwd_layers[0][0], 5), d.bwd_ops
        (2.00904, 1.00904, 4.0)
    """
    tensors = sum(cost.param_tensors)
    add_s = hp_grad_update_s(param_bytes, tensors, spec, HP_GRAD_UPDATE.value)
    if add_s <= 0 or not cost.bwd_layers:
        return cost
    sec, ops, nodes = cost.bwd_layers[0]
    cost = replace(
        cost,
        bwd_s=cost.bwd_s + add_s,
        bwd_weight_s=None if cost.bwd_weight_s is None else cost.bwd_weight_s + add_s,
        bwd_layers=((sec + add_s, ops, nodes), *cost.bwd_layers[1:]),
    )
    return cost.with_layer_ops((), (2.0 * tensors,))

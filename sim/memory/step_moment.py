"""What a GPU's optimizer step allocates while it runs: the step moment.

A mixed-precision optimizer may allocate fp32 copies of the 16-bit gradients for its update
and free them after it (:attr:`~sim.memory.framework_memory.FrameworkMemory.step_transient`,
bytes per GPU gradient byte, set by the framework profile,
:meth:`sim.framework.base.Framework.step_transient_per_byte`):

* DeepSpeed's ``FP16_Optimizer.step`` (microsoft/DeepSpeed@f5dde36
  ``deepspeed/runtime/fp16/fused_optimizer.py``) flattens ``[p.grad.to(fp32) ...]`` with
  ``_flatten_dense_tensors``, so the per-parameter fp32 copies and the flat fp32 buffer are
  alive at once, 4 + 4 bytes per 2-byte gradient (4 per gradient byte), the flat one until
  after ``optimizer.step()`` (:data:`sim.framework.deepspeed.STEP_TRANSIENT`);
* Megatron-Core's ``Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads`` with
  16-bit ``main_grad`` buffers: ``main_param.grad = main_grad.float()``, 2 per gradient byte
  (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/optimizer/optimizer.py`` l.1092-1100: every
  gradient of the rank).

With the optimizer state sharded over the replicas the step copies only the rank's shard:
Megatron-Core's ``DistributedOptimizer._copy_model_grads_to_main_grads`` sets
``shard_main_param.grad = shard_model_grad.float()`` with ``shard_model_grad =
model_grad.view(-1)[param_range.start:param_range.end]`` (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/optimizer/distrib_optimizer.py`` l.2756-2800, l.2783, l.2792): ``1/w`` of the
dense gradients and ``1/w_e`` of the routed experts' (their expert-data-parallel group), the
plan's :attr:`~sim.memory.plan.StagePlan.step_grad_share` of its ``grad_bytes``, set where the
plan is sharded (:mod:`sim.memory.dist_opt`, :func:`sim.framework.step_work.shard_optimizer`).

The engine's ledger holds it while a chunk's optimizer kernel runs (:meth:`sim.engine.step.
RankStep._update`, the chunks of a rank one after another) and :func:`sim.memory.rank_memory.
rank_memory` counts it at the step moment, both through :func:`step_transient_bytes`. The step
comes after the last backward and the gradient reduction: every stash, transient, exchange
buffer and reduction bucket of the iteration has been freed, so that moment holds the model
states, the framework's buffers and the transient of the chunk that steps.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.memory.plan import StagePlan


def step_transient_bytes(per_grad_byte: float, plan: StagePlan) -> float:
    """GPU bytes the optimizer step of ``plan``'s chunk holds while it runs (module doc):
    ``per_grad_byte`` (bytes per GPU gradient byte) x the gradient bytes it copies,
    ``plan.grad_bytes x plan.step_grad_share`` (the rank's shard with a sharded optimizer
    state), 0 where the chunk does not step on the GPU (``optimizer_s`` 0: an offloaded or
    disabled step).

    Example: 4 bytes per gradient byte, 1e9 gradient bytes: 4e9; 2 per byte, a quarter of
    them (the shard of w = 4): 5e8.
    """
    if plan.optimizer_s <= 0:
        return 0.0
    return step_copy_bytes(per_grad_byte, plan.grad_bytes, plan.step_grad_share)


def step_copy_bytes(per_grad_byte: float, grad_bytes: float, share: float = 1.0) -> float:
    """The step moment's rule (module doc): ``per_grad_byte`` (bytes per GPU gradient byte)
    x the ``share`` of ``grad_bytes`` the step copies (``1/w`` of them with the optimizer
    state sharded ``w`` ways). :func:`step_transient_bytes` applies it to a chunk's plan, the
    planner's memory bound (:meth:`sim.plan.bounds.BoundModel.memory_bytes`) to a rank's
    totals before any plan exists.

    Example: 2 per gradient byte, 4e9 gradient bytes, a quarter of them: 2e9.
    """
    return per_grad_byte * grad_bytes * share


def step_moment_bytes(per_grad_byte: float, plans: Iterable[StagePlan]) -> float:
    """The most a rank holds for a step at once: the largest of its chunks' (``plans``)
    :func:`step_transient_bytes` at ``per_grad_byte`` (its framework's ``step_transient``;
    the chunks step one after another). 0 without chunks. ``sim memory``'s rank
    (:func:`sim.memory.rank_memory.rank_memory`) and the resolved bound
    (:func:`sim.plan.resolved_bound.resolved_memory_excess`) both take it.

    Example: 2 bytes per gradient byte, chunks of 1e9 and 3e9 gradient bytes: 6e9.
    """
    return max((step_transient_bytes(per_grad_byte, plan) for plan in plans), default=0.0)


__all__ = ["step_copy_bytes", "step_moment_bytes", "step_transient_bytes"]

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
  16-bit ``main_grad`` buffers: ``main_param.grad = main_grad.float()``, 2 per gradient byte.

The engine's ledger holds it while a chunk's optimizer kernel runs (:meth:`sim.engine.step.
RankStep._update`, the chunks of a rank one after another) and :func:`sim.memory.rank_memory.
rank_memory` counts it at the step moment, both through :func:`step_transient_bytes`. The step
comes after the last backward and the gradient reduction: every stash, transient, exchange
buffer and reduction bucket of the iteration has been freed, so that moment holds the model
states, the framework's buffers and the transient of the chunk that steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.context import StageContext
from sim.memory.plan import StagePlan


def step_transient_bytes(per_grad_byte: float, plan: StagePlan) -> float:
    """GPU bytes the optimizer step of ``plan``'s chunk holds while it runs (module doc):
    ``per_grad_byte`` (bytes per GPU gradient byte) x ``plan.grad_bytes``, 0 where the chunk
    does not step on the GPU (``optimizer_s`` 0: an offloaded or disabled step).

    Example: 4 bytes per gradient byte, 1e9 gradient bytes: 4e9.
    """
    return per_grad_byte * plan.grad_bytes if plan.optimizer_s > 0 else 0.0


def step_moment_bytes(pairs: Sequence[tuple[StageContext, StagePlan]]) -> float:
    """The most the rank running ``pairs`` (its stage chunks and plans) holds for a step at
    once: the largest chunk's :func:`step_transient_bytes` of its framework's
    ``step_transient`` (the chunks step one after another). 0 without chunks."""
    return max(
        (step_transient_bytes(ctx.framework.step_transient, plan) for ctx, plan in pairs),
        default=0.0,
    )


__all__ = ["step_moment_bytes", "step_transient_bytes"]

"""Megatron-Core's per-token loss (``calculate_per_token_loss``): the gradients scaled by the
global token count once per iteration instead of by ``1/(dp x cp)`` before their reduction.

What changes in a step, read at NVIDIA/Megatron-LM@d0b3b775 (the megatron-core of
Megatron-Bridge v0.5.0, 26.06; the same at 458c8d0e, v0.5.1, and cd4afffa, v0.6.0; ``DDP:``
``megatron/core/distributed``):

* **no pre-scaling**: ``DDP:distributed_data_parallel.py`` builds the buffers with
  ``gradient_scaling_factor = 1.0`` for dense and expert gradients (lines 170-175;
  ``average_in_collective`` must be off), so ``start_grad_sync``'s
  ``bucket.grad_data *= gradient_scaling_factor`` (``DDP:param_and_grad_buffer.py:608``, only
  where the factor is not 1) does not run: the pass that the profile's ``grad_buffer_passes`` counts
  "with w > 1" (:mod:`sim.framework.megatron_lm`) is gone;
* **one scaling of every gradient at the end**: ``DDP:finalize_model_grads.py:546-562``
  (``finalize_model_grads``, after ``finish_grad_sync`` and the embedding all-reduces)
  broadcasts the token count from the last pipeline stage over the pipeline group, all-reduces
  it over the data- and context-parallel group, clamps it and takes ``1 / n`` (two ops), then
  ``model_chunk.scale_gradients`` per chunk: ``grad_data *= scaling`` on each of the chunk's
  dense and expert buffers (``DDP:distributed_data_parallel.py:561-564``,
  ``param_and_grad_buffer.py:1378-1382``): a read and a write of the whole local gradient
  buffer, whatever the data-parallel width (:data:`FINALIZE_PASSES`).

So with ``w > 1`` the step moves the same bytes as without the option (the pre-scaling's read and
write become the finalize's), and with ``w = 1`` two passes more; the two scalar collectives
and four ops are host work at the step (:data:`STEP_HOST`, one model chunk's buffers counted).
Megatron-Core before d0b3b775 (Megatron-Bridge v0.3.0 to v0.4.2: b0cc2706, 55ac7082,
d7288711, 2edffadb ``finalize_model_grads.py:484-497``) tests ``if num_tokens > 0`` per model
chunk: a blocking read of the count each chunk; not counted here (the profile does not know
the version; the step's own reads already wait for the device: an assumption that it adds
only the read's latency). The schedule's ``total_num_tokens += num_tokens`` per micro-batch
(``pipeline_parallel/schedules.py``) replaces the loss's division by the token count: the
same op count, nothing added.
"""

from __future__ import annotations

from dataclasses import replace

from sim.engine.step_host import StepHost
from sim.framework.options import Option
from sim.framework.step_work import StepWork

_DDP = "MLM:megatron/core/distributed"

FINALIZE_PASSES = 2.0
"""Passes over the local gradient buffer of ``grad_data *= scaling``: a read and a write
(module doc)."""

STEP_HOST = StepHost(
    ops=4.0,
    reductions=2.0,
    source=f"{_DDP}/finalize_model_grads.py:546-562@d0b3b775 (broadcast and all-reduce of "
    "the token count; clamp, reciprocal; scale_gradients on the dense and expert buffers)",
)
"""Host work of the finalize's scaling (module doc): the clamp, the reciprocal and the two
buffers' in-place multiplies (ops), the broadcast over the pipeline group and the all-reduce
over the data- and context-parallel group (scalar collectives)."""

OPTION = Option(
    "per_token_loss",
    False,
    (False, True),
    f"MLM:megatron/training/arguments.py --calculate-per-token-loss; {_DDP}/"
    "finalize_model_grads.py:546-562, distributed_data_parallel.py:170-175 (@d0b3b775)",
    "gradients scaled by the global token count in finalize_model_grads instead of by "
    "1/(dp x cp) before the reduction (sim.framework.per_token_loss)",
)
"""The ``megatron-lm`` profile's option (module doc)."""


def per_token_work(work: StepWork) -> StepWork:
    """``work`` with the per-token loss's scaling (module doc): the pre-scaling's passes (the
    "with w > 1" ones) dropped, :data:`FINALIZE_PASSES` added at any width.

    Example (Megatron-LM's ``(2, 2)``: zeroing and the NaN check always, the 1/w scaling's
    read and write with w > 1):
        >>> w = per_token_work(StepWork(grad_passes=(2.0, 2.0)))
        >>> w.passes(1), w.passes(8), StepWork(grad_passes=(2.0, 2.0)).passes(1)
        (4.0, 4.0, 2.0)
    """
    always, _ = work.grad_passes
    return replace(work, grad_passes=(always + FINALIZE_PASSES, 0.0))


__all__ = ["FINALIZE_PASSES", "OPTION", "STEP_HOST", "per_token_work"]

"""Transients of an iteration's peak: what is live besides the stash and the model states.

A training iteration peaks during a backward. Beyond the activation stash and the model states,
the live bytes at that moment are (Llama-style block, ``s`` sequence, ``b`` micro-batch, ``h``
hidden, ``f`` FFN width, ``V`` vocabulary, ``d`` bytes per 16-bit element):

* **the loss backward** (:func:`logits_grad_bytes`): Megatron's vocab-parallel cross entropy
  returns the gradient of the logits in fp32, ``4*s*b*V`` bytes, while the stash of the output
  layer is still live (``VocabParallelCrossEntropy.backward``, memory.md §2: Megatron counts the
  output layer and fp32 CE as ``4sbh + 4sbV``);
* **a layer's backward** (:func:`mlp_backward_working_bytes`): while the MLP's first linear
  layer computes its weight and input gradients, autograd holds the gradient of that linear
  layer's output (``w1*s*b*d``, ``w1 = 2f`` for a gated SwiGLU MLP: gate and up) and the
  residual-stream gradient entering the layer (``h*s*b*d``);
* **one recomputed layer** (full activation checkpointing): its whole stash is rebuilt just
  before its backward, so a checkpointed stage holds its inputs plus one layer's full stash
  (``StagePlan.transient_bytes``, :mod:`sim.memory.recompute`);
* **ZeRO-3 / FSDP** (:func:`zero3_backward_bytes`): an FSDP ``FULL_SHARD`` unit all-gathers its
  16-bit parameters before its forward and again before its backward and frees them after;
  during its backward, FSDP1's flat parameter also holds the unsharded 16-bit gradient until
  the post-backward hook reduce-scatters it (torch ``FlatParamHandle``,
  ``_post_backward_hook``). pipesim's engine has no ZeRO-3; the Galvatron benchmark, which
  profiles with ``zero3``, uses it;
* **pipeline receive/send buffers** (:func:`input_grad_send_bytes`): the gradient of a stage's
  input exists from the end of its backward until the send to the previous stage completes
  (``torch.distributed.isend`` keeps the tensor until its work completes; Galvatron's
  ``backward_step`` retains ``input_tensor.grad``). The engine charges it as ``buffers``;
* **gradients** (:func:`grads_not_allocated_bytes`): with ``zero_grad(set_to_none=True)``
  (torch's default since 2.0) a parameter's gradient is allocated at its first backward of the
  iteration, so at a peak early in the backward the gradients of the layers not yet
  back-propagated are not allocated. The engine charges gradient buffers for the whole run
  (``set_to_none=False`` behaviour, an upper bound); a measurement that subtracts the
  after-backward allocation (Galvatron's ``_act_peak``) sees them as negative.

All functions return bytes and take element counts; none is fitted to a measurement.
"""

from __future__ import annotations

LOSS_GRAD_BYTES = 4
"""Bytes per element of the logits gradient: Megatron's cross entropy computes the softmax
and its gradient in fp32 (memory.md §2, Megatron ``theoretical_memory_usage.py``)."""


def _check(**counts: float) -> None:
    bad = {k: v for k, v in counts.items() if v < 0}
    if bad:
        raise ValueError(f"negative sizes: {bad}")


def logits_grad_bytes(seq_len: int, microbatch: int, vocab: int, elem_bytes: int = 4) -> float:
    """Gradient of the logits the loss backward returns: ``elem_bytes * s * b * V`` bytes
    (``elem_bytes`` = :data:`LOSS_GRAD_BYTES` for Megatron's fp32 cross entropy).

    Raises:
        ValueError: a negative size.
    """
    _check(seq_len=seq_len, microbatch=microbatch, vocab=vocab)
    return float(elem_bytes * seq_len * microbatch * vocab)


def mlp_backward_working_bytes(
    seq_len: int, microbatch: int, hidden: int, fc1_width: int, elem_bytes: int = 2
) -> float:
    """Activation-gradient working memory of one transformer layer's backward: the gradient of
    the MLP's first linear output (``fc1_width`` wide: ``2f`` for SwiGLU, ``f`` otherwise) and
    the residual-stream gradient (``hidden`` wide), ``(fc1_width + hidden) * s * b * d`` bytes.

    Raises:
        ValueError: a negative size.
    """
    _check(seq_len=seq_len, microbatch=microbatch, hidden=hidden, fc1_width=fc1_width)
    return float((fc1_width + hidden) * seq_len * microbatch * elem_bytes)


def zero3_gathered_bytes(params: float, elem_bytes: int = 2) -> float:
    """Bytes of one FSDP unit's all-gathered 16-bit parameters: ``params * d``."""
    _check(params=params)
    return float(params * elem_bytes)


def zero3_backward_bytes(params: float, elem_bytes: int = 2) -> float:
    """Bytes FSDP1 holds for one unit during its backward: the gathered parameters and the
    unsharded gradient of its flat parameter, ``2 * params * d``."""
    return 2 * zero3_gathered_bytes(params, elem_bytes)


def input_grad_send_bytes(in_bytes: float) -> float:
    """Bytes of the stage-input gradient held from the end of a backward until its send to the
    previous stage completes: the size of the stage input, ``in_bytes``."""
    _check(in_bytes=in_bytes)
    return float(in_bytes)


def grads_not_allocated_bytes(grad_bytes_per_unit: list[float], done_units: int) -> float:
    """Gradient bytes not yet allocated when the backward has finished the last ``done_units``
    of ``grad_bytes_per_unit`` (units in forward order; backward runs them in reverse).

    Raises:
        ValueError: ``done_units`` outside ``[0, len(grad_bytes_per_unit)]``.
    """
    if not 0 <= done_units <= len(grad_bytes_per_unit):
        raise ValueError(f"done_units {done_units} not in [0, {len(grad_bytes_per_unit)}]")
    pending = grad_bytes_per_unit[: len(grad_bytes_per_unit) - done_units]
    return float(sum(pending))

"""Megatron's fused cross-entropy losses as the memory-bound passes they make over the logits.

``--cross-entropy-loss-fusion`` replaces Megatron's unfused fp32 vocabulary-parallel cross
entropy (:func:`sim.compute.layers.cross_entropy_kernels`, ``unfused``) by one of two fused
implementations (NVIDIA/Megatron-LM@d98e8a64dd ``megatron/core/models/common/language_module/
language_module.py`` lines 173-198, ``compute_language_model_loss``). With ``N = t*V`` logits
of ``d`` bytes on the rank (``V``: its vocabulary shard):

* ``native`` (``--cross-entropy-fusion-impl native``): ``megatron/core/fusions/
  fused_cross_entropy.py`` (same commit), four functions under ``jit_fuser``, which is
  ``torch.compile`` from PyTorch 2.2 (``megatron/core/jit.py``). Each is taken to compile to
  one Inductor kernel over the logits (an **assumption**: Inductor fuses the element-wise ops
  of a function with its reductions and writes each mutated or returned tensor once):
  ``calculate_logits_max`` (lines 12-22: ``.float()`` returned and the max; ``N*(d + 4)``,
  ``4N`` for fp32 logits, where ``.float()`` is the same tensor),
  ``calculate_predicted_logits`` (lines 25-44: the max subtracted in place, ``exp`` into the
  same buffer and its sum; ``8N``), ``calculate_cross_entropy_loss`` (lines 47-61: ``div_``;
  ``8N``); backward ``calculate_gradients`` (lines 64-84: the target's ``-= 1``, the
  ``mul_`` by the output gradient, written back into the saved softmax, and
  ``.to(torch.bfloat16)``: ``4N`` read, ``4N + 2N`` written).
* ``te`` (``--cross-entropy-fusion-impl te``): Transformer Engine's Triton kernels as TE 2.x
  had them before 2.18 (NVIDIA/TransformerEngine@8b99682 ``transformer_engine/common/triton/
  cross_entropy.py``; the runs' containers carry TE 2.8 and later, :mod:`sim.runs.
  te_environment`): ``online_softmax_kernel`` (lines 66-82: one read of the 16-bit logits,
  three floats per row written: ``N*d + 12t``), ``cross_entropy_kernel`` (lines 175-190: the
  logits read again and the gradient written over them in their own dtype: ``2N*d``);
  backward ``element_mul_kernel`` (lines 258-262, in place: ``2N*d``), which
  ``transformer_engine/pytorch/triton/cross_entropy.py`` ``cross_entropy_backward`` skips
  only for a scalar output gradient of 1.0 (lines 119-138, same commit); Megatron's loss is
  per token (``reduce_loss=False``), so it runs. No fp32 copy, no cast back. TE 2.18
  (@01bbe3eea, 2026-07-09; tagged 2026-08-04) writes the gradient to a separate fp32 buffer
  instead (``N*(d + 4)`` forward, ``8N`` and an ``N*(4 + d)`` cast backward): not modelled;
  Megatron-Bridge's releases up to 26.08 are taken to carry TE 2.17 or earlier (an
  **assumption**: their containers' TE versions are not in the data).

The collectives (Megatron's three all-reduces of ``t`` floats, native's two, TE's all-gather of
``3t`` floats) and the target masks are small and stay as :mod:`sim.parallel.megatron` counts
them.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem

CROSS_ENTROPY_FUSIONS = ("unfused", "native", "te")
"""The loss implementations: Megatron's unfused one (``sim.compute.layers``), its
``torch.compile``-fused one (``native``) and Transformer Engine's (``te``)."""


def native_kernels(t: int, vocab: int, d: int) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, backward)`` kernels of Megatron's ``fused_vocab_parallel_cross_entropy``
    over ``t`` tokens and ``vocab`` logits of ``d`` bytes (module doc; bytes per pass)."""
    n = float(t * vocab)
    cast = n * (d + 4) if d < 4 else 4 * n
    fwd = [mem("ce_fused_max", cast), mem("ce_fused_sub_exp_sum", 8 * n),
           mem("ce_fused_div", 8 * n)]  # fmt: skip
    return fwd, [mem("ce_fused_grad", 10 * n)]


def te_kernels(t: int, vocab: int, d: int) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, backward)`` kernels of Transformer Engine's ``parallel_cross_entropy``
    over ``t`` tokens and ``vocab`` logits of ``d`` bytes (module doc; bytes per pass)."""
    n = float(t * vocab)
    fwd = [mem("ce_online_softmax", n * d + 12 * t), mem("ce_loss_grad", 2 * n * d)]
    return fwd, [mem("ce_grad_mul", 2 * n * d)]


def fused_kernels(
    fusion: str, t: int, vocab: int, d: int
) -> tuple[list[Kernel], list[Kernel]] | None:
    """The fused loss's ``(forward, backward)`` kernels; None for ``unfused``.

    Raises:
        ValueError: a fusion not in :data:`CROSS_ENTROPY_FUSIONS`.
    """
    if fusion not in CROSS_ENTROPY_FUSIONS:
        raise ValueError(f"cross_entropy_fusion must be one of {CROSS_ENTROPY_FUSIONS}")
    if fusion == "native":
        return native_kernels(t, vocab, d)
    if fusion == "te":
        return te_kernels(t, vocab, d)
    return None

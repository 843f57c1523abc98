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

The collectives (Megatron's three all-reduces of ``t`` floats, native's two of ``t`` and
``2t``, TE's all-gather of ``3t`` floats per rank) and the target masks are small and are
:mod:`sim.parallel.megatron`'s (:func:`~sim.parallel.megatron.loss_comm`).

**Host ops** (:func:`loss_ops`, the unit of :mod:`sim.compute.megatron_ops`: one call into
PyTorch's dispatcher as a ``TorchDispatchMode`` sees it, on one tensor rank, 16-bit logits, no
label smoothing), counted from the code (:data:`LOSS_OPS`): the unfused loss issues 26 forward
(three all-reduces among them, called on a group of one too, so counted here at every ``t``
and not again as collectives) and 11 backward ops, ``native`` 5 (two all-reduces) and 1, ``te``
9 and 4 (its all-gather, issued only at ``t > 1``, is :mod:`sim.parallel.megatron`'s). Two
**assumptions**: a ``torch.compile``-d function (``native``) is one op per call, the one
Inductor kernel its time assumes (guard checks and the generated wrapper not counted apart),
and a Triton kernel's launch (``te``) is one op.
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


LOSS_OPS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "unfused": (
        # NVIDIA/Megatron-LM@d98e8a64dd megatron/core/tensor_parallel/cross_entropy.py
        ("l.25 .float() of the 16-bit logits (_to_copy); l.27 torch.max", 2, 0),
        ("l.130, 146, 150: three torch.distributed.all_reduce", 3, 0),
        ("l.42 unsqueeze, sub_; l.45 lt, ge, bitwise_or; l.46 clone, sub; l.47 index_put_", 8, 0),
        ("l.53-54 two views; l.55 arange; l.56 index; l.57 clone; l.58 view_as", 6, 0),
        ("l.59 index_put_; l.62 exp; l.63 sum; l.74 log, sub; l.77 unsqueeze, div_", 7, 0),
        ("l.91 view; l.94 arange; l.96 view, .float() (_to_copy), rsub", 0, 5),
        ("l.111 grad_2d[arange, target] -= update: index, sub_, index_put_", 0, 3),
        ("l.114 unsqueeze, mul_", 0, 2),
        # PyTorch torch/csrc/autograd/engine.cpp validate_outputs: a gradient whose dtype is
        # not its input's is cast to it
        ("the engine's cast of the fp32 gradient to the logits' 16-bit dtype (_to_copy)", 0, 1),
    ),
    "native": (
        # NVIDIA/Megatron-LM@d98e8a64dd megatron/core/fusions/fused_cross_entropy.py;
        # jit_fuser is torch.compile from PyTorch 2.2 (megatron/core/jit.py l.16-33)
        ("l.93, 104, 116: three compiled functions, one op each (assumption)", 3, 0),
        ("l.94, 112: two torch.distributed.all_reduce", 2, 0),
        ("l.131 calculate_gradients, compiled; its l.82 cast makes the gradient bf16", 0, 1),
    ),
    "te": (
        # NVIDIA/Megatron-LM@d98e8a64dd megatron/core/models/common/language_module/
        # language_module.py (lm); NVIDIA/TransformerEngine@8b99682 transformer_engine/pytorch/
        # cross_entropy.py (ce) and transformer_engine/pytorch/triton/cross_entropy.py (tr); on a
        # tensor rank's group of one: tr l.78-84's all-gather is sim.parallel.megatron's
        ("lm l.176 as_strided of the labels", 1, 0),
        ("tr l.44, 47, 49 three torch.zeros; tr l.74 clamp; tr l.108 reshape (a view)", 5, 0),
        ("tr l.59, 86 two Triton launches (one op each, assumption); ce l.62 detach", 3, 0),
        ("tr l.121-122 torch.tensor(1.0) (lift_fresh), torch.equal (shapes differ: no sync)", 0, 2),
        ("tr l.133 grad_output.contiguous(): a clone (lm l.205's transpose back, b > 1)", 0, 1),
        ("tr l.130 element_mul_kernel's launch", 0, 1),
    ),
}
"""``(what, forward ops, backward ops)`` of each loss on one tensor rank (module doc), lines of
the files named in each group's comment."""


def loss_ops(fusion: str) -> tuple[int, int]:
    """``(forward, backward)`` host ops of the loss ``fusion`` (:data:`LOSS_OPS`).

    Raises:
        ValueError: a fusion not in :data:`CROSS_ENTROPY_FUSIONS`.

    Example:
        >>> loss_ops("unfused"), loss_ops("native"), loss_ops("te")
        ((26, 11), (5, 1), (9, 4))
    """
    if fusion not in CROSS_ENTROPY_FUSIONS:
        raise ValueError(f"cross_entropy_fusion must be one of {CROSS_ENTROPY_FUSIONS}")
    rows = LOSS_OPS[fusion]
    return sum(f for _, f, _ in rows), sum(b for _, _, b in rows)

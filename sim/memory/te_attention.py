"""Which attention backend Transformer Engine runs, where determinism decides it.

Megatron-LM's default ``--attention-backend auto`` lets TE's ``DotProductAttention`` choose
among FlashAttention, cuDNN's FusedAttention and its unfused ``UnfusedDotProductAttention``.
For memory the choice is binary: the fused kernels keep no ``s^2`` scores (pipesim's
``"flash"``), the unfused one keeps the softmax output, the dropout mask and the dropped-out
probabilities (``"math"``, :mod:`sim.memory.attention`). Under determinism
(``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``, which ``--deterministic-mode`` sets) TE filters:

* **FlashAttention 2**: TE before 1.3 disables flash-attn 2 outright ("Disabling usage of
  FlashAttention since version 2 does not support deterministic execution", NVIDIA/
  TransformerEngine v1.2 ``transformer_engine/pytorch/attention.py`` 2005-2011); from 1.3 on
  only flash-attn < 2.4.1 (v1.3 ``attention.py`` 2282; d0067d0 ``transformer_engine/pytorch/
  attention/dot_product_attention/utils.py`` 1516-1525);
* **FusedAttention** ``F16_arbitrary_seqlen`` (the sub-backend of these shapes) in training:
  disabled on compute capability other than 9.0 (v1.2 ``attention.py`` 2376-2381), below 9.0
  from TE 2 (d0067d0 ``utils.py`` 1555-1566).

What remains on an A100 (8.0) under determinism with TE 1.2, or with an older flash-attn, is
the unfused attention. Below compute capability 8.0 (a V100's 7.0) neither fused kernel runs,
deterministic or not: TE v1.2 ``attention.py`` 2001-2004 and 2013-2016 enable flash-attn and
FusedAttention only at ``>= (8, 0)``, 8b99682 ``utils.py`` 487-494 disables both below sm80.
"""

from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, ...]


@dataclass(frozen=True)
class TeEnvironment:
    """The software a run's attention ran with.

    Attributes:
        te: Transformer Engine's version, ``(1, 2)``.
        flash_attn: flash-attn's version, or None when it is not installed.
        label: where the versions come from (a container, a lock file).
    """

    te: Version
    flash_attn: Version | None
    label: str = ""


def te_attention_backend(
    env: TeEnvironment, compute_capability: Version, deterministic: bool
) -> str:
    """``"flash"``, ``"fused"`` or ``"unfused"``: the backend TE's filters leave (module doc),
    preferring flash-attn, then FusedAttention, as both TE releases do on these shapes.

    Example:
        >>> lts = TeEnvironment(te=(1, 2), flash_attn=(2, 0, 4))
        >>> te_attention_backend(lts, (8, 0), deterministic=True)
        'unfused'
        >>> te_attention_backend(lts, (8, 0), deterministic=False)
        'flash'
        >>> te_attention_backend(lts, (9, 0), deterministic=True)
        'fused'
        >>> te_attention_backend(TeEnvironment((2, 8), (2, 7, 4)), (8, 0), True)
        'flash'
        >>> te_attention_backend(TeEnvironment((2, 8), (2, 7, 4)), (7, 0), False)
        'unfused'
    """
    if compute_capability < (8, 0):  # no flash-attn, no FusedAttention below sm80 (module doc)
        return "unfused"
    flash = env.flash_attn is not None and env.flash_attn >= (2,)
    fused = True
    if deterministic:
        if env.te < (1, 3):
            flash = False
        elif env.flash_attn is not None and env.flash_attn < (2, 4, 1):
            flash = False
        if env.te < (2,):
            fused = compute_capability == (9, 0)
        else:
            fused = compute_capability >= (9, 0)
    if flash:
        return "flash"
    return "fused" if fused else "unfused"


def memory_attention(backend: str) -> str:
    """pipesim's attention implementation for a TE backend's activation bytes: ``"math"``
    for the unfused one, ``"flash"`` for both fused kernels (no ``s^2`` scores kept)."""
    return "math" if backend == "unfused" else "flash"

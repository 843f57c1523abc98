"""Rotary embedding as the unfused eager ops Megatron-Core runs when YaRN scales it (GPT-OSS).

Megatron-Core applies RoPE to queries and keys one tensor at a time with the YaRN
"concentration factor" as ``mscale`` (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/attention.py`` lines 1505-1533). For a YaRN embedding without
``yarn_mscale`` / ``yarn_mscale_all_dim`` that factor is ``0.1 ln(s) + 1`` of the scaling factor
``s`` (``yarn_rotary_pos_embedding.py`` lines 275-304), 1.347 for GPT-OSS's ``s = 32``
(Megatron-Bridge's GPT-OSS bridge: ``yarn_rotary_scaling_factor = 32.0``, ``yarn_mscale`` and
``yarn_mscale_all_dim`` None: NVIDIA-NeMo/Megatron-Bridge@f9b6319 ``models/gpt_oss/
gpt_oss_bridge.py`` lines 94-100; Hugging Face's ``attention_factor`` is the same). Transformer
Engine's fused RoPE takes no scale, so ``apply_rotary_pos_emb`` falls back to the unfused
``_apply_rotary_pos_emb_bshd`` whenever ``mscale != 1.0``, ``apply_rope_fusion`` or not
(``rope_utils.py`` lines 340-370; the same lines in the Megatron-Core of Bridge v0.2.0, v0.3.0
and v0.4.1: Megatron-LM@0d8e0714, @b0cc2706, @d7288711).

Its op sequence, counted with torch 2.13's dispatch mode on the function as written (each ATen
op one kernel moving its inputs and outputs; ``N`` elements of the rotated tensor, ``d`` bytes
each; the ``[s, hd]`` cos/sin tables, six small kernels, are left out):

* forward: ``t * cos`` (``2N``), ``-x2`` (``N``), ``cat`` of the halves (``2N``),
  ``* sin`` (``2N``), the sum (``3N``), the final ``cat`` with the empty pass-through part
  (``2N``): six kernels, ``12 N d``, where the fused kernel moves ``2 N d``;
* backward: ``g * sin`` (``2N``), the negation's backward (``N``), the halves' ``cat``
  (``2N``), ``g * cos`` (``2N``), the two branches' sum (``3N``), the slice's backward
  (``N``) and its accumulation (``3N``): seven kernels, ``14 N d``.

Nothing large is kept for the backward (the products keep the small cos/sin tables).
"""

from __future__ import annotations

import math

from sim.compute.kernels import Kernel, mem

FWD_OPS = (("mul_cos", 2), ("neg", 1), ("cat_half", 2), ("mul_sin", 2), ("add", 3), ("cat", 2))
"""Forward kernels: (op, elements moved per element of the tensor) (module doc)."""
BWD_OPS = (
    ("mul_sin", 2), ("neg", 1), ("cat_half", 2), ("mul_cos", 2), ("add", 3),
    ("slice", 1), ("add_slice", 3),
)  # fmt: skip
"""Backward kernels: (op, elements moved per element of the tensor) (module doc)."""


def yarn_concentration(scaling_factor: float) -> float:
    """YaRN's concentration factor without ``mscale`` overrides: ``0.1 ln(s) + 1`` for
    ``s > 1``, else 1 (Megatron-LM@d98e8a64 ``yarn_rotary_pos_embedding.py`` 275-291).

    Example: ``yarn_concentration(32)`` is 1.3466 (GPT-OSS).
    """
    return 0.1 * math.log(scaling_factor) + 1.0 if scaling_factor > 1 else 1.0


def rope_fwd(name: str, elements: float, d: int) -> list[Kernel]:
    """Forward kernels of unfused RoPE over a tensor of ``elements`` elements of ``d`` bytes,
    named ``<name>_<op>`` (module doc)."""
    return [mem(f"{name}_{op}", k * elements * d) for op, k in FWD_OPS]


def rope_bwd(name: str, elements: float, d: int) -> list[Kernel]:
    """Backward kernels of :func:`rope_fwd` (module doc)."""
    return [mem(f"{name}_{op}_bwd", k * elements * d) for op, k in BWD_OPS]

"""Host ops of GPT-OSS's eager pieces of a Megatron-Core layer, counted.

Where other models run a fused kernel or nothing, a GPT-OSS layer runs four pieces of
Megatron-Core as eager PyTorch ops, each op one more call the host issues
(:mod:`sim.hardware.host_ops`). Megatron-Core's layer counts (:mod:`sim.compute.mcore_ops`,
taken with learned positions, no biases, no clamp) have none of them. Counted by
``scripts/count_gptoss_ops.py``: Megatron-Core 0.15.0's own functions (the same code at the
Megatron-LM commits of Megatron-Bridge v0.2.0, v0.3.0 and v0.4.1, 0d8e0714, b0cc2706, d7288711,
and at d98e8a64) under torch 2.13's dispatch mode on the CPU, activations and parameters in
bf16, probabilities and rotary frequencies in fp32; every ATen op counted, views included, as
:mod:`sim.compute.mcore_ops` counts; a backward counted with its gradient given, w.r.t.
non-leaf inputs (no gradient accumulation):

* **YaRN's rotary embedding** (:mod:`sim.compute.rope_unfused`: ``mscale`` 1.347, which
  Transformer Engine's fused RoPE does not take, so ``rope_utils.apply_rotary_pos_emb`` runs
  ``_apply_rotary_pos_emb_bshd``): 15 forward and 11 backward ops per rotated tensor, the query
  and the key (:data:`ROPE_OPS`; the cos/sin tables are rebuilt, scaled and cast on each call);
* **the attention projection's bias** (``add_bias_linear``; the GPT-OSS bridge sets
  ``bias_dropout_fusion = False``, NVIDIA-NeMo/Megatron-Bridge v0.2.0 and v0.3.0
  ``models/gpt_oss/gpt_oss_provider.py`` line 82, v0.4.1 to v0.6.0 ``gpt_oss_bridge.py`` line
  74, so the unfused
  bias-dropout-add adds it as an op): 1 forward op, 2 backward (the bias gradient's reduction)
  (:data:`PROJ_BIAS_OPS`);
* **the GeGLU clamp** (:mod:`sim.compute.glu_clamp`): ``chunk``, two ``clamp``, ``cat``: 4
  forward and 11 backward ops (:data:`CLAMP_OPS`, the clamped ``weighted_bias_quick_geglu_impl``
  less the unclamped one);
* **the experts' down-projection bias** (``TEGroupedMLP._apply_bias``, :mod:`sim.compute.
  expert_bias`): per local expert ``split`` views, ``b * p`` and ``t + ...`` (2 forward ops),
  and in the backward the add's cast, the two products and their reductions, the bias
  gradient's cast (8); over the experts ``view``, two ``split`` s, ``cat``, ``view`` and the
  cast (6 forward, 5 backward): :data:`BIAS_OPS` (2 local experts: 10 / 21, 4: 14 / 37).

The rotary embedding and the projection's bias are the attention's (a CUDA graph of ``attn``
takes them with the rest of the layer's attention half, :mod:`sim.framework.cuda_graphs`); the
clamp and the bias run in the experts and go with the experts' per-expert host work
(:func:`sim.parallel.layer_host.grouped_host_ops`), which a graph takes only when it captures
the experts. Transformer Engine's fused grouped MLP (``fused_grouped_mlp``) runs neither.
"""

from __future__ import annotations

from sim.compute.decoder_shape import DecoderShape
from sim.compute.moe_shape import MoEShape

COUNTED_WITH = "megatron-core 0.15.0, torch 2.13.0 (CPU), scripts/count_gptoss_ops.py"
"""What the counts were taken with (module doc)."""

ROPE_OPS = (15.0, 11.0)
"""``(forward, backward)`` ops of the unfused rotary embedding of one tensor (module doc)."""
PROJ_BIAS_OPS = (1.0, 2.0)
"""The attention projection's bias added by the unfused bias-dropout-add (module doc)."""
CLAMP_OPS = (4.0, 11.0)
"""The clamp of the GeGLU's two halves (module doc)."""
BIAS_OPS = ((6.0, 5.0), (2.0, 8.0))
"""``_apply_bias``: ``((forward, backward) fixed, (forward, backward) per local expert)``."""


def attention_ops(m: DecoderShape) -> tuple[float, float]:
    """``(forward, backward)`` host ops GPT-OSS's attention adds to a layer of ``m`` (module
    doc): the unfused rotary embedding of the query and the key, and the projection's bias.

    Example: both, ``2 * 15 + 1`` forward and ``2 * 11 + 2`` backward ops.
    """
    fwd = bwd = 0.0
    if m.rope_unfused:
        fwd, bwd = 2 * ROPE_OPS[0], 2 * ROPE_OPS[1]
    if m.attn_bias:
        fwd, bwd = fwd + PROJ_BIAS_OPS[0], bwd + PROJ_BIAS_OPS[1]
    return fwd, bwd


def expert_ops(moe: MoEShape, local: float) -> tuple[float, float]:
    """``(forward, backward)`` host ops GPT-OSS's experts add on a rank of ``local`` experts
    (module doc): the clamp once, the bias chain per expert; none under the fused grouped MLP.

    Example: clamped and biased, 16 local experts: ``4 + 6 + 2*16 = 42`` forward and
    ``11 + 5 + 8*16 = 144`` backward ops.
    """
    if moe.fused_grouped_mlp:
        return 0.0, 0.0
    fwd, bwd = CLAMP_OPS if moe.clamp else (0.0, 0.0)
    if moe.bias:
        (f0, b0), (f1, b1) = BIAS_OPS
        fwd, bwd = fwd + f0 + f1 * local, bwd + b0 + b1 * local
    return fwd, bwd

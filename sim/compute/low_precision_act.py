"""The activation bytes a low-precision recipe saves: Transformer Engine keeps the linear
layers' saved inputs quantized.

A TE ``Linear`` (``GroupedLinear``, ``LayerNormLinear``) quantizes its input for the forward
GEMM and, when the weight-gradient GEMM runs in the recipe's format, saves that quantized input
for the backward instead of the 16-bit one (its column-wise usage only:
NVIDIA/TransformerEngine@d0067d0d ``transformer_engine/pytorch/module/linear.py:596-621``,
"Discard row-wise data since it is not needed in backward pass"; ``saved_inputmat =
inputmat``). Each such input then costs ``data_bytes + scale_bytes`` per element
(:class:`~sim.compute.precision.Recipe`: 1 for per-tensor FP8, 1 + 1/32 for MXFP8) instead of
the training dtype's ``d``.

Which inputs, per layer on one rank (the terms of :func:`sim.compute.decoder.layer_act_bytes`
they replace; ``t`` tokens, ``r`` = ``t / tp`` under sequence parallelism):

* attention: the fused norm's output into the QKV projection (``LayerNormLinear``), ``r x h``;
  MLA: the up-projections' normed latents (``LayerNormLinear``), ``t x (q_lora + kv_lora)``
  (the down projections share the normed input between two linears, each saving its own copy:
  counted as no change). The output projection's input is the attention core's output, which
  the core saves itself: with a recipe other than delayed scaling Megatron-Core makes
  ``linear_proj`` save that 16-bit tensor as it is (``set_save_original_input``: no change),
  with delayed scaling it saves a quantized copy besides, ``t x q / tp`` (``q`` = heads x
  head dim; MLA ``heads/tp x d_v``) added (Megatron-LM !3465, 781e765, 2025-08-19;
  NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/attention.py`` lines 426-444,
  ``multi_latent_attention.py`` line 251; TE >= 2.6, FP4 >= 2.7);
* dense MLP: the fused norm's output into fc1, ``r x h``, and fc2's input ``t x ffn / tp``;
* MoE: the routed experts' fc1 input (the permuted tokens, ``n x w`` for the ``n`` rows of the
  local experts, ``w`` the row width: ``h``, or the latent size ``l`` of a latent MoE) and fc2
  input ``n x ffn_e / etp``; a shared expert's fc2 input ``t x ffn_s / tp``, and under delayed
  scaling the quantized copy its fc1 saves of the norm output the router keeps in 16 bits
  (``t x h`` added; other recipes save that tensor as it is, by the same change:
  ``moe/shared_experts.py`` lines 147-161); a latent MoE's ``fc2_latent_proj`` input ``r x l``, less the quantized copy
  ``fc1_latent_proj`` (a ``TELinear``) saves of the norm output (``r x h``):
  NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/moe_layer.py`` lines 265-306 and
  476-492; Transformer Engine's ``GroupedLinear`` keeps its inputs column-wise only
  (NVIDIA/TransformerEngine@d0067d0d ``transformer_engine/pytorch/module/grouped_linear.py``
  lines 901-914).

**Hybrid layers** (Megatron-Core's ``HybridStack``, Nemotron-H, Nemotron 3): every layer runs
inside the recipe's context (``megatron/core/models/hybrid/hybrid_block.py`` lines 334-390) and
its linears are TE modules (``megatron/core/models/hybrid/hybrid_layer_specs.py`` lines
106-232), so they save quantized inputs as a transformer block does:

* attention layer (``*``): as the attention half above (``linear_qkv`` a
  ``TELayerNormColumnParallelLinear``, ``linear_proj`` a ``TERowParallelLinear``);
* MLP layer (``-``): as the dense MLP above (``linear_fc1`` a ``TELayerNormColumnParallelLinear``);
* MoE layer (``E``): as the MoE MLP above (its own ``TENorm`` feeds the router);
* Mamba layer (``M``): ``in_proj`` (a ``TELayerNormColumnParallelLinear``) keeps its normed
  input ``r x h`` and ``out_proj`` (a ``TERowParallelLinear``) the gated norm's output ``t x
  d_i / tp`` (``megatron/core/ssm/mamba_mixer.py`` lines 281, 437, 510-525).

A quantization config's MXFP8 linears under another recipe (``te_quant.cfg``'s Mamba
``out_proj`` under NVFP4, :attr:`~sim.compute.precision_rules.LayerRules.mxfp8`) save their
input at MXFP8's ``1 + 1/32`` bytes (:func:`recipe_input_savings`).

Not changed: norms' inputs, the attention core's tensors (FP8 attention is off by default),
activation-function inputs, the router, embedding, output layer, the Mamba scan's tensors
(``in_proj``'s output, the conv output, ``dt``), and MTP layers.
"""

from __future__ import annotations

from sim.compute.decoder import ATTN, tokens
from sim.compute.decoder_shape import DecoderShape, base_kind
from sim.compute.precision import TE, get_recipe
from sim.compute.precision_rules import LowPrecision
from sim.compute.quantize import LINEARS

QUANTIZED_KINDS = ("block", "moe_block", "attention", "mlp", "moe", "mamba")
"""Layer kinds whose linear inputs a recipe saves quantized (module doc); MTP depths, the
embedding and the output layer are left in 16 bits."""


Input = tuple[str, float, float]
"""``(linear, 16-bit input elements replaced, quantized elements added)``: one linear layer's
saved input, by its GEMM name (:data:`sim.compute.quantize.LINEARS`)."""


def _attention_inputs(
    m: DecoderShape, kind: str, t: int, r: int, tp: int, original: bool
) -> list[Input]:
    """The attention half's linear inputs (module doc; ``original``: the output projection
    saves the core's 16-bit output as it is)."""
    if m.mla is not None:
        mla = m.mla
        proj = 0.0 if original else float(t * (m.heads // tp) * mla.d_v)
        return [("q_up", float(t * mla.q_lora), 0.0), ("kv_up", float(t * mla.kv_lora), 0.0),
                ("proj", 0.0, proj)]  # fmt: skip
    blk = m.block_for(kind)
    proj = 0.0 if original else float(t * blk.heads * blk.hd // tp)
    return [("qkv", float(r * m.hidden), 0.0), ("proj", 0.0, proj)]


def _mlp_inputs(
    m: DecoderShape, base: str, t: int, r: int, tp: int, rows, etp, original: bool
) -> list[Input]:
    """The MLP half's (or the Mamba mixer's) linear inputs (module doc; ``original``: a shared
    expert's fc1 saves the router's 16-bit input as it is)."""
    if base in ("block", "mlp"):
        return [("up", float(r * m.hidden), 0.0), ("down", float(t * m.ffn_hidden // tp), 0.0)]
    if base == "mamba" and m.mamba is not None:
        return [("in_proj", float(r * m.hidden), 0.0),
                ("out_proj", float(t * m.mamba.inner // tp), 0.0)]  # fmt: skip
    if base not in ("moe_block", "moe") or m.moe is None:
        return []
    moe, n = m.moe, float(sum(rows))
    out = [
        ("expert_up", n * moe.row_width, 0.0),
        ("expert_down", n * moe.expert_ffn / (etp or tp), 0.0),
    ]
    if moe.shared_ffn:
        out += [
            ("shared_down", t * moe.shared_ffn / tp, 0.0),
            ("shared_up", 0.0, 0.0 if original else float(t * moe.hidden)),
        ]
    if moe.latent:  # fc2_latent_proj's input; fc1_latent_proj's own copy of the norm output
        out += [
            ("latent_up", float(r * moe.latent), 0.0),
            ("latent_down", 0.0, float(r * moe.hidden)),
        ]
    return out


def quantized_input_savings(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    saved_bytes: float,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    rows: tuple[float, ...] = (),
    etp: int | None = None,
    keep16: tuple[str, ...] = (),
    original: bool = True,
) -> float:
    """Bytes of one layer's stash on one rank, one micro-batch, that a recipe saving each
    linear input at ``saved_bytes`` per element removes against ``d``-byte inputs (module doc);
    0 for layers whose inputs it does not change. Same arguments as
    :func:`~sim.compute.decoder.layer_act_bytes`; ``keep16``: linear layers the recipe keeps in
    16 bits (:attr:`sim.compute.precision_rules.LayerRules.keep16`), which save their input
    as it is; ``original``: the recipe is not delayed scaling, so the output projection and a
    shared expert's fc1 save the 16-bit tensors another module saves (:func:`keeps_original`).

    Example:
        >>> from sim.compute.decoder_shape import DecoderShape
        >>> m = DecoderShape(layers=2, hidden=64, heads=4, seq_len=8, vocab=128, ffn_hidden=256)
        >>> quantized_input_savings("block", m, 1, 2, 1.0)  # (64 + 64 + 256) x 8 x 1 B
        3072.0
        >>> quantized_input_savings("block", m, 1, 2, 1.0, original=False)  # less proj's 64 x 8
        2560.0
    """
    base = base_kind(kind)
    if base not in QUANTIZED_KINDS or saved_bytes >= d:
        return 0.0
    t, r = tokens(m, b, tp, sp, cp)
    inputs = _attention_inputs(m, kind, t, r, tp, original) if base in ATTN else []
    inputs += _mlp_inputs(m, base, t, r, tp, rows, etp, original)
    kept = [(rep, add) for name, rep, add in inputs if name not in keep16]
    rep, add = sum(x for x, _ in kept), sum(y for _, y in kept)
    return max(0.0, rep * (d - saved_bytes) - add * saved_bytes)


def recipe_input_savings(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    low: LowPrecision,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    rows: tuple[float, ...] = (),
    etp: int | None = None,
) -> float:
    """:func:`quantized_input_savings` under ``low`` (a TE recipe that runs its weight gradient
    low): its linears save ``data_bytes + scale_bytes`` per input element, those of
    ``low.rules.mxfp8`` MXFP8's (module doc), ``low.rules.keep16`` their 16-bit input.

    Example (``out_proj`` in MXFP8 under NVFP4; a Mamba layer of 2 heads x 4, 8 tokens, h 16):
        >>> from sim.compute.decoder_shape import DecoderShape
        >>> from sim.compute.precision import get_recipe
        >>> from sim.compute.precision_rules import LayerRules, LowPrecision
        >>> from sim.compute.ssm import MambaShape
        >>> m = DecoderShape(layers=1, hidden=16, heads=2, seq_len=8, vocab=32, ffn_hidden=16,
        ...                  pattern="M", mamba=MambaShape(2, 4, 4, 1, 4, 8))
        >>> nvfp4 = get_recipe("nvfp4")
        >>> low = LowPrecision(nvfp4, LayerRules(mxfp8=("out_proj",)))
        >>> # in_proj 8 x 16 at 2 - (0.5 + 1/16) B, out_proj 8 x 8 at 2 - (1 + 1/32) B
        >>> recipe_input_savings("mamba", m, 1, 2, low), 128 * 1.4375 + 64 * (2 - 33 / 32)
        (246.0, 246.0)
    """
    recipe, mx = low.recipe, low.rules.mxfp8
    orig = keeps_original(recipe.name)

    def savings(saved: float, keep16: tuple[str, ...]) -> float:
        return quantized_input_savings(kind, m, b, d, saved, tp, sp, cp, rows, etp, keep16, orig)

    out = savings(recipe.data_bytes + recipe.scale_bytes, tuple(low.rules.keep16) + tuple(mx))
    mxfp8 = get_recipe("mxfp8", TE) if mx else None
    if mxfp8 is not None:
        others = tuple(sorted(LINEARS - set(mx))) + tuple(low.rules.keep16)
        out += savings(mxfp8.data_bytes + mxfp8.scale_bytes, others)
    return out


def keeps_original(recipe_name: str) -> bool:
    """Whether Megatron-Core makes the linears whose input another module saves (the output
    projection, a shared expert's fc1) keep that 16-bit tensor instead of a quantized copy:
    every recipe but delayed scaling (module doc)."""
    return recipe_name != "fp8-delayed"

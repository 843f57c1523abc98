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

* attention: the fused norm's output into the QKV projection (``LayerNormLinear``), ``r x h``,
  and the output projection's input, ``t x q / tp`` (``q`` = heads x head dim); MLA: the
  up-projections' normed latents (``LayerNormLinear``), ``t x (q_lora + kv_lora)``, and the
  output projection's input ``t x heads/tp x d_v`` (the down projections share the normed
  input between two linears, each saving its own copy: counted as no change);
* dense MLP: the fused norm's output into fc1, ``r x h``, and fc2's input ``t x ffn / tp``;
* MoE: the routed experts' fc1 input (the permuted tokens, ``n x h`` for the ``n`` rows of the
  local experts) and fc2 input ``n x ffn_e / etp``; a shared expert's fc2 input ``t x ffn_s /
  tp``, less the quantized copy its fc1 saves of the norm output the router keeps in 16 bits
  (``t x h`` at the quantized size).

Not changed: norms' inputs, the attention core's tensors (FP8 attention is off by default),
activation-function inputs, the router, embedding, output layer, Mamba and MTP layers.
"""

from __future__ import annotations

from sim.compute.decoder import ATTN, tokens
from sim.compute.decoder_shape import DecoderShape, base_kind


def _attention_inputs(m: DecoderShape, kind: str, t: int, r: int, tp: int) -> tuple[float, float]:
    """(16-bit elements replaced, quantized elements added) of the attention half."""
    if m.mla is not None:
        mla = m.mla
        return float(t * (mla.q_lora + mla.kv_lora) + t * (m.heads // tp) * mla.d_v), 0.0
    blk = m.block_for(kind)
    return float(r * m.hidden + t * blk.heads * blk.hd // tp), 0.0


def _mlp_inputs(
    m: DecoderShape, base: str, t: int, r: int, tp: int, rows, etp
) -> tuple[float, float]:
    """(16-bit elements replaced, quantized elements added) of the MLP half."""
    if base == "block":
        return float(r * m.hidden + t * m.ffn_hidden // tp), 0.0
    if base != "moe_block" or m.moe is None:
        return 0.0, 0.0
    moe, n = m.moe, float(sum(rows))
    replaced = n * (moe.hidden + moe.expert_ffn / (etp or tp))
    added = 0.0
    if moe.shared_ffn:
        replaced += t * moe.shared_ffn / tp
        added += float(t * moe.hidden)
    return replaced, added


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
) -> float:
    """Bytes of one layer's stash on one rank, one micro-batch, that a recipe saving each
    linear input at ``saved_bytes`` per element removes against ``d``-byte inputs (module doc);
    0 for layers whose inputs it does not change. Same arguments as
    :func:`~sim.compute.decoder.layer_act_bytes`.

    Example:
        >>> from sim.compute.decoder_shape import DecoderShape
        >>> m = DecoderShape(layers=2, hidden=64, heads=4, seq_len=8, vocab=128, ffn_hidden=256)
        >>> quantized_input_savings("block", m, 1, 2, 1.0)  # (64 + 64 + 64 + 256) x 8 x 1 B
        3584.0
    """
    base = base_kind(kind)
    if base not in ("block", "moe_block") or saved_bytes >= d:
        return 0.0
    t, r = tokens(m, b, tp, sp, cp)
    a_rep, a_add = _attention_inputs(m, kind, t, r, tp) if base in ATTN else (0.0, 0.0)
    f_rep, f_add = _mlp_inputs(m, base, t, r, tp, rows, etp)
    return max(0.0, (a_rep + f_rep) * (d - saved_bytes) - (a_add + f_add) * saved_bytes)

"""Model FLOPs of one training iteration, as Megatron-LM counts them for its TFLOP/s and MFU.

:func:`model_flops` follows ``num_floating_point_operations`` of Megatron-LM
(``megatron/training/training.py``, ``transformer_flops``, NVIDIA/Megatron-LM@001b00c2),
per token of every sequence of the iteration:

* every GEMM three times (forward, data gradient, weight gradient) at 2 FLOPs per
  multiply-add: the factor ``6``;
* attention, per layer: the projections ``h (q + 2 kv) + q h`` (``q = heads x head_dim``,
  ``kv = kv_heads x head_dim``) plus the core ``q s / 2 x 2`` (``QK^T`` and ``(QK^T) V``;
  half of the ``s x s`` scores under a causal mask: Megatron's ``/ 2``; a bidirectional
  encoder (BERT) computes all of them: ``q s x 2``); MLA (DeepSeek-V2/V3) with its latent
  projections as Megatron's ``multi_latent_attention`` branch;
* MLP, per layer: ``h f x 3`` for a gated (SwiGLU) MLP, ``h f x 2`` otherwise; a MoE layer
  ``k`` routed experts of width ``f_e`` plus the shared experts' width;
* the logits: ``h V``, once more per multi-token-prediction depth, whose layers count as
  blocks like the last one, plus their ``3h + 2h^2`` norms and projection;
* a hybrid model (Megatron-Core's ``hybrid_override_pattern``) per layer kind as Megatron's
  ``hybrid_flops``: attention and MLP layers as above, a Mamba-2 layer
  ``2h (2 d_in + 2 G N + H) + 7 d_in N + 2 d_in h`` (in projection, scan, out projection;
  ``d_in = H P``), times 3 for the backward.

So for a dense GPT (``f = 4h``, no GQA) it is ``72 B s l h^2 (1 + s / 12h + V / 12 l h)``:
Narayanan et al. (SC'21, arXiv:2104.04473) eq. 3 without the recompute pass (``96 -> 72``)
and with causal attention halved. These are *model* FLOPs: recomputation is not counted, so
``model FLOPs / (time x GPUs x peak)`` is the model FLOPs utilisation (MFU) of PaLM
(Chowdhery et al., arXiv:2204.02311, appendix B).

Norms, rotary embeddings, softmax and the router are not counted (Megatron does not either).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.compute.decoder_shape import DecoderShape
from sim.compute.t5 import T5Shape, model_flops_per_sample

FORMULA = "Megatron-LM's num_floating_point_operations (model FLOPs, no recompute)"
"""How :func:`model_flops` counts, for the outputs that show its TFLOP/s and MFU."""

KINDS = ("gpt", "bert", "decoder", "t5")
"""Model shapes :func:`model_flops` counts (``provenance.inputs`` / ``model_shape`` kinds)."""


def model_flops(shape: Mapping[str, Any], samples: int) -> float | None:
    """FLOPs of one iteration of ``samples`` sequences (module doc); None for a shape it does
    not count (another ``kind``, missing fields).

    Args:
        shape: a trace's model shape (``kind`` ``gpt``/``bert``: ``layers, hidden, heads,
            seq_len, vocab`` and optionally ``ffn_mult``; ``decoder``: a
            :meth:`sim.compute.decoder.DecoderShape.to_dict`; ``t5``: a
            :meth:`sim.compute.t5.T5Shape.to_dict`, counted per sample by
            :func:`sim.compute.t5.model_flops_per_sample`).
        samples: sequences per iteration (global batch).

    Example (GPT-3 175B, 1,536 sequences of 2,048 tokens: 72 B s l h^2 (1 + s/12h + V/12lh)):
        >>> f = model_flops({"kind": "gpt", "layers": 96, "hidden": 12288, "heads": 96,
        ...                  "seq_len": 2048, "vocab": 51200}, 1536)
        >>> round(f / (72 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / (12 * 12288)
        ...     + 51200 / (12 * 96 * 12288))), 12)
        1.0
    """
    if shape.get("kind") == "t5":  # two sequence lengths: per sample (sim.compute.t5)
        return model_flops_per_sample(T5Shape.from_dict(dict(shape))) * samples
    try:
        per_token = _per_token(shape)
    except (KeyError, TypeError, ValueError):
        return None
    if per_token is None:
        return None
    return float(per_token) * samples * int(shape["seq_len"])


def _per_token(shape: Mapping[str, Any]) -> float | None:
    kind = shape.get("kind")
    if kind in ("gpt", "bert"):
        h, n, s = int(shape["hidden"]), int(shape["layers"]), int(shape["seq_len"])
        f = int(shape.get("ffn_mult") or 4) * h
        core = h * s * (1 if kind == "gpt" else 2)  # q s / 2 x 2 causal; q s x 2 bidirectional
        attn = h * 3 * h + core + h * h
        return 6.0 * (n * (attn + 2 * h * f) + h * int(shape["vocab"]))
    if kind == "decoder":
        return _decoder_per_token(DecoderShape.from_dict(dict(shape)))
    return None


def _decoder_per_token(m: DecoderShape) -> float:
    h = m.hidden
    if m.pattern:
        return _hybrid_per_token(m)
    moe_layers = sum(m.is_moe(i) for i in range(m.layers))
    dense_layers = m.layers - moe_layers
    if m.mtp_layers:  # MTP depths are blocks like the last one (Megatron's last_layer_is_moe)
        last_moe = m.is_moe(m.layers - 1)
        moe_layers += m.mtp_layers if last_moe else 0
        dense_layers += 0 if last_moe else m.mtp_layers
    layers = m.layers + m.mtp_layers
    mlp = _dense_mlp(m) * dense_layers + _moe_mlp(m) * moe_layers
    mtp = m.mtp_layers * (3 * h + 2 * h * h)
    return 6.0 * (h * mlp + layers * _attention(m) + mtp + h * m.vocab * (m.mtp_layers + 1))


def _attention(m: DecoderShape) -> float:
    """Per token and layer, before the factor 6: projections and causal core (module doc)."""
    h, s = m.hidden, m.seq_len
    if m.mla is not None:
        a = m.mla
        qk = a.d_nope + a.d_rope
        q_term = h * m.heads * qk if not a.q_lora else a.q_lora * (h + m.heads * qk + 1)
        return (
            q_term
            + a.kv_lora * (h + m.heads * (a.d_nope + a.d_v) + 1)
            + h * a.d_rope
            + m.heads * a.d_v * h
            + s * m.heads * qk / 2
            + s * m.heads * a.d_v / 2
        )
    head_dim = m.head_dim or h // m.heads
    q, kv = head_dim * m.heads, head_dim * (m.kv_heads or m.heads)
    return h * (q + 2 * kv) + q * s / 2 * 2 + q * h


def _dense_mlp(m: DecoderShape) -> float:
    """Per token and dense layer, over ``h``: ``f x 3`` gated, ``f x 2`` not."""
    return m.ffn_hidden * (3 if m.gated_mlp else 2)


def _moe_mlp(m: DecoderShape) -> float:
    """Per token and MoE layer, over ``h``: the routed-to experts and the shared ones."""
    if m.moe is None:
        return 0.0
    f = 3 if m.moe.gated else 2
    return (m.moe.expert_ffn * m.moe.top_k + m.moe.shared_ffn) * f


def _hybrid_per_token(m: DecoderShape) -> float:
    """Megatron-Core's ``hybrid_flops`` per token (module doc)."""
    h = m.hidden
    count = {c: m.pattern.count(c) for c in "M*-E"}
    fwd = 2 * (count["*"] * _attention(m) + h * (count["-"] * _dense_mlp(m)
                                                  + count["E"] * _moe_mlp(m)))  # fmt: skip
    if count["M"]:
        assert m.mamba is not None
        mb = m.mamba
        d_in = mb.heads * mb.head_dim
        fwd += count["M"] * (
            2 * h * (2 * d_in + 2 * mb.groups * mb.state + mb.heads)
            + 7 * d_in * mb.state
            + 2 * d_in * h
        )
    fwd += 2 * h * m.vocab * (m.mtp_layers + 1)
    return 3.0 * fwd

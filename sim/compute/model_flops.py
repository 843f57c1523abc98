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
* the logits: ``h V``.

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

from sim.compute.decoder import DecoderShape

FORMULA = "Megatron-LM's num_floating_point_operations (model FLOPs, no recompute)"
"""How :func:`model_flops` counts, for the outputs that show its TFLOP/s and MFU."""

KINDS = ("gpt", "bert", "decoder")
"""Model shapes :func:`model_flops` counts (``provenance.inputs`` / ``model_shape`` kinds)."""


def model_flops(shape: Mapping[str, Any], samples: int) -> float | None:
    """FLOPs of one iteration of ``samples`` sequences (module doc); None for a shape it does
    not count (another ``kind``, missing fields).

    Args:
        shape: a trace's model shape (``kind`` ``gpt``/``bert``: ``layers, hidden, heads,
            seq_len, vocab`` and optionally ``ffn_mult``; ``decoder``: a
            :meth:`sim.compute.decoder.DecoderShape.to_dict`).
        samples: sequences per iteration (global batch).

    Example (GPT-3 175B, 1,536 sequences of 2,048 tokens: 72 B s l h^2 (1 + s/12h + V/12lh)):
        >>> f = model_flops({"kind": "gpt", "layers": 96, "hidden": 12288, "heads": 96,
        ...                  "seq_len": 2048, "vocab": 51200}, 1536)
        >>> round(f / (72 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / (12 * 12288)
        ...     + 51200 / (12 * 96 * 12288))), 12)
        1.0
    """
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
    h, s = m.hidden, m.seq_len
    head_dim = getattr(m, "head_dim", None) or h // m.heads
    if m.mla is not None:
        a = m.mla
        qk = a.d_nope + a.d_rope
        q_term = h * m.heads * qk if not a.q_lora else a.q_lora * (h + m.heads * qk + 1)
        attn = (
            q_term
            + a.kv_lora * (h + m.heads * (a.d_nope + a.d_v) + 1)
            + h * a.d_rope
            + m.heads * a.d_v * h
            + s * m.heads * qk / 2
            + s * m.heads * a.d_v / 2
        )
    else:
        q, kv = head_dim * m.heads, head_dim * (m.kv_heads or m.heads)
        attn = h * (q + 2 * kv) + q * s / 2 * 2 + q * h
    moe_layers = sum(m.is_moe(i) for i in range(m.layers))
    mlp = 3 * m.ffn_hidden * (m.layers - moe_layers)
    if m.moe is not None:
        f = 3 if m.moe.gated else 2
        mlp += (m.moe.expert_ffn * m.moe.top_k + m.moe.shared_ffn) * f * moe_layers
    return 6.0 * (h * mlp + m.layers * attn + h * m.vocab)

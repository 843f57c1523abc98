"""Host ops and Python calls of the T5 layers, from the GPT block's counts.

pipesim counts the ops of Megatron-DeepSpeed's ``ParallelTransformerLayer``
(:mod:`sim.compute.megatron_ops`); Megatron-Core's T5 layers (NVIDIA/Megatron-LM@d98e8a64dd
``megatron/core/models/T5/t5_spec.py``) are not counted op by op. An assumption, stated in
every T5 trace's provenance: an encoder layer issues what a GPT block issues; a decoder layer
adds a cross-attention that issues what the block's attention half issues (its norm, the
column-parallel input projection, the core, the output projection and its bias-dropout-add:
the rows of :data:`~sim.compute.megatron_ops.BLOCK_FWD` up to the first bias-dropout-add)
plus one more ``F.linear`` (``linear_kv``: ``copy_to`` and the linear, 5 ops) and, in the
backward, the matching rows of :data:`~sim.compute.megatron_ops.BLOCK_BWD` plus one more
linear's backward (8 ops) and the accumulation into its 8 parameter tensors (norm, ``linear_q``,
``linear_kv``, ``linear_proj``: weights and biases).
"""

from __future__ import annotations

from sim.compute.megatron_ops import (
    BLOCK_BWD,
    BLOCK_FWD,
    block_calls,
    block_ops,
    embedding_ops,
    head_ops,
)

ATTN_FWD_ROWS = 11
"""Rows of :data:`BLOCK_FWD` of the attention half (input norm to the first bias-dropout-add)."""
ATTN_BWD_ROWS = (
    "query_key_value", "view, split", "baddbmm", "fused softmax", "dropout backward", "bmm",
    "dense: mm",
)  # fmt: skip
"""Leading words of the :data:`BLOCK_BWD` rows the attention half issues (besides one norm
backward and one bias-dropout-add backward, taken as half of their two-layer rows)."""
LINEAR_FWD, LINEAR_BWD, CROSS_PARAM_TENSORS = 5, 8, 8


def cross_attention_ops() -> tuple[int, int]:
    """``(forward, backward)`` ops of a decoder layer's cross-attention (module doc)."""
    fwd = sum(n for _, n in BLOCK_FWD[:ATTN_FWD_ROWS]) + LINEAR_FWD
    rows = [n for what, n in BLOCK_BWD if what.startswith(ATTN_BWD_ROWS)]
    halves = [n // 2 for what, n in BLOCK_BWD if what.startswith(("two fused", "two bias"))]
    return fwd, sum(rows) + sum(halves) + LINEAR_BWD + CROSS_PARAM_TENSORS


def cross_attention_calls() -> tuple[int, int]:
    """``(module calls, Function applies)`` of the cross-attention: the norm, the attention,
    its two input projections, softmax, dropout and output projection; the norm's Function,
    two ``copy_to``, one ``reduce_from`` and the softmax's."""
    return 7, 5


def t5_layer_ops(kind: str) -> tuple[float, float, float, float]:
    """``(fwd_ops, bwd_ops, fwd_modules, fwd_functions)`` of a T5 layer kind
    (:data:`sim.compute.t5.KINDS`; module doc)."""
    if kind == "embedding":  # called on the encoder and on the decoder tokens
        f, b = embedding_ops("gpt")
        return 2.0 * f, 2.0 * b, 0.0, 0.0
    if kind == "head":
        f, b = head_ops("gpt")
        return float(f), float(b), 0.0, 0.0
    f, b = block_ops()
    mods, funcs = block_calls()
    if kind == "dec_block":
        xf, xb = cross_attention_ops()
        xm, xfn = cross_attention_calls()
        f, b, mods, funcs = f + xf, b + xb, mods + xm, funcs + xfn
    return float(f), float(b), float(mods), float(funcs)


T5_PARAM_TENSORS = {
    "embedding": (0, 2), "enc_block": (8, 4), "enc_last": (10, 4), "dec_block": (13, 7),
    "head": (3, 0),
}  # fmt: skip
"""``(vectors, matrices)``: parameter tensors per T5 layer kind, each a separate ``p.grad``
(Megatron-Core, NVIDIA/Megatron-LM@d98e8a64dd ``t5_spec.py``, ``t5_model.py``): the embedding's
word and position tables; an encoder layer as a GPT block (two norms' weight and bias, the
weight and bias of ``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``; Transformer
Engine's fused ``LayerNormColumnParallelLinear`` holds the same four tensors as the norm and the
linear apart); the last one with the encoder's final norm; a decoder layer adds the
``pre_cross_attn_layernorm`` and the weight and bias of ``linear_q``, ``linear_kv`` and
``linear_proj``; the head the decoder's final norm and the output layer's bias (its weight is
the word table: one tensor where embedding and head share a stage, which is always for T5)."""


def t5_tensors(kind: str) -> tuple[int, int]:
    """``(vectors, matrices)`` of a T5 layer kind (:data:`T5_PARAM_TENSORS`).

    Example:
        >>> t5_tensors("dec_block"), t5_tensors("head")
        ((13, 7), (3, 0))
    """
    return T5_PARAM_TENSORS[kind]

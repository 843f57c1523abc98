"""The model of a measured run as pipesim generates it, for :func:`sim.runs.express.express`:
which trace generator builds it and with what shape, what keeps it from being built, and the
trace's name.

Gated, MoE, hybrid and the GeLU GPTs the GPT generator cannot build go to the decoder generator
(:mod:`sim.trace.decoder`, through :mod:`sim.runs.decoder_express`); Megatron-Core's T5 to
:mod:`sim.trace.t5` (:mod:`sim.runs.t5_express`); other GPT-2/3-like and BERT stacks to
:func:`sim.trace.generator.transformer_trace`. The framework's fused dropout-add
(:data:`FUSED_DROPOUT_ADD`) and the loss's fusion are passed to the latter.
"""

from __future__ import annotations

from typing import Any

from sim.compute.decoder import DecoderShape
from sim.compute.t5 import T5Shape
from sim.runs.approximations import APPROXIMATED_ACTIVATIONS
from sim.runs.decoder_express import decoder_shape, ep_domains
from sim.runs.record import MeasuredRun, ModelShape, feature
from sim.runs.t5_express import t5_reasons, t5_shape

FUSED_DROPOUT_ADD = frozenset({"megatron-deepspeed"})
"""Frameworks whose GPT layers run each hidden dropout and its residual add as one fused kernel
(the generator's ``dropout_add="fused"``): Megatron-DeepSpeed's default ``bias_dropout_fusion``
with nvFuser (:func:`sim.compute.transformer._dropout_residual` cites the code). Megatron-LM's
legacy layers have the same default; Megatron-Core's (Transformer Engine) is another code path:
neither is switched here (not checked against their sources in this change)."""


def model_reasons(run: MeasuredRun) -> list[str]:
    """Why no trace generator builds ``run``'s model (an incomplete shape, a hybrid without
    its layer pattern, an MLP or attention the generator it needs lacks), or []; a T5's are
    :func:`sim.runs.t5_express.t5_reasons`."""
    s = run.shape
    if s.arch == "t5":
        return t5_reasons(run)
    if s.arch == "hybrid" and not feature(s, "hybrid_pattern"):
        return [
            "hybrid Mamba-2 / attention layers without a layer pattern "
            "(--hybrid-layer-pattern, or a model-shape entry: sim.runs.model_shapes)"
        ]
    sizes = {"layers": s.layers, "hidden": s.hidden, "heads": s.heads, "vocabulary": s.vocab,
             "sequence length": run.seq_len}  # fmt: skip
    if not all(sizes.values()):
        lacking = ", ".join(k for k, v in sizes.items() if not v)
        return [f"model shape incomplete: no {lacking} (needs layers, hidden, heads, vocabulary, "
                "sequence length)"]  # fmt: skip
    out = []
    if s.arch == "bert" and (s.head_dim or feature(s, "qk_norm") or feature(s, "mtp")):
        out.append("head_dim, QK-norm or MTP on a BERT (the BERT generator has none of them)")
    if feature(s, "activation") and not (uses_decoder(run) and feature(s, "activation") in
                                         APPROXIMATED_ACTIVATIONS):  # fmt: skip
        out.append(f"{feature(s, 'activation')} MLP: the generators have GeLU and SwiGLU only")
    if s.arch == "bert":
        out += _gpt_model(s)
    return out


def uses_decoder(run: MeasuredRun) -> bool:
    """Whether ``run``'s model is generated as a :class:`DecoderShape` (a gated or MoE decoder,
    or a GeLU GPT the GPT generator cannot build: grouped-query or latent attention, untied
    embeddings, context parallelism, an explicit head_dim, QK-norm, MTP; its MLP then ungated,
    ``gated_mlp`` False, with GeLU's FLOPs as the dense MLP's up and down projections)."""
    s = run.shape
    if s.arch in ("decoder", "hybrid") or s.is_moe:
        return True
    special = s.head_dim or feature(s, "qk_norm") or feature(s, "mtp")
    return s.arch == "gpt" and bool(_gpt_model(s) or run.layout.cp > 1 or special)


def _gpt_model(s: ModelShape) -> list[str]:
    out = []
    if s.kv_heads and s.kv_heads != s.heads:
        out.append("grouped-query attention with a GeLU MLP (the GPT generator has MHA only)")
    if s.mla:
        out.append("MLA with a GeLU MLP (the decoder generator's dense MLP is gated)")
    if s.is_moe and (s.moe_dense_layers or s.moe_every > 1):
        out.append("dense GeLU layers between MoE layers (the decoder generator's dense MLP is "
                   "gated)")  # fmt: skip
    if not s.is_moe and not s.tied_embeddings:
        out.append("untied embeddings on a GeLU GPT (the GPT generator ties them)")
    if not s.is_moe and s.hidden and s.ffn_hidden and s.ffn_hidden % s.hidden:
        out.append(f"FFN width {s.ffn_hidden} not a multiple of hidden {s.hidden} (GPT generator)")
    return out


def generator_shape(run: MeasuredRun, attention: str, hardware: str) -> tuple[str, Any]:
    """``(generator, shape)`` of ``run``'s model (:attr:`sim.runs.express.Expressed.generator`
    and ``shape``) with ``attention`` on the ``hardware`` preset (its expert-parallel domains).

    Raises:
        ValueError: the shape the generator refuses (the reason).
    """
    s = run.shape
    seq = run.seq_len or 0
    if s.arch == "t5":
        return "t5", t5_shape(run)
    if uses_decoder(run):
        return "decoder", decoder_shape(s, seq, attention, ep_domains(run, hardware))
    mult = (s.ffn_hidden or 4 * (s.hidden or 0)) // (s.hidden or 1)
    shape = {"layers": s.layers, "hidden": s.hidden, "heads": s.heads, "seq_len": seq,
             "vocab": s.vocab, "ffn_mult": mult, "attention": attention}  # fmt: skip
    if run.framework in FUSED_DROPOUT_ADD:
        shape["dropout_add"] = "fused"
    if feature(s, "cross_entropy"):  # the loss's kernels, host ops and memory
        shape["cross_entropy_fusion"] = feature(s, "cross_entropy")
    return s.arch, shape


def model_name(generator: str, shape: Any) -> str:
    """A trace name for a generated shape (letters, digits, ``-``)."""
    if isinstance(shape, DecoderShape):
        moe = f"-e{shape.moe.experts}k{shape.moe.top_k}" if shape.moe else ""
        return f"dec-L{shape.layers}-h{shape.hidden}-a{shape.heads}-s{shape.seq_len}{moe}"
    if isinstance(shape, T5Shape):
        return (f"t5-E{shape.encoder_layers}D{shape.decoder_layers}-h{shape.hidden}-"
                f"a{shape.heads}-s{shape.encoder_seq}-{shape.decoder_seq}")  # fmt: skip
    return (
        f"{generator}-L{shape['layers']}-h{shape['hidden']}-a{shape['heads']}-s{shape['seq_len']}"
    )


__all__ = [
    "FUSED_DROPOUT_ADD",
    "generator_shape",
    "model_name",
    "model_reasons",
    "uses_decoder",
]

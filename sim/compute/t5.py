"""Kernels, parameters and activations of Megatron-Core's T5 (encoder-decoder), per layer.

The model as ``examples/t5/pretrain_t5.py`` builds it (NVIDIA/Megatron-LM@d98e8a64dd,
``megatron/core/models/T5/t5_model.py`` and ``t5_spec.py``):

* one ``LanguageModelEmbedding`` (vocabulary-parallel word table ``V x h`` and a learned
  absolute position table ``P x h``, ``P = --max-position-embeddings``; the default
  ``position_embedding_type='learned_absolute'``, so no relative position bias), called twice:
  on the ``s_e`` encoder tokens and on the ``s_d`` decoder tokens;
* ``L_e`` encoder layers (``AttnMaskType.padding``/``arbitrary``: bidirectional) of
  self-attention and a GeLU MLP, pre-norm, and the encoder block's final LayerNorm;
* ``L_d`` decoder layers: causal self-attention, a ``pre_cross_attn_layernorm`` and a
  ``CrossAttention`` (``linear_q`` over the decoder tokens, ``linear_kv`` over the encoder
  output, core attention of ``s_d`` queries against ``s_e`` keys, ``linear_proj``), then the
  MLP; the decoder block's final LayerNorm;
* ``T5LMHead``: a column-parallel output layer whose weight is the word embedding
  (``share_embeddings_and_output_weights = not --untie-embeddings-and-output-weights``) and
  which then has a bias of ``V`` (``bias=share_embeddings_and_output_weights``), and the
  vocabulary-parallel cross-entropy over the ``s_d`` decoder tokens.

Every linear layer has a bias (Megatron's default ``add_bias_linear``). Notation: ``b``
micro-batch, ``h`` hidden, ``a`` heads, ``q = a*hd`` the attention width (``hd`` =
``--kv-channels``), ``F`` FFN width, ``d`` bytes per element, ``t`` tensor-parallel size,
``sp`` sequence parallelism.

**Kernels.** The encoder layer is :func:`sim.compute.transformer.block_fwd` (bidirectional,
``s_e`` tokens); the decoder layer is the self-attention half (causal, ``s_d``), the
cross-attention (:func:`cross_fwd`) and the MLP half. Under tensor parallelism the GEMMs are
split as Megatron splits them (Shoeybi et al., arXiv:1909.08053, §3: ``linear_q`` and
``linear_kv`` column-parallel, ``linear_proj`` row-parallel).

**Forward FLOPs** (every GEMM ``2mnk``; ``math`` attention computes every score, the causal
mask included): encoder layer ``2 b s_e (4hq + 2hF) + 4 b s_e^2 q``; decoder layer
``2 b s_d (4hq + 2hF) + 4 b s_d^2 q`` (self) ``+ 2 b s_d (2hq) + 2 b s_e (2hq) + 4 b s_d s_e q``
(cross); head ``2 b s_d h V``.

**Activations** (Korthikanti et al., arXiv:2205.05198, §4.1 and Table 2, counted per tensor
kept for the backward as that paper does, general ``d``): a layer of self-attention and MLP
keeps ``d*(8 sbh + 2 sbF) + 2 sbh + (2d + 1) a s^2 b`` bytes (``sbh(34 + 5as/h)`` at 16 bit
with ``F = 4h``); of that, ``(4d + 2) sbh`` (the norms' and the column-parallel GEMMs' inputs,
the two dropout masks) is kept whole on each tensor rank without sequence parallelism and the
rest is split ``t`` ways (everything with ``sp``). The cross-attention keeps its norm's and
``linear_q``'s inputs (``2d s_d b h``) and its dropout mask (``s_d b h``) whole, and splits Q
(``d s_d b h``), K and V (``2d s_e b h``), the score stash (``(2d + 1) a s_d s_e b``, or with
the fused kernel its fp32 log-sum-exp ``4 b a s_d``) and ``linear_proj``'s input
(``d s_d b h``). ``linear_kv``'s input, the encoder output, is one tensor every decoder layer
refers to: it is counted once, with the encoder's final norm (its input and output,
``2d s_e b h``, split only with ``sp``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.kernels import Kernel, gemm, mem
from sim.compute.layers import embedding_kernels, head_kernels
from sim.compute.transformer import (
    BlockShape,
    attention_half_bwd,
    attention_half_fwd,
    block_bwd,
    block_fwd,
    mlp_half_bwd,
    mlp_half_fwd,
)

KINDS = ("embedding", "enc_block", "enc_last", "dec_block", "head")
"""Layer kinds of a T5 trace: the shared embedding, an encoder layer, the last encoder layer
(with the encoder's final LayerNorm), a decoder layer, the head (decoder final norm, output
layer, loss)."""


@dataclass(frozen=True)
class T5Shape:
    """A Megatron-Core T5 (module doc).

    Attributes:
        encoder_layers, decoder_layers: ``L_e`` (``--encoder-num-layers``), ``L_d``
            (``--decoder-num-layers``).
        hidden, heads, ffn_hidden: ``h``, ``a``, ``F``.
        encoder_seq, decoder_seq: ``s_e`` (``--encoder-seq-length``), ``s_d``
            (``--decoder-seq-length``).
        vocab: ``V`` as allocated (padded).
        max_positions: rows of the position table (``--max-position-embeddings``; None:
            ``encoder_seq``).
        head_dim: ``hd`` (``--kv-channels``; None: ``h / a``).
        attention: ``math`` (unfused core) or ``flash`` (fused).
        dropout: attention and hidden dropout on (Megatron's defaults 0.1).
    """

    encoder_layers: int
    decoder_layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    encoder_seq: int
    decoder_seq: int
    vocab: int
    max_positions: int | None = None
    head_dim: int | None = None
    attention: str = "math"
    dropout: bool = True

    def __post_init__(self) -> None:
        for name in ("encoder_layers", "decoder_layers", "vocab"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.encoder  # noqa: B018 - BlockShape validates the rest
        self.decoder  # noqa: B018

    def _block(self, seq: int, causal: bool) -> BlockShape:
        return BlockShape(
            self.hidden, self.heads, seq, self.ffn_hidden, causal=causal,
            attention=self.attention, head_dim=self.head_dim, dropout=self.dropout,
        )  # fmt: skip

    @property
    def encoder(self) -> BlockShape:
        """An encoder layer's self-attention and MLP (bidirectional, ``s_e`` tokens)."""
        return self._block(self.encoder_seq, causal=False)

    @property
    def decoder(self) -> BlockShape:
        """A decoder layer's self-attention and MLP (causal, ``s_d`` tokens)."""
        return self._block(self.decoder_seq, causal=True)

    @property
    def q(self) -> int:
        """Attention width ``a*hd``."""
        return self.heads * self.encoder.hd

    @property
    def positions(self) -> int:
        """Rows of the learned position table."""
        return self.max_positions or self.encoder_seq

    def to_dict(self) -> dict[str, Any]:
        """The shape as a plain mapping (``kind: t5``), as traces record it."""
        return {"kind": "t5", **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> T5Shape:
        """The shape of a :meth:`to_dict` mapping (unknown keys ignored)."""
        keys = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in keys})


def layer_names(m: T5Shape) -> list[tuple[str, str]]:
    """``(name, kind)`` of every layer in execution order (:data:`KINDS`)."""
    enc = [(f"enc_block.{i}", "enc_block") for i in range(m.encoder_layers)]
    enc[-1] = (enc[-1][0], "enc_last")
    dec = [(f"dec_block.{i}", "dec_block") for i in range(m.decoder_layers)]
    return [("embedding", "embedding"), *enc, *dec, ("head", "head")]


def check_tp(m: T5Shape, t: int, sp: bool) -> str:
    """Why ``m`` cannot be split over ``t`` tensor ranks (with ``sp``), or ``""``."""
    if t < 1 or m.heads % t or m.ffn_hidden % t:
        return f"tensor_parallel {t} does not divide the heads {m.heads} and FFN {m.ffn_hidden}"
    if sp and (m.encoder_seq % t or m.decoder_seq % t):
        return (
            f"sequence parallelism needs both sequence lengths ({m.encoder_seq}, "
            f"{m.decoder_seq}) divisible by {t}"
        )
    return ""


def _rows(tokens: int, t: int, sp: bool) -> int:
    return tokens // t if sp else tokens


def _flash_bytes(kernels: list[Kernel], nbytes: float) -> list[Kernel]:
    """``kernels`` with a fused core's HBM bytes set to ``nbytes``: the cross-attention's
    ``s_d`` queries and ``s_e`` keys (forward reads Q, K, V and writes O and the log-sum-exp;
    backward reads Q, K, V, O, dO and writes dQ, dK, dV), where
    :func:`~sim.compute.attention.attention_fwd` counts ``s`` of each."""
    return [replace(k, bytes=nbytes) if k.kind == "attn" else k for k in kernels]


def cross_fwd(m: T5Shape, b: int, d: int, t: int = 1, sp: bool = False) -> list[Kernel]:
    """Forward kernels of a decoder layer's cross-attention on one of ``t`` tensor ranks:
    norm, ``linear_q`` (``s_d`` tokens), ``linear_kv`` (``s_e`` tokens), the core (``s_d``
    queries, ``s_e`` keys, no mask), ``linear_proj``, dropout and residual."""
    h, q, a = m.hidden, m.q, m.heads
    td, te = b * m.decoder_seq, b * m.encoder_seq
    r = _rows(td, t, sp)
    out = [
        mem("xattn_norm", 2 * r * h * d),
        gemm("xattn_q", td, q // t, h, d),
        gemm("xattn_kv", te, 2 * q // t, h, d),
    ]
    core = attention_fwd(
        m.attention, b, m.decoder_seq, q // t, a // t, d, causal=False, dropout=m.dropout,
        kv=m.encoder_seq,
    )  # fmt: skip
    out += _flash_bytes(core, (2 * td + 2 * te) * (q // t) * d + 4.0 * td * (a // t))
    out.append(gemm("xattn_proj", td, h, q // t, d))
    out += [mem("xattn_dropout", (2 * d + 1) * r * h)] if m.dropout else []
    return out + [mem("xattn_residual", 3 * r * h * d)]


def cross_bwd(
    m: T5Shape, b: int, d: int, t: int = 1, sp: bool = False
) -> tuple[list[Kernel], list[Kernel]]:
    """Backward kernels of the cross-attention: ``(input gradient, weight gradient)``; the
    gradient of the encoder output is accumulated over the decoder layers (``3 s_e b h d``)."""
    h, q, a = m.hidden, m.q, m.heads
    td, te = b * m.decoder_seq, b * m.encoder_seq
    r = _rows(td, t, sp)
    out = [mem("xattn_dropout_bwd", (2 * d + 1) * r * h)] if m.dropout else []
    out.append(gemm("d_xattn_proj_in", td, q // t, h, d))
    core = attention_bwd(
        m.attention, b, m.decoder_seq, q // t, a // t, d, causal=False, dropout=m.dropout,
        kv=m.encoder_seq,
    )  # fmt: skip
    out += _flash_bytes(core, (4 * td + 4 * te) * (q // t) * d + 4.0 * td * (a // t))
    out += [
        gemm("d_xattn_q_in", td, h, q // t, d),
        gemm("d_xattn_kv_in", te, h, 2 * q // t, d),
        mem("encoder_output_grad_add", 3 * _rows(te, t, sp) * h * d),
        mem("xattn_norm_bwd", 3 * r * h * d),
        mem("xattn_residual_grad_add", 3 * r * h * d),
    ]
    dw = [
        gemm("d_xattn_q_w", h, q // t, td, d),
        gemm("d_xattn_kv_w", h, 2 * q // t, te, d),
        gemm("d_xattn_proj_w", q // t, h, td, d),
    ]
    return out, dw


Phases = tuple[list[Kernel], list[Kernel], list[Kernel]]


def _embedding(m: T5Shape, b: int, d: int, t: int) -> Phases:
    vt = -(-m.vocab // t)
    fwd, bwd = [], []
    for s in (m.encoder_seq, m.decoder_seq):  # one embedding, called on each input
        f, w = embedding_kernels("gpt", b, s, m.hidden, vt, d)
        fwd += f
        bwd += w
    return fwd, [], bwd


def _encoder(m: T5Shape, b: int, d: int, t: int, sp: bool, last: bool) -> Phases:
    fwd = block_fwd(m.encoder, b, d, t, sp)
    bwd_in, bwd_w = block_bwd(m.encoder, b, d, t, sp)
    if last:  # the encoder block's final LayerNorm
        r = _rows(b * m.encoder_seq, t, sp)
        fwd = fwd + [mem("enc_final_norm", 2 * r * m.hidden * d)]
        bwd_in = [mem("enc_final_norm_bwd", 3 * r * m.hidden * d)] + bwd_in
    return fwd, bwd_in, bwd_w


def _decoder(m: T5Shape, b: int, d: int, t: int, sp: bool) -> Phases:
    blk = m.decoder
    fwd = attention_half_fwd(blk, b, d, t, sp) + cross_fwd(m, b, d, t, sp)
    fwd += mlp_half_fwd(blk, b, d, t, sp)
    mlp_in, mlp_w = mlp_half_bwd(blk, b, d, t, sp)
    x_in, x_w = cross_bwd(m, b, d, t, sp)
    att_in, att_w = attention_half_bwd(blk, b, d, t, sp)
    return fwd, mlp_in + x_in + att_in, att_w + x_w + mlp_w


def layer_kernels(kind: str, m: T5Shape, b: int, d: int, t: int = 1, sp: bool = False) -> Phases:
    """``(forward, input-gradient, weight-gradient)`` kernels of a layer of ``kind``
    (:data:`KINDS`) on one of ``t`` tensor ranks (module doc).

    Raises:
        ValueError: unknown kind, or :func:`check_tp` refuses ``t``.
    """
    why = check_tp(m, t, sp)
    if why:
        raise ValueError(why)
    if kind == "embedding":
        return _embedding(m, b, d, t)
    if kind in ("enc_block", "enc_last"):
        return _encoder(m, b, d, t, sp, kind == "enc_last")
    if kind == "dec_block":
        return _decoder(m, b, d, t, sp)
    if kind == "head":  # decoder final norm, output layer over V/t, cross-entropy
        fwd, bwd_in, bwd_w = head_kernels("gpt", b, m.decoder_seq, m.hidden, -(-m.vocab // t), d)
        return fwd, bwd_in, bwd_w
    raise ValueError(f"unknown T5 layer kind {kind!r}; expected one of {', '.join(KINDS)}")


def _block_params(blk: BlockShape, t: int) -> int:
    h, q, f = blk.hidden, blk.heads * blk.hd, blk.ffn_hidden
    split = 3 * h * q + 3 * q + q * h + h * f + f + f * h  # qkv w+b, proj w, fc1 w+b, fc2 w
    return split // t + 2 * h + 4 * h  # proj and fc2 biases, two LayerNorms


def layer_params(kind: str, m: T5Shape, t: int = 1) -> int:
    """Parameters of a layer on one of ``t`` tensor ranks (module doc): column-parallel
    weights and biases and row-parallel weights split, row-parallel biases and LayerNorms
    whole; the embedding's word table split by vocabulary, its position table whole; the head
    the output layer's bias ``V/t``, the decoder's final norm ``2h`` and, as the GPT generator
    counts it, a copy of the word table ``V/t x h`` (:mod:`sim.trace.generator`: the framework
    drops it where the embedding and the head share a stage).

    Raises:
        ValueError: an unknown layer ``kind``.
    """
    h, q, vt = m.hidden, m.q, -(-m.vocab // t)
    if kind == "embedding":
        return vt * h + m.positions * h
    if kind == "enc_block":
        return _block_params(m.encoder, t)
    if kind == "enc_last":
        return _block_params(m.encoder, t) + 2 * h
    if kind == "dec_block":  # + pre-cross norm, linear_q, linear_kv (w+b), linear_proj
        return _block_params(m.decoder, t) + 2 * h + (3 * h * q + 3 * q + q * h) // t + h
    if kind == "head":
        return vt * h + vt + 2 * h
    raise ValueError(f"unknown T5 layer kind {kind!r}")


def unique_params(m: T5Shape) -> int:
    """Parameters of the whole model, the word table once."""
    per = {k: layer_params(k, m) for k in KINDS}
    return (
        per["embedding"] + (m.encoder_layers - 1) * per["enc_block"] + per["enc_last"]
        + m.decoder_layers * per["dec_block"] + per["head"] - m.vocab * m.hidden
    )  # fmt: skip


def _self_act(blk: BlockShape, b: int, d: int, t: int, sp: bool) -> float:
    s, h, a, f = blk.seq_len, blk.hidden, blk.heads, blk.ffn_hidden
    sbh = s * b * h
    core = (2 * d + 1) * a * s * s * b if blk.attention == "math" else 4.0 * b * a * s
    rep = (4 * d + 2) * sbh
    split = 4 * d * sbh + 2 * d * s * b * f + core
    return (rep + split) / t if sp else rep + split / t


def _cross_act(m: T5Shape, b: int, d: int, t: int, sp: bool) -> float:
    sd, se, h, a = m.decoder_seq, m.encoder_seq, m.hidden, m.heads
    core = (2 * d + 1) * a * sd * se * b if m.attention == "math" else 4.0 * b * a * sd
    rep = (2 * d + 1) * sd * b * h
    split = 2 * d * sd * b * h + 2 * d * se * b * h + core
    return (rep + split) / t if sp else rep + split / t


def layer_act_bytes(kind: str, m: T5Shape, b: int, d: int, t: int = 1, sp: bool = False) -> float:
    """Bytes a layer keeps for its backward per micro-batch on one of ``t`` tensor ranks
    (module doc). Embedding: token ids (8 bytes each) and the dropout mask of each call;
    head: ``4 s_d b h + 4 s_d b V/t`` (the GPT generator's count: the output layer's input and
    the fp32 logits). ``b``: micro-batch size; ``d``: bytes per element.

    Raises:
        ValueError: an unknown layer ``kind``.
    """
    h, se, sd = m.hidden, m.encoder_seq, m.decoder_seq
    if kind == "embedding":
        mask = (se + sd) * b * h
        return float(8 * (se + sd) * b + (mask / t if sp else mask))
    if kind == "enc_block":
        return _self_act(m.encoder, b, d, t, sp)
    if kind == "enc_last":
        norm = 2 * d * se * b * h
        return _self_act(m.encoder, b, d, t, sp) + (norm / t if sp else norm)
    if kind == "dec_block":
        return _self_act(m.decoder, b, d, t, sp) + _cross_act(m, b, d, t, sp)
    if kind == "head":
        return float(4 * sd * b * h + 4 * sd * b * -(-m.vocab // t))
    raise ValueError(f"unknown T5 layer kind {kind!r}")


def model_flops_per_sample(m: T5Shape) -> float:
    """Model FLOPs of one sample's training step in Megatron-LM's convention
    (:mod:`sim.compute.model_flops`: every GEMM three times at 2 FLOPs per multiply-add, a
    causal core halved, norms and softmax not counted), per sample:
    ``6 [s_e L_e (4hq + 2hF + 2q s_e) + s_d L_d (6hq + 2hF + q s_d + 2q s_e) + 2hq s_e L_d
    + s_d h V]``: the encoder layers; the decoder layers (self-attention and the cross-
    attention's ``linear_q`` and ``linear_proj`` and core over the ``s_e`` keys); the
    cross-attention's ``linear_kv`` over the encoder tokens; the logits. Megatron's own
    ``num_floating_point_operations`` has no T5 branch; this is its GPT count applied to
    each of T5's GEMMs.

    Example (the tiny shape of tests/test_t5.py, h 4, q 4, F 8, s_e 4, s_d 2, V 10):
        >>> model_flops_per_sample(T5Shape(1, 1, 4, 2, 8, 4, 2, 10))
        7488.0
    """
    h, q, f, v = m.hidden, m.q, m.ffn_hidden, m.vocab
    se, sd = m.encoder_seq, m.decoder_seq
    enc = se * m.encoder_layers * (4 * h * q + 2 * h * f + 2 * q * se)
    dec = sd * m.decoder_layers * (6 * h * q + 2 * h * f + q * sd + 2 * q * se)
    return 6.0 * (enc + dec + 2 * h * q * se * m.decoder_layers + sd * h * v)

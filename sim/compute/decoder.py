"""Decoder language models (Llama-like, optionally mixture-of-experts and MLA) layer by layer.

A :class:`DecoderShape` describes the models of Mixtral (arXiv:2401.04088), Qwen2-MoE and
DeepSeek-V2/V3 (arXiv:2405.04434, arXiv:2412.19437) and dense Llama-like ones: RMSNorm, rotary
embeddings, gated (SwiGLU) MLPs, grouped-query attention or MLA, no dropout, untied output
layer; some or all MLPs replaced by a MoE layer (:mod:`sim.compute.moe`). Its layers are
``embedding``, ``block`` (dense MLP), ``moe_block`` (MoE MLP) and ``head``.

:func:`layer_kernels` gives a layer's kernels on one rank of a parallel configuration (tensor
``tp`` with sequence parallelism ``sp``, context ``cp``; the rows its local experts compute
come from the caller, :mod:`sim.parallel.expert`); :func:`layer_act_bytes` what it keeps for the
backward; :func:`layer_params` its dense and expert parameters. The halves are
:mod:`sim.compute.transformer` (standard attention, dense MLP), :mod:`sim.compute.mla` and
:mod:`sim.compute.moe`; activation counts in their docstrings (the standard halves:
``2*r*h*d + t*(2h + 2*kv)/tp*d + 4*t*a/tp`` for flash attention with sequence-parallel tokens
``r``, i.e. Korthikanti et al.'s ``11sbh`` less the dropout mask plus the norm input ``2sbh``
at ``tp = 1``; the dense MLP ``2*r*h*d + t*(up + f)/tp*d``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.compute.kernels import Kernel
from sim.compute.layers import embedding_kernels, head_kernels
from sim.compute.mla import MLAShape, mla_act_bytes, mla_half_bwd, mla_half_fwd
from sim.compute.moe import MoEShape, moe_act_bytes, moe_bwd, moe_fwd
from sim.compute.transformer import (
    BlockShape,
    attention_half_bwd,
    attention_half_fwd,
    mlp_half_bwd,
    mlp_half_fwd,
)

KINDS = ("embedding", "block", "moe_block", "head")


@dataclass(frozen=True)
class DecoderShape:
    """A decoder LM (module doc).

    Attributes:
        layers: transformer blocks.
        hidden, heads, seq_len, vocab: model shape.
        ffn_hidden: width of the dense MLPs.
        kv_heads: grouped-query attention's key/value heads (None: ``heads``).
        attention: ``flash`` or ``math``.
        mla: MLA latent dims (None: standard attention).
        moe: the MoE layer (None: a dense model).
        dense_layers: the first blocks keep a dense MLP (DeepSeek's ``first_k_dense_replace``).
        moe_every: every ``moe_every``-th block after them is MoE (Qwen2-MoE's
            ``decoder_sparse_step``); 1: all of them.
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int
    kv_heads: int | None = None
    attention: str = "flash"
    mla: MLAShape | None = None
    moe: MoEShape | None = None
    dense_layers: int = 0
    moe_every: int = 1
    block: BlockShape = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        block = BlockShape(
            self.hidden,
            self.heads,
            self.seq_len,
            self.ffn_hidden,
            gated=True,
            fused_qkv=True,
            rotary=True,
            dropout=False,
            causal=True,
            attention=self.attention,
            kv_heads=self.kv_heads,
        )
        object.__setattr__(self, "block", block)
        if self.layers < 1 or self.vocab < 1:
            raise ValueError("layers and vocab must be >= 1")
        if self.moe is not None and self.moe.hidden != self.hidden:
            raise ValueError(f"moe.hidden {self.moe.hidden} != hidden {self.hidden}")
        if self.dense_layers < 0 or self.moe_every < 1:
            raise ValueError("dense_layers must be >= 0 and moe_every >= 1")

    def is_moe(self, i: int) -> bool:
        """Whether block ``i`` has a MoE MLP."""
        return self.moe is not None and i >= self.dense_layers and (i + 1) % self.moe_every == 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that :meth:`from_dict` reads back (``kind: decoder``)."""
        out = {k: v for k, v in asdict(self).items() if k != "block"}
        return {"kind": "decoder", **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecoderShape:
        """The shape :meth:`to_dict` wrote.

        Raises:
            ValueError: a missing or invalid field.
            TypeError: an unknown field.
        """
        d = {k: v for k, v in data.items() if k != "kind"}
        mla, moe = d.pop("mla", None), d.pop("moe", None)
        return cls(
            **d,
            mla=MLAShape(**mla) if mla else None,
            moe=MoEShape(**moe) if moe else None,
        )


def _attn_fwd(m: DecoderShape, b: int, d: int, tp: int, sp: bool, cp: int) -> list[Kernel]:
    if m.mla is not None:
        args = (m.hidden, m.heads, m.seq_len, b, d, tp, sp, cp)
        return mla_half_fwd(m.mla, *args, attention=m.attention)
    return attention_half_fwd(m.block, b, d, tp, sp, cp)


def _attn_bwd(m: DecoderShape, b: int, d: int, tp: int, sp: bool, cp: int):
    if m.mla is not None:
        args = (m.hidden, m.heads, m.seq_len, b, d, tp, sp, cp)
        return mla_half_bwd(m.mla, *args, attention=m.attention)
    return attention_half_bwd(m.block, b, d, tp, sp, cp)


def tokens(m: DecoderShape, b: int, tp: int, sp: bool, cp: int) -> tuple[int, int]:
    """``(t, r)``: a rank's tokens (``b*s/cp``) and its routed / element-wise tokens
    (``t/tp`` with sequence parallelism, else ``t``)."""
    t = b * m.seq_len // cp
    return t, t // tp if sp else t


def layer_kernels(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    rows: tuple[float, ...] = (),
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """``(forward, input gradient, weight gradient)`` kernels of a layer on one rank.

    Args:
        kind: ``embedding``, ``block``, ``moe_block`` or ``head``.
        m: the model.
        b: micro-batch size.
        d: bytes per element.
        tp, sp, cp: tensor-parallel size, sequence parallelism, context-parallel size.
        rows: rows each local expert computes (``moe_block``).

    Raises:
        ValueError: an unknown kind; sizes the parallelism does not divide.
    """
    t, r = tokens(m, b, tp, sp, cp)
    s = m.seq_len // cp
    if kind == "embedding":
        fwd, bwd = embedding_kernels("gpt", b, s, m.hidden, -(-m.vocab // tp), d)
        return fwd, [], bwd
    if kind == "head":
        fwd, bi, bw = head_kernels("gpt", b, s, m.hidden, -(-m.vocab // tp), d)
        return fwd, bi, bw
    if kind not in ("block", "moe_block"):
        raise ValueError(f"unknown layer kind {kind!r}; use one of {', '.join(KINDS)}")
    fwd = _attn_fwd(m, b, d, tp, sp, cp)
    a_in, a_w = _attn_bwd(m, b, d, tp, sp, cp)
    if kind == "block":
        m_in, m_w = mlp_half_bwd(m.block, b, d, tp, sp, cp)
        return fwd + mlp_half_fwd(m.block, b, d, tp, sp, cp), m_in + a_in, a_w + m_w
    if m.moe is None:
        raise ValueError("a moe_block needs a model with a moe layer")
    m_in, m_w = moe_bwd(m.moe, r, t, rows, d, tp)
    return fwd + moe_fwd(m.moe, r, t, rows, d, tp), m_in + a_in, a_w + m_w


def layer_act_bytes(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    rows: tuple[float, ...] = (),
    cp_comm: str = "p2p",
) -> float:
    """Bytes a layer keeps for its backward on one rank, one micro-batch (module doc;
    embedding ``8t + t*h*d``-like ids and output, head ``4th + 4tV/tp`` as
    :mod:`sim.trace.generator`). With all-to-all context parallelism (``cp_comm="a2a"``)
    the attention keeps its output twice: in the head-split layout the all-to-all brings back
    (``out_part``, saved by TE's ``AttnFuncWithCPAndQKVOA2A.forward``,
    ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``) and,
    as the output projection's input, in the sequence-split one: ``t*h/tp*d`` more."""
    t, r = tokens(m, b, tp, sp, cp)
    h = m.hidden
    if kind == "embedding":
        return float(8 * t + r * h * d)
    if kind == "head":
        return float(4 * r * h + 4 * t * -(-m.vocab // tp))
    if m.mla is not None:
        attn = mla_act_bytes(m.mla, h, m.heads, m.seq_len, b, d, tp, sp, cp)
    else:
        kv = h // m.heads * (m.kv_heads or m.heads)
        attn = 2 * r * h * d + t * (2 * h + 2 * kv) // tp * d + 4 * t * m.heads // tp
    if m.attention == "math":
        attn += scores_act_bytes(m, b, d, tp, cp)
    if cp > 1 and cp_comm == "a2a":
        attn += t * h // tp * d
    if kind == "moe_block":
        assert m.moe is not None
        return float(attn + moe_act_bytes(m.moe, r, t, rows, d, tp))
    f = m.ffn_hidden
    return float(attn + 2 * r * h * d + t * 3 * f // tp * d)


def scores_act_bytes(m: DecoderShape, b: int, d: int, tp: int = 1, cp: int = 1) -> float:
    """Bytes unfused ("math") attention keeps for its backward beyond flash attention's: the
    softmax probabilities of the rank's ``a/tp`` heads, ``s/cp`` queries over ``s`` keys,
    ``a/tp*s/cp*s*b*d`` (Megatron-LM ``megatron/core/transformer/dot_product_attention.py``
    ``DotProductAttention.forward`` keeps ``attention_probs`` for ``torch.bmm`` with V; no
    dropout mask: decoder models train without attention dropout). The log-sum-exp term of
    the flash count stays (an overestimate of ``4*t*a/tp`` bytes)."""
    return float(m.heads // tp * (m.seq_len // cp) * m.seq_len * b * d)


def layer_params(kind: str, m: DecoderShape) -> tuple[int, int]:
    """``(dense, expert)`` parameters of a layer, unsharded: the routed experts' weights are
    ``expert``, everything else (router, shared experts, attention, norms) ``dense``."""
    h, v = m.hidden, m.vocab
    if kind == "embedding":
        return v * h, 0
    if kind == "head":
        return v * h + h, 0
    if m.mla is not None:
        attn = m.mla.params(h, m.heads)
    else:
        kv = h // m.heads * (m.kv_heads or m.heads)
        attn = h * (h + 2 * kv) + h * h
    norms = 2 * h
    if kind == "moe_block":
        assert m.moe is not None
        moe = m.moe
        dense = attn + norms + moe.router_params() + moe.shared_params()
        return dense, moe.experts * moe.expert_params()
    return attn + norms + 3 * h * m.ffn_hidden, 0


def layer_names(m: DecoderShape) -> list[tuple[str, str]]:
    """``(name, kind)`` of every layer in order: ``embedding``, ``block.i`` or
    ``moe_block.i``, ``head``."""
    blocks = [
        (f"moe_block.{i}", "moe_block") if m.is_moe(i) else (f"block.{i}", "block")
        for i in range(m.layers)
    ]
    return [("embedding", "embedding"), *blocks, ("head", "head")]

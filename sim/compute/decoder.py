"""Decoder language models layer by layer: kernels, activations and parameters of each layer.

The model is a :class:`~sim.compute.decoder_shape.DecoderShape` (Mixtral arXiv:2401.04088,
Qwen2/Qwen3 and their MoE, DeepSeek-V2/V3 arXiv:2405.04434 / arXiv:2412.19437, GPT-OSS,
Nemotron-H arXiv:2504.03624, and dense Llama-like ones), cut into the layers of
:func:`~sim.compute.decoder_shape.layer_names`.

:func:`layer_kernels` gives a layer's kernels on one rank of a parallel configuration (tensor
``tp`` with sequence parallelism ``sp``, context ``cp``; the rows its local experts compute
come from the caller, :mod:`sim.parallel.expert`); :func:`layer_act_bytes` what it keeps for the
backward; :func:`layer_params` its dense and expert parameters, :func:`trainable_params` those
an optimizer updates. The halves are :mod:`sim.compute.transformer` (standard attention, dense
MLP), :mod:`sim.compute.mla`, :mod:`sim.compute.moe`, :mod:`sim.compute.ssm` (Mamba-2) and
:mod:`sim.compute.lora` (adapters); activation counts in their docstrings (the standard halves:
``2*r*h*d + t*(2q + 2kv)/tp*d + 4*t*a/tp`` for flash attention with sequence-parallel tokens
``r``, ``q = a*hd`` and ``kv`` the query and key widths, i.e. Korthikanti et al.'s ``11sbh``
less the dropout mask plus the norm input ``2sbh`` at ``tp = 1``; the dense MLP
``2*r*h*d + t*(up + f)/tp*d``).

A **multi-token-prediction** depth (``mtp``; DeepSeek-V3 §2.2, Megatron-Core
``multi_token_prediction.py``): the embedding of the tokens shifted by one (a lookup in the
shared word embedding), RMSNorms of it and of the previous depth's hidden state, their
concatenation projected ``[T, 2h] @ [2h, h]`` (``eh_proj``), one transformer block (MoE where
the model's blocks are), and the shared output head's logits and cross-entropy on its own
output. Its parameters are the projection, its three norms and the block (the embedding and the
output head are the main model's); it passes on both hidden states (``2*b*s*h*d``).
"""

from __future__ import annotations

from sim.compute.decoder_shape import DecoderShape, base_kind, layer_names
from sim.compute.kernels import Kernel, gemm, mem
from sim.compute.layers import embedding_kernels, head_kernels
from sim.compute.lora import (
    ATTENTION_TARGETS,
    Linear,
    adapter_params,
    lora_act_bytes,
    lora_bwd,
    lora_fwd,
)
from sim.compute.mla import mla_act_bytes, mla_half_bwd, mla_half_fwd
from sim.compute.moe import moe_act_bytes, moe_bwd, moe_fwd
from sim.compute.ssm import mamba_act_bytes, mamba_bwd, mamba_fwd
from sim.compute.torchtitan_ops import rms_norm_fp32_bwd, rms_norm_fp32_fwd
from sim.compute.transformer import (
    BlockShape,
    attention_half_bwd,
    attention_half_fwd,
    mlp_half_bwd,
    mlp_half_fwd,
)

__all__ = [
    "DecoderShape",
    "layer_act_bytes",
    "layer_kernels",
    "layer_names",
    "layer_params",
    "tokens",
    "trainable_params",
]

KINDS = ("embedding", "block", "moe_block", "head", "mamba", "attention", "mlp", "moe", "mtp")
ATTN = ("block", "moe_block", "attention", "mtp")
"""Kinds with an attention half."""
Phases = tuple[list[Kernel], list[Kernel], list[Kernel]]


def tokens(m: DecoderShape, b: int, tp: int, sp: bool, cp: int) -> tuple[int, int]:
    """``(t, r)``: a rank's tokens (``b*s/cp``) and its routed / element-wise tokens
    (``t/tp`` with sequence parallelism, else ``t``)."""
    t = b * m.seq_len // cp
    return t, t // tp if sp else t


def _check(kind: str) -> str:
    base = base_kind(kind)
    if base not in KINDS:
        raise ValueError(f"unknown layer kind {kind!r}; use one of {', '.join(KINDS)}")
    return base


def _attn(m: DecoderShape, blk: BlockShape, b: int, d: int, tp: int, sp: bool, cp: int):
    """``(forward, input gradient, weight gradient)`` of the attention half."""
    if m.mla is not None:
        args = (m.hidden, m.heads, m.seq_len, b, d, tp, sp, cp)
        fwd = mla_half_fwd(m.mla, *args, attention=m.attention)
        return (fwd, *mla_half_bwd(m.mla, *args, attention=m.attention))
    return (attention_half_fwd(blk, b, d, tp, sp, cp), *attention_half_bwd(blk, b, d, tp, sp, cp))


def _mlp(kind, m, blk, b, d, tp, sp, cp, rows, etp=None):
    """``(forward, input gradient, weight gradient)`` of the MLP or mixer half of ``kind``."""
    t, r = tokens(m, b, tp, sp, cp)
    if kind in ("block", "mlp"):
        return (mlp_half_fwd(blk, b, d, tp, sp, cp), *mlp_half_bwd(blk, b, d, tp, sp, cp))
    if kind == "mamba":
        assert m.mamba is not None
        args = (m.mamba, m.hidden, m.seq_len, b, d, tp, sp, cp)
        return (mamba_fwd(*args), *mamba_bwd(*args))
    if m.moe is None:
        raise ValueError(f"a {kind} layer needs a model with a moe layer")
    return (moe_fwd(m.moe, r, t, rows, d, tp, etp), *moe_bwd(m.moe, r, t, rows, d, tp, etp))


def mtp_inner(m: DecoderShape) -> str:
    """The block of an MTP depth: ``moe_block`` (attention and MoE) where the model has
    experts, else ``block``. A hybrid model's depth is its ``mtp`` pattern, ``*E`` in Nemotron 3
    (NVIDIA/Megatron-LM@d98e8a64 ``tests/functional_tests/test_cases/nemotron/
    nemotron3_super_release_gb200/model_config.yaml``: ``--hybrid-layer-pattern "...E/*E/*E"``
    with ``--mtp-num-layers 2``), an attention and a MoE layer as a MoE block has them."""
    return "moe_block" if m.moe is not None else "block"


def _mtp(m: DecoderShape, b: int, d: int, tp: int, sp: bool, cp: int, rows, etp=None) -> Phases:
    """An MTP depth's kernels: its own part, its block, the shared head (module doc)."""
    t, r = tokens(m, b, tp, sp, cp)
    h, s, v = m.hidden, m.seq_len // cp, -(-m.vocab // tp)
    inner = mtp_inner(m)
    f, i, w = _body(inner, m, b, d, tp, sp, cp, rows, etp)
    hf, hi, hw = head_kernels("gpt", b, s, h, v, d, m.cross_entropy_fusion)
    fwd = [mem("mtp_embedding", 8 * t + 2 * r * h * d), mem("mtp_norms", 4 * r * h * d)]
    fwd.append(gemm("eh_proj", t, h // tp, 2 * h, d))
    dx = [gemm("d_eh_proj_in", t, 2 * h, h // tp, d), mem("mtp_norms_bwd", 6 * r * h * d)]
    dw = [gemm("d_eh_proj_w", 2 * h, h // tp, t, d), mem("mtp_embedding_bwd", 2 * t * h * d)]
    return fwd + f + hf, hi + i + dx, w + dw + hw


def _body(kind, m, b, d, tp, sp, cp, rows, etp=None) -> Phases:
    base = _check(kind)
    if base == "mtp":
        return _mtp(m, b, d, tp, sp, cp, rows, etp)
    blk = m.block_for(kind)
    fwd: list[Kernel] = []
    bi: list[Kernel] = []
    bw: list[Kernel] = []
    if base in ATTN:
        fwd, bi, bw = _attn(m, blk, b, d, tp, sp, cp)
    if base in ("block", "moe_block", "mlp", "moe", "mamba"):
        mlp_kind = base if base != "moe_block" else "moe"
        mf, mi, mw = _mlp(mlp_kind, m, blk, b, d, tp, sp, cp, rows, etp)
        fwd, bi, bw = fwd + mf, mi + bi, bw + mw
    return fwd, bi, bw


def layer_kernels(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    rows: tuple[float, ...] = (),
    etp: int | None = None,
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """``(forward, input gradient, weight gradient)`` kernels of a layer on one rank.

    With LoRA (:mod:`sim.compute.lora`) the frozen weights' gradient kernels are dropped (the
    embedding runs no backward) and the adapters' kernels added.

    Args:
        kind: a kind of :data:`KINDS`, windowed kinds prefixed ``swa_``.
        m: the model.
        b: micro-batch size.
        d: bytes per element.
        tp, sp, cp: tensor-parallel size, sequence parallelism, context-parallel size.
        rows: rows each local expert computes (MoE layers).
        etp: expert tensor-parallel size of the routed experts (None: ``tp``).

    Raises:
        ValueError: an unknown kind; sizes the parallelism does not divide.
    """
    t, _ = tokens(m, b, tp, sp, cp)
    s = m.seq_len // cp
    if kind == "embedding":
        fwd, bwd = embedding_kernels("gpt", b, s, m.hidden, -(-m.vocab // tp), d)
        return fwd, [], [] if m.lora else bwd
    if kind == "head":
        fwd, bi, bw = head_kernels(
            "gpt", b, s, m.hidden, -(-m.vocab // tp), d, m.cross_entropy_fusion
        )
        if m.norm_fp32:  # torchtitan's fp32 RMSNorm ops for the final norm too
            fwd = _fp32_final_norm(fwd, rms_norm_fp32_fwd("final_norm", b * s, m.hidden, d))
            bi = _fp32_final_norm(bi, rms_norm_fp32_bwd("final_norm", b * s, m.hidden, d))
        return fwd, bi, [] if m.lora else bw
    fwd, bi, bw = _body(kind, m, b, d, tp, sp, cp, rows, etp)
    if m.lora is None:
        return fwd, bi, bw
    lin = _linears(kind, m)
    lf = lora_fwd(m.lora, lin, t, d, tp)
    li, lw = lora_bwd(m.lora, lin, t, d, tp)
    return fwd + lf, li + bi, lw


def _fp32_final_norm(kernels: list[Kernel], ops: list[Kernel]) -> list[Kernel]:
    """``kernels`` with the fused ``final_norm`` (or ``final_norm_bwd``) kernel replaced by
    ``ops``."""
    at = next(i for i, k in enumerate(kernels) if k.name.startswith("final_norm"))
    return kernels[:at] + ops + kernels[at + 1 :]


def _linears(kind: str, m: DecoderShape) -> list[Linear]:
    """The layer's linear layers LoRA may adapt, as ``(target, in, out)``."""
    base = base_kind(kind)
    blk, h = m.block, m.hidden
    q, kv = blk.heads * blk.hd, blk.kv * blk.hd
    out: list[Linear] = []
    if base in ATTN and m.mla is None:
        out += [("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", q, h)]
    if base in ("block", "mlp") or (base == "mtp" and m.moe is None):
        f = m.ffn_hidden
        out += [("gate_proj", h, f)] if m.gated_mlp else []
        out += [("up_proj", h, f), ("down_proj", f, h)]
    return [x for x in out if m.mla is None or x[0] not in ATTENTION_TARGETS]


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
    etp: int | None = None,
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
        return float(8 * t + r * h * d + (r * h if m.dropout else 0))
    if kind == "head":
        return float(4 * r * h + 4 * t * -(-m.vocab // tp))
    base = _check(kind)
    adapters = lora_act_bytes(m.lora, _linears(kind, m), t, d) if m.lora else 0.0
    return _body_act(base, kind, m, b, d, tp, sp, cp, rows, cp_comm, etp) + adapters


def _body_act(base, kind, m, b, d, tp, sp, cp, rows, cp_comm="p2p", etp=None) -> float:
    t, r = tokens(m, b, tp, sp, cp)
    h = m.hidden
    if base == "mtp":
        inner = mtp_inner(m)
        block = _body_act(inner, inner, m, b, d, tp, sp, cp, rows, cp_comm, etp)
        head = 4 * r * h + 4 * t * -(-m.vocab // tp)
        return block + 2 * t * h * d + 2 * r * h * d + head
    if base == "mamba":
        assert m.mamba is not None
        return mamba_act_bytes(m.mamba, h, m.seq_len, b, d, tp, sp, cp)
    attn = _attn_act(m, m.block_for(kind), b, d, tp, sp, cp, cp_comm) if base in ATTN else 0.0
    if m.dropout and base != "attention":  # the MLP's bias_dropout_add mask (1 byte)
        attn += r * h
    if base in ("moe_block", "moe"):
        assert m.moe is not None
        return float(attn + moe_act_bytes(m.moe, r, t, rows, d, tp, etp))
    if base in ("block", "mlp"):
        up = (2 if m.gated_mlp else 1) * m.ffn_hidden
        return float(attn + 2 * r * h * d + t * (up + m.ffn_hidden) // tp * d)
    return float(attn)


def _attn_act(
    m: DecoderShape,
    blk: BlockShape,
    b: int,
    d: int,
    tp: int,
    sp: bool,
    cp: int,
    cp_comm: str = "p2p",
):
    t, r = tokens(m, b, tp, sp, cp)
    h = m.hidden
    extra = scores_act_bytes(m, b, d, tp, cp) if m.attention == "math" else 0.0
    if m.dropout:  # the projection's dropout mask; unfused: the probabilities' mask and output
        extra = extra * (2 * d + 1) / d + r * h
    if cp > 1 and cp_comm == "a2a":
        extra += t * h // tp * d  # TE's a2a context parallelism keeps its output twice
    if m.mla is not None:
        return mla_act_bytes(m.mla, h, m.heads, m.seq_len, b, d, tp, sp, cp) + extra
    q, kv = blk.heads * blk.hd, blk.kv * blk.hd
    out = 2 * r * h * d + t * (2 * q + 2 * kv) // tp * d + 4 * t * m.heads // tp
    return out + (t * (q + kv) // tp * d if blk.qk_norm else 0) + extra


def scores_act_bytes(m: DecoderShape, b: int, d: int, tp: int = 1, cp: int = 1) -> float:
    """Bytes unfused ("math") attention keeps for its backward beyond flash attention's: the
    softmax probabilities of the rank's ``a/tp`` heads, ``s/cp`` queries over ``s`` keys,
    ``a/tp*s/cp*s*b*d`` (Megatron-LM ``megatron/core/transformer/dot_product_attention.py``
    ``DotProductAttention.forward`` keeps ``attention_probs`` for ``torch.bmm`` with V),
    without attention dropout; with it (``DecoderShape.dropout``) ``(2d + 1)/d`` times as
    much: the softmax output, the 1-byte mask and the dropped-out probabilities
    (Korthikanti et al., arXiv:2205.05198 §4.1: ``5as^2b`` at 16 bit). The log-sum-exp term
    of the flash count stays (an overestimate of ``4*t*a/tp`` bytes)."""
    return float(m.heads // tp * (m.seq_len // cp) * m.seq_len * b * d)


def layer_params(kind: str, m: DecoderShape) -> tuple[int, int]:
    """``(dense, expert)`` parameters of a layer, unsharded (LoRA adapters included): the
    routed experts' weights are ``expert``, everything else (router, shared experts,
    attention, norms, Mamba mixers) ``dense``."""
    h, v = m.hidden, m.vocab
    if kind == "embedding":
        return v * h, 0
    if kind == "head":
        return v * h + h, 0
    base = _check(kind)
    adapters = adapter_params(m.lora, _linears(kind, m)) if m.lora else 0
    dense, expert = _body_params(base, m)
    return dense + adapters, expert


def _body_params(base: str, m: DecoderShape) -> tuple[int, int]:
    h = m.hidden
    if base == "mtp":
        inner = mtp_inner(m)
        dense, expert = _body_params(inner, m)
        return dense + 2 * h * h + 3 * h, expert
    if base == "mamba":
        assert m.mamba is not None
        return m.mamba.params(h), 0
    attn = 0
    if base in ATTN:
        attn = (m.mla.params(h, m.heads) if m.mla is not None else m.block.attn_params()) + h
    if base in ("moe_block", "moe"):
        moe = m.moe
        assert moe is not None
        dense = attn + h + moe.router_params() + moe.shared_params() + moe.latent_params()
        return dense, moe.experts * moe.expert_params()
    if base in ("block", "mlp"):
        return attn + h + (3 if m.gated_mlp else 2) * h * m.ffn_hidden, 0
    return attn, 0


def trainable_params(kind: str, m: DecoderShape) -> int:
    """Parameters of a layer an optimizer updates: all of them, or only the LoRA adapters."""
    if m.lora is None:
        return sum(layer_params(kind, m))
    if kind in ("embedding", "head"):
        return 0
    return adapter_params(m.lora, _linears(kind, m))

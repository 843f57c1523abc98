"""The layers of an analytic GPT or BERT trace (:func:`sim.trace.generator.transformer_trace`):
the closed forms of a transformer block's parameters, FLOPs and stashed bytes, and the
:class:`~sim.trace.schema.LayerProfile` of the embedding, a block and the head. Notation,
formulas and their sources (Narayanan et al., SC'21; Korthikanti et al., arXiv:2205.05198;
Megatron's ``theoretical_memory_usage.py``) are in :mod:`sim.trace.generator`'s module doc."""

from __future__ import annotations

from sim.compute.megatron_ops import block_calls, block_ops, embedding_ops, head_ops
from sim.compute.transformer import BlockTimes
from sim.trace.schema import LayerProfile


def block_params(hidden: int, ffn_mult: int = 4) -> int:
    """Parameters of one transformer block: ``(4 + 2f)h^2 + (9 + f)h`` (12h^2 + 13h at f=4)."""
    h, f = hidden, ffn_mult
    return (4 + 2 * f) * h * h + (9 + f) * h


def block_fwd_flops(b: int, s: int, h: int, ffn_mult: int = 4) -> float:
    """Forward FLOPs of one block per micro-batch: ``(8 + 4f)bsh^2 + 4bs^2h`` (Narayanan 2021)."""
    return float((8 + 4 * ffn_mult) * b * s * h * h + 4 * b * s * s * h)


def block_act_bytes(
    b: int, s: int, h: int, a: int, ffn_mult: int = 4, elem_bytes: int = 2
) -> float:
    """Bytes a block stashes for backward: ``sbh(34 + 5as/h)`` at 16 bit, f=4 (Korthikanti)."""
    sbh, as2b = s * b * h, a * s * s * b
    return float(elem_bytes * ((8 + 2 * ffn_mult) * sbh + 2 * as2b) + 2 * sbh + as2b)


def attn_core_act_bytes(b: int, s: int, a: int, elem_bytes: int = 2) -> float:
    """Bytes of the attention core's stash: softmax output and dropout output (``elem_bytes``
    each) and the dropout mask (1 byte) per score, ``5*a*s^2*b`` at 16 bit (Korthikanti)."""
    return float((2 * elem_bytes + 1) * a * s * s * b)


def embedding_layer(
    kind: str, b: int, s: int, h: int, V: int, d: int, hbm: float, t: BlockTimes | None
) -> LayerProfile:
    """The ``embedding`` layer of a ``kind`` (``gpt``/``bert``) stack: ``b`` samples of ``s``
    tokens, hidden ``h``, vocabulary ``V``, ``d`` bytes per element; its times from ``t`` (the
    kernel model) or, without, bytes moved / ``hbm`` (bytes/s); bytes and formulas as
    :mod:`sim.trace.generator`'s module doc says."""
    params = (V + s) * h + ((2 * h + 2 * h) if kind == "bert" else 0)
    fwd_bytes = 8 * b * s + (2 * b + 1) * s * h * d + (2 * b * s * h * d if kind == "bert" else 0)
    fwd_s = t.fwd.total_s if t else fwd_bytes / hbm
    bwd_s = t.bwd_weight.total_s if t else (b * s * h * d + (V + s) * h * d) / hbm
    return LayerProfile(
        name="embedding",
        fwd_s=fwd_s,
        bwd_s=bwd_s,
        param_bytes=float(params * d),
        act_bytes=float(8 * s * b + s * b * h),
        out_bytes=float(s * b * h * d),
        bwd_input_s=0.0,
        bwd_weight_s=bwd_s,
        flops=0.0,
        fwd_ops=float(embedding_ops(kind)[0]),
        bwd_ops=float(embedding_ops(kind)[1]),
    )


def head_layer(
    kind: str,
    b: int,
    s: int,
    h: int,
    V: int,
    d: int,
    flops_per_s: float,
    t: BlockTimes | None,
    fusion: str = "unfused",
) -> LayerProfile:
    """The ``head`` layer (final LayerNorm and output projection for ``gpt``; MLM transform,
    pooler and NSP classifier for ``bert``) with Megatron's copy of the word embedding: shape
    arguments as :func:`embedding_layer`; its times from ``t`` or FLOPs / ``flops_per_s``; its
    host ops those of the ``fusion`` loss (:func:`sim.compute.megatron_ops.head_ops`)."""
    if kind == "gpt":
        params = 2 * h + V * h
        flops = 2.0 * b * s * h * V
    else:  # MLM transform (dense + LayerNorm), decoder copy + bias, pooler, NSP classifier
        params = (h * h + h) + 2 * h + (V * h + V) + (h * h + h) + (2 * h + 2)
        flops = 2.0 * b * s * h * V + 2.0 * b * s * h * h + 2.0 * b * h * h + 4.0 * b * h
    fwd_s = t.fwd.total_s if t else flops / flops_per_s
    bwd_in = t.bwd_input.total_s if t else fwd_s
    bwd_w = t.bwd_weight.total_s if t else fwd_s
    return LayerProfile(
        name="head",
        fwd_s=fwd_s,
        bwd_s=bwd_in + bwd_w,
        param_bytes=float(params * d),
        act_bytes=float(4 * s * b * h + 4 * s * b * V),
        out_bytes=0.0,
        bwd_input_s=bwd_in,
        bwd_weight_s=bwd_w,
        flops=flops,
        fwd_ops=float(head_ops(kind, fusion)[0]),
        bwd_ops=float(head_ops(kind, fusion)[1]),
    )


def block_layer(
    i: int,
    b: int,
    s: int,
    h: int,
    a: int,
    f: int,
    d: int,
    flops_per_s: float,
    t: BlockTimes | None,
    flash: bool,
) -> LayerProfile:
    """Transformer block ``i`` (``block.{i}``): ``b`` samples of ``s`` tokens, hidden ``h``,
    ``a`` heads, FFN ``f x h``, ``d`` bytes per element; times from ``t`` or FLOPs /
    ``flops_per_s`` (backward 2x, weight gradient the GEMM FLOPs); ``flash``: no ``s^2`` stash,
    the fp32 log-sum-exp kept instead (:mod:`sim.trace.generator`'s module doc)."""
    flops = block_fwd_flops(b, s, h, f)
    gemm = float((8 + 4 * f) * b * s * h * h)
    core = attn_core_act_bytes(b, s, a, d)
    act = block_act_bytes(b, s, h, a, f, d)
    if flash:  # no s^2 stash; the kernel keeps the fp32 log-sum-exp (b*a*s floats)
        act, core = act - core + 4.0 * b * a * s, 0.0
    return LayerProfile(
        name=f"block.{i}",
        fwd_s=t.fwd.total_s if t else flops / flops_per_s,
        bwd_s=t.bwd_input.total_s + t.bwd_weight.total_s if t else 2 * flops / flops_per_s,
        param_bytes=float(block_params(h, f) * d),
        act_bytes=act,
        out_bytes=float(s * b * h * d),
        bwd_input_s=t.bwd_input.total_s if t else (2 * flops - gemm) / flops_per_s,
        bwd_weight_s=t.bwd_weight.total_s if t else gemm / flops_per_s,
        flops=flops,
        attn_core_act_bytes=core,
        attn_core_flops=0.0 if flash else float(4 * b * s * s * h),
        fwd_ops=float(block_ops()[0]),
        bwd_ops=float(block_ops()[1]),
        fwd_modules=float(block_calls()[0]),
        fwd_functions=float(block_calls()[1]),
    )

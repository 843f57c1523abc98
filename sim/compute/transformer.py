"""Kernels of one transformer block, forward and backward, and their times on a GPU.

A block is pre-norm: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``. With ``T = b*s`` tokens,
``h`` hidden, ``f`` FFN width and ``d`` bytes per element, the forward kernels are:

* norm (LayerNorm or RMSNorm, one fused kernel): reads and writes ``T*h*d`` each;
* QKV projection: one GEMM ``[T, h] @ [h, 3h]`` (fused, GPT/Megatron) or three ``[h, h]``
  GEMMs (Llama in Hugging Face); rotary embedding on Q and K (Llama): ``2 * 2*T*h*d``;
* the attention core (:mod:`sim.compute.attention`, ``flash`` or ``math``);
* output projection ``[T, h] @ [h, h]``; with dropout a dropout kernel (``(2d + 1)*T*h``);
  residual add (reads 2, writes 1: ``3*T*h*d``);
* second norm; MLP: up ``[h, f]`` (and gate ``[h, f]`` for SwiGLU), activation (``2*T*f*d``),
  for SwiGLU the product gate x up (``3*T*f*d``), down ``[f, h]``; dropout; residual add.

Backward of a GEMM ``Y = X W`` is ``dX = dY W^T`` (input gradient, "I") and ``dW = X^T dY``
(weight gradient, "W"; Qi et al., arXiv:2401.10241). Backward of a memory-bound kernel reads its
input and the output gradient and writes the input gradient: 1.5x the forward bytes for
norms and element-wise ops (``3*T*h*d`` for a norm); a residual add's backward is free (the
gradient is passed on), dropout backward moves ``(2d + 1)*T*h``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.block_shape import LLAMA2_7B, BlockShape
from sim.compute.kernels import Kernel, PhaseTime, gemm, mem, phase_time
from sim.compute.linear_bias import qkv_bias_add
from sim.compute.rope_unfused import rope_bwd, rope_fwd
from sim.compute.torchtitan_ops import (
    kv_repeat_bwd,
    kv_repeat_fwd,
    rms_norm_fp32_bwd,
    rms_norm_fp32_fwd,
    rope_complex_bwd,
    rope_complex_fwd,
)
from sim.hardware.gpu_compute import ComputeSpec

ROW_PARALLEL = ("proj", "down")
"""GEMMs split along their input under tensor parallelism (Megatron's RowParallelLinear); the
others (QKV, gate, up) are split along their output (ColumnParallelLinear): Shoeybi et al.,
arXiv:1909.08053, §3."""


def _linears(shape: BlockShape, tp: int = 1) -> list[tuple[str, int, int]]:
    """``(name, in, out)`` of every weight GEMM of the block, in forward order, as one of
    ``tp`` tensor-parallel ranks holds it (column-parallel: ``out / tp``, row-parallel
    :data:`ROW_PARALLEL`: ``in / tp``)."""
    h, f = shape.hidden, shape.ffn_hidden
    q, kv = shape.heads * shape.hd, shape.kv * shape.hd
    qkv = [("qkv", h, q + 2 * kv)] if shape.fused_qkv else [("q", h, q), ("k", h, kv), ("v", h, kv)]
    mlp = [("gate", h, f), ("up", h, f)] if shape.gated else [("up", h, f)]
    full = qkv + [("proj", q, h)] + mlp + [("down", f, h)]
    if tp == 1:
        return full
    return [(n, i // tp, o) if n in ROW_PARALLEL else (n, i, o // tp) for n, i, o in full]


def _check_tp(shape: BlockShape, tp: int, sp: bool) -> None:
    if tp < 1 or shape.heads % tp or shape.ffn_hidden % tp:
        raise ValueError(
            f"tensor parallel size {tp} must divide heads {shape.heads} and FFN width "
            f"{shape.ffn_hidden}"
        )
    if sp and shape.seq_len % tp:
        raise ValueError(f"sequence parallelism needs seq_len {shape.seq_len} divisible by {tp}")


def block_fwd(
    shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> list[Kernel]:
    """Forward kernels of one block for a micro-batch of ``b`` (module doc), on one of ``tp``
    tensor-parallel ranks: GEMMs at their split sizes, the attention core over ``a / tp`` heads;
    norms, dropout and residuals over all ``b*s`` tokens, or ``b*s / tp`` with sequence
    parallelism ``sp`` (Korthikanti et al., arXiv:2205.05198, §4.2.2); on one of ``cp``
    context-parallel ranks every kernel sees ``s / cp`` tokens and the attention core ``1/cp``
    of the scores (:func:`~sim.compute.attention.attention_fwd`).

    Raises:
        ValueError: ``tp`` does not divide the heads or FFN width (or ``s`` with ``sp``), or
            ``cp`` does not divide ``s``.
    """
    return attention_half_fwd(shape, b, d, tp, sp, cp) + mlp_half_fwd(shape, b, d, tp, sp, cp)


def _tokens(shape: BlockShape, b: int, tp: int, sp: bool, cp: int) -> tuple[int, int]:
    """``(t, r)``: tokens of a rank's GEMMs, and of its replicated or sequence-split
    element-wise kernels."""
    _check_tp(shape, tp, sp)
    if cp < 1 or shape.seq_len % cp or (sp and (shape.seq_len // cp) % tp):
        raise ValueError(f"context parallel size {cp} must divide seq_len {shape.seq_len}")
    t = b * shape.seq_len // cp
    return t, t // tp if sp else t


def attention_half_fwd(
    shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> list[Kernel]:
    """The first half of :func:`block_fwd`: norm, QKV, attention core, projection, residual."""
    s, h, a, q = shape.seq_len, shape.hidden, shape.heads, shape.heads * shape.hd
    t, r = _tokens(shape, b, tp, sp, cp)
    gemms = {name: gemm(name, t, n, k, d) for name, k, n in _linears(shape, tp)}
    out = _norm_fwd(shape, "norm1", r, h, d)
    out += [gemms[n] for n in ("qkv", "q", "k", "v") if n in gemms]
    if shape.unfused_qkv_bias and "qkv" in gemms:
        out.append(qkv_bias_add(gemms["qkv"].m, gemms["qkv"].n, d))
    if shape.qk_norm:
        out.append(mem("qk_norm", 2 * _qk_width(shape, t, tp) * d))
    k = t * max(1, shape.kv // tp) * shape.hd  # the keys' own heads (grouped-query)
    if shape.rotary and shape.rope_unfused:  # YaRN's scaled RoPE, eager (rope_unfused)
        out += rope_fwd("rotary_q", t * q // tp, d) + rope_fwd("rotary_k", k, d)
    elif shape.rotary and shape.rope_complex:  # torchtitan's complex fp32 RoPE
        out += rope_complex_fwd("rotary_q", t * q // tp, s // cp, shape.hd, d)
        out += rope_complex_fwd("rotary_k", k, s // cp, shape.hd, d)
    elif shape.rotary:
        k = t * max(1, shape.kv // tp) * shape.hd  # the keys' own heads (grouped-query)
        out += [mem("rotary_q", 2 * t * q // tp * d), mem("rotary_k", 2 * k * d)]
    if shape.kv_repeat:  # torchtitan's repeat_kv: keys and values copied to a/kv heads
        out += kv_repeat_fwd("k", k, shape.heads // shape.kv, d)
        out += kv_repeat_fwd("v", k, shape.heads // shape.kv, d)
    out += attention_fwd(
        shape.attention,
        b,
        s // cp,
        q // tp,
        a // tp,
        d,
        causal=shape.causal,
        dropout=shape.dropout,
        kv=s,
        window=shape.window,
    )
    out.append(gemms["proj"])
    if shape.bias:  # added by the unfused bias-dropout-add (attribute doc)
        out.append(mem("attn_proj_bias", 2 * r * h * d))
    return out + _dropout_residual("attn", r, h, d, shape.dropout, shape.fused_dropout_add)


def _norm_fwd(shape: BlockShape, name: str, r: int, h: int, d: int) -> list[Kernel]:
    """A pre-norm over ``r`` rows: one fused kernel (``2 r h d``), or torchtitan's fp32 ops
    (``norm_fp32``, :mod:`sim.compute.torchtitan_ops`)."""
    return rms_norm_fp32_fwd(name, r, h, d) if shape.norm_fp32 else [mem(name, 2 * r * h * d)]


def _norm_bwd(shape: BlockShape, name: str, r: int, h: int, d: int) -> list[Kernel]:
    """The backward of :func:`_norm_fwd` (the fused kernel's: ``3 r h d``)."""
    if shape.norm_fp32:
        return rms_norm_fp32_bwd(name, r, h, d)
    return [mem(f"{name}_bwd", 3 * r * h * d)]


def _qk_width(shape: BlockShape, t: int, tp: int) -> int:
    """Elements of a rank's Q and K: ``t*(a/tp + max(1, kv/tp))*hd``."""
    return t * (shape.heads // tp + max(1, shape.kv // tp)) * shape.hd


def mlp_half_fwd(
    shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> list[Kernel]:
    """The second half of :func:`block_fwd`: norm, MLP, dropout, residual."""
    h, f = shape.hidden, shape.ffn_hidden
    t, r = _tokens(shape, b, tp, sp, cp)
    gemms = {name: gemm(name, t, n, k, d) for name, k, n in _linears(shape, tp)}
    out = _norm_fwd(shape, "norm2", r, h, d)
    out += [gemms[n] for n in ("gate", "up") if n in gemms]
    out.append(mem("act", 2 * t * f // tp * d))
    if shape.gated:
        out.append(mem("gate_mul", 3 * t * f // tp * d))
    out.append(gemms["down"])
    return out + _dropout_residual("mlp", r, h, d, shape.dropout, shape.fused_dropout_add)


def _dropout_residual(
    tag: str, t: int, h: int, d: int, dropout: bool, fused: bool = False
) -> list[Kernel]:
    """The hidden dropout and residual add over ``t x h`` elements of ``d`` bytes.

    Eager: a dropout kernel (reads ``x``, writes the output and a 1-byte mask: ``(2d + 1)``
    bytes per element) and the add (reads two, writes one: ``3d``). ``fused`` (with dropout):
    one kernel reading ``x`` and the residual and writing the sum and the mask, ``(3d + 1)``
    bytes per element. Megatron-DeepSpeed runs the fused form by default
    (microsoft/Megatron-DeepSpeed@f4157be): ``--no-bias-dropout-fusion`` is not given
    (``megatron/arguments.py`` l.907-909), ``ParallelTransformerLayer.forward`` calls the
    TorchScript ``bias_dropout_add_fused_train`` after the attention and the MLP
    (``megatron/model/transformer.py`` l.1363-1378, l.1454), and ``pretrain`` calls
    ``set_jit_fusion_options`` (``megatron/training.py`` l.140), which for torch >= 1.10 turns
    on nvFuser and warms the function up for the forward and the recompute
    (``megatron/initialize.py`` l.318-388).
    Assumption: nvFuser emits the add, dropout and add as one kernel with the mask its only
    extra output (the bias is ``h`` elements: not counted). The backward is unchanged (the
    dropout's gradient reads the gradient and the mask; the residual's passes through).
    """
    if dropout and fused:
        return [mem(f"{tag}_dropout_add", (3 * d + 1) * t * h)]
    drop = [mem(f"{tag}_dropout", (2 * d + 1) * t * h)] if dropout else []
    return drop + [mem(f"{tag}_residual", 3 * t * h * d)]


def block_bwd(
    shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> tuple[list[Kernel], list[Kernel]]:
    """Backward kernels of one block: ``(input_gradient, weight_gradient)`` (module doc), on
    one of ``tp`` tensor-parallel and ``cp`` context-parallel ranks (as :func:`block_fwd`).

    Raises:
        ValueError: as :func:`block_fwd`.
    """
    mlp_in, mlp_w = mlp_half_bwd(shape, b, d, tp, sp, cp)
    attn_in, attn_w = attention_half_bwd(shape, b, d, tp, sp, cp)
    return mlp_in + attn_in, attn_w + mlp_w


def mlp_half_bwd(
    shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> tuple[list[Kernel], list[Kernel]]:
    """The MLP half of :func:`block_bwd`: ``(input_gradient, weight_gradient)``."""
    h, f = shape.hidden, shape.ffn_hidden
    t, r = _tokens(shape, b, tp, sp, cp)
    lin = [x for x in _linears(shape, tp) if x[0] in ("gate", "up", "down")]
    dx = {name: gemm(f"d_{name}_in", t, k, n, d) for name, k, n in lin}
    dw = [gemm(f"d_{name}_w", k, n, t, d) for name, k, n in lin]
    drop = [mem("dropout_bwd", (2 * d + 1) * r * h)] if shape.dropout else []
    out = drop + [dx["down"]]
    if shape.gated:
        out.append(mem("gate_mul_bwd", 5 * t * f // tp * d))
    out.append(mem("act_bwd", 3 * t * f // tp * d))
    out += [dx[n] for n in ("gate", "up") if n in dx]
    out += _norm_bwd(shape, "norm2", r, h, d) + [mem("residual_grad_add", 3 * r * h * d)]
    return out, dw


def attention_half_bwd(
    shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> tuple[list[Kernel], list[Kernel]]:
    """The attention half of :func:`block_bwd`: ``(input_gradient, weight_gradient)``."""
    s, h, a, q = shape.seq_len, shape.hidden, shape.heads, shape.heads * shape.hd
    t, r = _tokens(shape, b, tp, sp, cp)
    lin = [x for x in _linears(shape, tp) if x[0] not in ("gate", "up", "down")]
    dx = {name: gemm(f"d_{name}_in", t, k, n, d) for name, k, n in lin}
    dw = [gemm(f"d_{name}_w", k, n, t, d) for name, k, n in lin]
    out = [mem("dropout_bwd", (2 * d + 1) * r * h)] if shape.dropout else []
    if shape.bias:  # the output projection's bias gradient, a sum over the tokens
        out.append(mem("attn_proj_bias_bwd", r * h * d))
    out.append(dx["proj"])
    out += attention_bwd(
        shape.attention,
        b,
        s // cp,
        q // tp,
        a // tp,
        d,
        causal=shape.causal,
        dropout=shape.dropout,
        kv=s,
        window=shape.window,
    )
    k = t * max(1, shape.kv // tp) * shape.hd
    if shape.kv_repeat:
        out += kv_repeat_bwd("k", k, shape.heads // shape.kv, d)
        out += kv_repeat_bwd("v", k, shape.heads // shape.kv, d)
    if shape.rotary and shape.rope_unfused:
        out += rope_bwd("rotary_q", t * q // tp, d) + rope_bwd("rotary_k", k, d)
    elif shape.rotary and shape.rope_complex:
        out += rope_complex_bwd("rotary_q", t * q // tp, s // cp, shape.hd, d)
        out += rope_complex_bwd("rotary_k", k, s // cp, shape.hd, d)
    elif shape.rotary:
        out += [mem("rotary_q_bwd", 2 * t * q // tp * d), mem("rotary_k_bwd", 2 * k * d)]
    if shape.qk_norm:
        out.append(mem("qk_norm_bwd", 3 * _qk_width(shape, t, tp) * d))
    out += [dx[n] for n in ("qkv", "q", "k", "v") if n in dx]
    out += _norm_bwd(shape, "norm1", r, h, d) + [mem("residual_grad_add", 3 * r * h * d)]
    return out, dw


@dataclass(frozen=True)
class BlockTimes:
    """Modelled seconds of one block for one micro-batch.

    Attributes:
        fwd: forward.
        bwd_input: input-gradient part of the backward ("I").
        bwd_weight: weight-gradient part ("W").
    """

    fwd: PhaseTime
    bwd_input: PhaseTime
    bwd_weight: PhaseTime

    @property
    def total_s(self) -> float:
        """Forward plus backward seconds."""
        return self.fwd.total_s + self.bwd_input.total_s + self.bwd_weight.total_s


def block_times(
    shape: BlockShape,
    b: int,
    spec: ComputeSpec,
    dtype: str,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
) -> BlockTimes:
    """Forward and backward seconds of one block at micro-batch ``b`` on ``spec``, on one of
    ``tp`` tensor-parallel ranks (``sp``: sequence parallelism) and ``cp`` context-parallel
    ranks; communication excluded.

    Raises:
        ValueError: ``b < 1``, unknown dtype, or ``tp``/``cp`` as :func:`block_fwd`.
    """
    if b < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {b}")
    d = 4 if dtype in ("fp32", "float32") else 2
    bwd_in, bwd_w = block_bwd(shape, b, d, tp, sp, cp)
    return BlockTimes(
        phase_time(block_fwd(shape, b, d, tp, sp, cp), spec, dtype),
        phase_time(bwd_in, spec, dtype),
        phase_time(bwd_w, spec, dtype),
    )


__all__ = [
    "LLAMA2_7B",  # re-exported: sim.compute.block_shape
    "ROW_PARALLEL",
    "BlockShape",  # re-exported: sim.compute.block_shape
    "BlockTimes",
    "attention_half_bwd",
    "attention_half_fwd",
    "block_bwd",
    "block_fwd",
    "block_times",
    "mlp_half_bwd",
    "mlp_half_fwd",
]

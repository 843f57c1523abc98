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

from sim.compute.attention import IMPLEMENTATIONS, attention_bwd, attention_fwd
from sim.compute.device import ComputeSpec
from sim.compute.kernels import Kernel, PhaseTime, gemm, mem, phase_time


@dataclass(frozen=True)
class BlockShape:
    """Shape and variant of a transformer block.

    Attributes:
        hidden: ``h``.
        heads: ``a`` (``h % a == 0``).
        seq_len: ``s``.
        ffn_hidden: FFN width ``f`` (``4h`` for GPT-2/BERT, 11008 for Llama-2-7B).
        gated: SwiGLU MLP (gate and up projections) instead of one up projection.
        fused_qkv: one QKV GEMM instead of three.
        rotary: rotary position embedding on Q and K.
        dropout: dropout after attention probabilities, projection and MLP.
        causal: causal mask (flash attention skips the masked half).
        attention: ``"flash"`` or ``"math"``.
    """

    hidden: int
    heads: int
    seq_len: int
    ffn_hidden: int
    gated: bool = False
    fused_qkv: bool = True
    rotary: bool = False
    dropout: bool = True
    causal: bool = True
    attention: str = "math"

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "seq_len", "ffn_hidden"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.attention not in IMPLEMENTATIONS:
            raise ValueError(
                f"attention must be one of {', '.join(IMPLEMENTATIONS)}, got {self.attention!r}"
            )


LLAMA2_7B = BlockShape(
    hidden=4096,
    heads=32,
    seq_len=2048,
    ffn_hidden=11008,
    gated=True,
    fused_qkv=False,
    rotary=True,
    dropout=False,
    causal=True,
    attention="flash",
)
"""A Llama-2-7B decoder layer (Touvron et al. 2023, Table 1 / HF config: hidden 4096, 32 heads,
intermediate 11008, SwiGLU, RMSNorm, RoPE, no dropout) at sequence 2048, with torch SDPA."""


ROW_PARALLEL = ("proj", "down")
"""GEMMs split along their input under tensor parallelism (Megatron's RowParallelLinear); the
others (QKV, gate, up) are split along their output (ColumnParallelLinear): Shoeybi et al.,
arXiv:1909.08053, §3."""


def _linears(shape: BlockShape, tp: int = 1) -> list[tuple[str, int, int]]:
    """``(name, in, out)`` of every weight GEMM of the block, in forward order, as one of
    ``tp`` tensor-parallel ranks holds it (column-parallel: ``out / tp``, row-parallel
    :data:`ROW_PARALLEL`: ``in / tp``)."""
    h, f = shape.hidden, shape.ffn_hidden
    qkv = [("qkv", h, 3 * h)] if shape.fused_qkv else [("q", h, h), ("k", h, h), ("v", h, h)]
    mlp = [("gate", h, f), ("up", h, f)] if shape.gated else [("up", h, f)]
    full = qkv + [("proj", h, h)] + mlp + [("down", f, h)]
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


def block_fwd(shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False) -> list[Kernel]:
    """Forward kernels of one block for a micro-batch of ``b`` (module doc), on one of ``tp``
    tensor-parallel ranks: GEMMs at their split sizes, the attention core over ``a / tp`` heads;
    norms, dropout and residuals over all ``b*s`` tokens, or ``b*s / tp`` with sequence
    parallelism ``sp`` (Korthikanti et al., arXiv:2205.05198, §4.2.2).

    Raises:
        ValueError: ``tp`` does not divide the heads or FFN width (or ``s`` with ``sp``).
    """
    _check_tp(shape, tp, sp)
    s, h, a, f = shape.seq_len, shape.hidden, shape.heads, shape.ffn_hidden
    t = b * s
    r = t // tp if sp else t  # tokens of the replicated (or sequence-split) element-wise ops
    gemms = {name: gemm(name, t, n, k, d) for name, k, n in _linears(shape, tp)}
    out = [mem("norm1", 2 * r * h * d)]
    out += [gemms[n] for n in ("qkv", "q", "k", "v") if n in gemms]
    if shape.rotary:
        out += [mem("rotary_q", 2 * t * h // tp * d), mem("rotary_k", 2 * t * h // tp * d)]
    out += attention_fwd(
        shape.attention, b, s, h // tp, a // tp, d, causal=shape.causal, dropout=shape.dropout
    )
    out.append(gemms["proj"])
    out += _dropout_residual("attn", r, h, d, shape.dropout)
    out.append(mem("norm2", 2 * r * h * d))
    out += [gemms[n] for n in ("gate", "up") if n in gemms]
    out.append(mem("act", 2 * t * f // tp * d))
    if shape.gated:
        out.append(mem("gate_mul", 3 * t * f // tp * d))
    out.append(gemms["down"])
    out += _dropout_residual("mlp", r, h, d, shape.dropout)
    return out


def _dropout_residual(tag: str, t: int, h: int, d: int, dropout: bool) -> list[Kernel]:
    drop = [mem(f"{tag}_dropout", (2 * d + 1) * t * h)] if dropout else []
    return drop + [mem(f"{tag}_residual", 3 * t * h * d)]


def block_bwd(
    shape: BlockShape, b: int, d: int, tp: int = 1, sp: bool = False
) -> tuple[list[Kernel], list[Kernel]]:
    """Backward kernels of one block: ``(input_gradient, weight_gradient)`` (module doc), on
    one of ``tp`` tensor-parallel ranks (as :func:`block_fwd`).

    Raises:
        ValueError: as :func:`block_fwd`.
    """
    _check_tp(shape, tp, sp)
    s, h, a, f = shape.seq_len, shape.hidden, shape.heads, shape.ffn_hidden
    t = b * s
    r = t // tp if sp else t
    dx = {name: gemm(f"d_{name}_in", t, k, n, d) for name, k, n in _linears(shape, tp)}
    dw = [gemm(f"d_{name}_w", k, n, t, d) for name, k, n in _linears(shape, tp)]
    drop = [mem("dropout_bwd", (2 * d + 1) * r * h)] if shape.dropout else []
    out = drop + [dx["down"]]
    if shape.gated:
        out.append(mem("gate_mul_bwd", 5 * t * f // tp * d))
    out.append(mem("act_bwd", 3 * t * f // tp * d))
    out += [dx[n] for n in ("gate", "up") if n in dx]
    out += [mem("norm2_bwd", 3 * r * h * d), mem("residual_grad_add", 3 * r * h * d)]
    out += drop + [dx["proj"]]
    out += attention_bwd(
        shape.attention, b, s, h // tp, a // tp, d, causal=shape.causal, dropout=shape.dropout
    )
    if shape.rotary:
        out += [mem("rotary_q_bwd", 2 * t * h // tp * d), mem("rotary_k_bwd", 2 * t * h // tp * d)]
    out += [dx[n] for n in ("qkv", "q", "k", "v") if n in dx]
    out += [mem("norm1_bwd", 3 * r * h * d), mem("residual_grad_add", 3 * r * h * d)]
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
    shape: BlockShape, b: int, spec: ComputeSpec, dtype: str, tp: int = 1, sp: bool = False
) -> BlockTimes:
    """Forward and backward seconds of one block at micro-batch ``b`` on ``spec``, on one of
    ``tp`` tensor-parallel ranks (``sp``: sequence parallelism); communication excluded.

    Raises:
        ValueError: ``b < 1``, unknown dtype, or ``tp`` as :func:`block_fwd`.
    """
    if b < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {b}")
    d = 4 if dtype in ("fp32", "float32") else 2
    bwd_in, bwd_w = block_bwd(shape, b, d, tp, sp)
    return BlockTimes(
        phase_time(block_fwd(shape, b, d, tp, sp), spec, dtype),
        phase_time(bwd_in, spec, dtype),
        phase_time(bwd_w, spec, dtype),
    )

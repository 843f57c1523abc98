"""Fused attention with 64-wide heads on Blackwell: slower per FLOP than with 128-wide heads.

GPT-OSS's heads are 64 wide (``head_dim`` 64; its full-attention layers run cuDNN's causal
kernel over the whole sequence). :mod:`sim.compute.measured` times a Blackwell flash-attention
kernel from SimuMax's B200 table, which measures head dims 128 and 160 only; a 64-wide head was
looked up as the nearest, 128. On Blackwell the two do not run at the same FLOP rate: per
score the kernel does ``4 x head_dim`` matmul FLOPs in the forward but one exponential
whatever the width, and fifth-generation tensor cores doubled the matmul rate per SM while the
exponential unit did not (Together AI's FlashAttention-4 paper, arXiv:2603.05451: "tensor core
throughput doubles but memory bandwidth and exponential units scale more slowly"), so a
64-wide head spends half the matmul time per exponential of a 128-wide one and the forward is
bound by its exponentials and softmax.

**Measurement.** Dao-AILab/flash-attention#2605 (merged; the benchmark tables of its first
comment, ``benchmarks/benchmark_attn.py``: BF16, ``batch x seqlen`` = 32K tokens, heads x
head dim = 2048, so both widths do the same FLOPs; MFU given against 2.25 PFLOPS, the dense
BF16 peak of a B200), FlashAttention-4's causal forward:

====== =============== ================ ======
seqlen head dim 64     head dim 128     ratio
====== =============== ================ ======
1024   384 TFLOPS      660 TFLOPS       0.582
2048   561             899              0.624
4096   708             1062             0.667
====== =============== ================ ======

(A second run in the same thread, MFU against 2.5 PFLOPS, gives 0.582, 0.609, 0.648.)
:func:`hd64_forward_ratio` interpolates the ratio in ``log2`` of the sequence and clamps it
outside 1024-4096 (the thread's 128-wide causal rows beyond 4096 are not given; its
non-causal ratio is flat from 4096 to 16384, 0.714 / 0.709 / 0.695, so the clamp is taken as
flat too: an assumption).

**Use.** :func:`narrow_head_ratio` is the one lookup both timing paths make:
:func:`sim.compute.measured.attention_efficiency` multiplies the B200 table's forward
efficiency of a kernel of head dim at most :data:`NARROW_HEAD_DIM` by it; on GB300,
which has no B200 table, :func:`sim.compute.cudnn_attention.narrow_gb300_rate_flops` multiplies
cuDNN's GB300 BF16 causal table by it (before, GB300 timed these kernels at its preset's flat
``attention_efficiency``).
Assumptions: cuDNN's kernel (what Transformer Engine runs) has FlashAttention-4's ratio (the
same thread's cuDNN forward at head dim 64, causal, 4096: 977 TFLOPS against FA4's 917, within
7 %); the backward is unchanged (no Blackwell measurement of it at head dim 64 was found; it
does five matmuls per exponential instead of two, so it is less bound by them); B300 keeps
the B200 ratio as it keeps the B200 table (Blackwell Ultra doubles the exponential rate, so this
is an upper bound of its cost there, as the table is a lower bound of its speed).
"""

from __future__ import annotations

from sim.compute.log_interp import log2_interp

NARROW_HEAD_DIM = 90
"""Head dims up to this are the measured 64-wide case (nearer 64 than 128 in ``log2``, whose
midpoint is 90.5)."""
HD64_FWD_RATIO = ((1024.0, 384 / 660), (2048.0, 561 / 899), (4096.0, 708 / 1062))
"""``(seqlen, forward TFLOPS at head dim 64 / at 128)``, causal, FlashAttention-4 on B200
(Dao-AILab/flash-attention#2605; module doc)."""


def hd64_forward_ratio(seq: float) -> float:
    """The 64-wide head's causal forward FLOP rate over the 128-wide one's at ``seq`` keys
    (module doc): interpolated in ``log2 seq``, clamped to the measured lengths.

    Example:
        >>> round(hd64_forward_ratio(4096), 3), round(hd64_forward_ratio(8192), 3)
        (0.667, 0.667)
    """
    return log2_interp(HD64_FWD_RATIO, seq)


def narrow_head_ratio(head_dim: float, seq: float, backward: bool) -> float:
    """Factor on a 128-wide causal attention kernel's FLOP rate for a kernel of ``head_dim``
    (elements per head) at ``seq`` keys: :func:`hd64_forward_ratio` for a forward with heads
    at most :data:`NARROW_HEAD_DIM` wide, else 1.0 (a wider head, or any backward: module doc,
    the backward is unchanged, an assumption). The one lookup both the B200 table
    (:mod:`sim.compute.measured`) and cuDNN's GB300 table (:mod:`sim.compute.cudnn_attention`)
    make. Source: Dao-AILab/flash-attention#2605 (module doc).

    Example:
        >>> round(narrow_head_ratio(64, 4096, False), 3), narrow_head_ratio(64, 4096, True)
        (0.667, 1.0)
        >>> narrow_head_ratio(128, 4096, False)
        1.0
    """
    if head_dim > NARROW_HEAD_DIM or backward:
        return 1.0
    return hd64_forward_ratio(seq)

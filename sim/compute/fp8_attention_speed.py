"""The full causal FP8 attention backward at head dim 64 on Blackwell, at cuDNN's measured speed.

With FP8 attention (Transformer Engine's ``fp8_dpa``, Megatron-Bridge's
``fp8_dot_product_attention``: the GB200/GB300 MXFP8 recipes of GPT-OSS 120B from 26.06 and of
Nemotron 3 Super) the attention core runs cuDNN's FP8 (or MXFP8) SDPA kernel
(:mod:`sim.compute.precision_rules`, :func:`~sim.compute.precision_rules.attention_format`). A
windowed kernel is timed by :mod:`sim.compute.swa_speed`, a full causal one at head dim 128 by
cuDNN's measured causal table (:mod:`sim.compute.cudnn_attention`: its FP8 / BF16 ratio). cuDNN's
own SDPA training benchmark (NVIDIA/cudnn-frontend@3929da2 ``benchmark/sdpa_benchmark_training``,
cuDNN backend 9.22, non-deterministic backward, ``top_left`` causal mask, inputs already
quantized: the casts around the kernel are not in these times) measures no full causal kernel at
head dim 64; this module times its backward from the windowed one:

* **Head dim 64** (``configs/gpt_oss.py``: 2 samples x 128 heads of 64, window 128; results
  ``results/gpt_oss/gb200/gpt_oss_20260424_100011.csv``, ``gb300/gpt_oss_20260424_100022.csv``):
  only windowed kernels are measured. Their FP8 and MXFP8 backward does not skip the tiles
  outside the window: its time grows with the square of the sequence (MXFP8 on GB200 0.642,
  2.080, 7.427, 27.940, 108.370 ms at 2K to 32K). It does skip the tiles above the diagonal:
  counted over the causal half, the 32K MXFP8 backward runs at 811 TFLOPS, against 1480 for the
  same kernel with 128-wide heads and no mask at all (the llama table), which a 64-wide head,
  slower per FLOP than a 128-wide one on Blackwell (:mod:`sim.compute.hd64_attention`), cannot
  exceed; counted over the whole square it would be 1622. So the windowed FP8 backward visits
  exactly the tiles a full causal backward visits, each with both of its GEMMs (the mask is
  applied after ``Q K^T``), and a full causal FP8 backward of the same shape takes at least its
  measured time: :func:`fp8_hd64_bwd_rate_flops` times it at the causal backward's FLOPs
  (``2.5 x 4 x b x s^2/2 x heads x 64``, :func:`sim.compute.attention.attention_bwd`) over the
  measured time (:data:`HD64_WINDOW_BWD_MS`), i.e. 661 TFLOPS at 4096 on GB200 where the 16-bit
  table gives 933. Assumption: the masked tiles cost what full ones do (a lower bound of the
  full kernel's time). The FP8 forward at head dim 64 has no causal measurement: it keeps the
  16-bit speed (an assumption; the windowed forward runs as fast in FP8 as in BF16, 161
  against 161 TFLOPS at 4096).

Which GPUs: GB200's table also times B200 and GB300's B300 (as :mod:`sim.compute.swa_speed`
carries them: the same silicon, an assumption). Other head dims, windows and GPUs: None (the
16-bit speed stays).
"""

from __future__ import annotations

from sim.compute.cudnn_attention import table_of
from sim.compute.log_interp import log2_interp
from sim.hardware.gpu_compute import ComputeSpec

HD64_WINDOW_BWD_MS: dict[str, dict[str, list[tuple[float, float]]]] = {
    "GB200": {
        "fp8": [(2048, 0.536), (4096, 1.731), (8192, 6.176), (16384, 23.231), (32768, 90.348)],
        "mxfp8": [(2048, 0.642), (4096, 2.080), (8192, 7.427), (16384, 27.940), (32768, 108.370)],
    },
    "GB300": {
        "fp8": [(2048, 0.467), (4096, 1.480), (8192, 5.189), (16384, 19.354), (32768, 74.763)],
        "mxfp8": [(2048, 0.581), (4096, 1.871), (8192, 6.648), (16384, 24.996), (32768, 96.913)],
    },
}
"""Milliseconds of cuDNN's windowed (128) FP8 / MXFP8 backward, 2 samples x 128 heads of 64, by
sequence (cudnn-frontend@3929da2 gpt_oss results; module doc)."""
HD64_BENCH_HEADS = 2 * 128
"""Samples x heads of the head-dim-64 benchmark (``configs/gpt_oss.py``, batch 2)."""


def causal_bwd_flops(seq: float, heads: float, head_dim: int) -> float:
    """FLOPs of a causal flash-attention backward over ``seq`` queries and keys, ``heads``
    samples x heads of ``head_dim``: ``2.5 x 4 x seq^2/2 x heads x head_dim``
    (:func:`sim.compute.attention.attention_bwd`'s count).

    Example:
        >>> causal_bwd_flops(4096, 256, 64) / 1e12
        1.37438953472
    """
    return 2.5 * 4.0 * seq * seq * 0.5 * heads * head_dim


def hd64_causal_bwd_rate_flops(table: str, fmt: str, seq: float) -> float | None:
    """FLOP/s of a full causal FP8 backward at head dim 64 (module doc): the causal count of
    the benchmark's shape over the measured windowed backward's time, interpolated in ``log2
    seq`` (clamped); None without a measurement of ``fmt`` on ``table``.

    Example: MXFP8 on GB200 at 4096 tokens, 1.374 TFLOP in 2.080 ms.
        >>> round(hd64_causal_bwd_rate_flops("GB200", "mxfp8", 4096) / 1e12, 1)
        660.8
    """
    times = HD64_WINDOW_BWD_MS.get(table, {}).get(fmt)
    if times is None:
        return None
    rates = [(s, causal_bwd_flops(s, HD64_BENCH_HEADS, 64) / (ms * 1e-3)) for s, ms in times]
    return log2_interp(rates, seq)


def fp8_hd64_bwd_rate_flops(kern, spec: ComputeSpec) -> float | None:
    """FLOP/s of a full (not windowed) causal FP8 attention backward at head dim 64
    (``kern.precision`` its format, ``kern.k`` its head dim, ``kern.n`` its keys; ``_bwd`` names
    the backward) on ``spec`` (module doc), or None where no measurement covers it (another
    head dim, a forward, a window, a 16-bit kernel, an unmeasured GPU or format: the 16-bit rate
    stays).
    """
    table = table_of(spec)
    if table is None or not kern.precision or kern.window or not kern.n:
        return None
    if kern.k != 64 or not kern.name.endswith("_bwd"):
        return None
    return hd64_causal_bwd_rate_flops(table, kern.precision, float(kern.n))

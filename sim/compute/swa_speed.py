"""Sliding-window attention as cuDNN runs it on Blackwell, measured (GPT-OSS's windowed layers).

A windowed layer's core does only the band's work (:func:`sim.compute.attention.score_fraction`),
but its kernel does not run that work at the causal kernel's rate: with a 128-key window and
64-wide heads each query tile meets one or two key tiles, and the kernel is bound by its tile
loop, not by the tensor cores. cuDNN's own SDPA training benchmark measures it on GPT-OSS's
shape (NVIDIA/cudnn-frontend@3929da2 ``benchmark/sdpa_benchmark_training/configs/gpt_oss.py``:
causal ``top_left`` mask, ``sliding_window_size`` 128, head dim 64, batch 2 x 128 heads, results
``results/gpt_oss/gb200/gpt_oss_20260424_100011.csv`` and ``results/gpt_oss/gb300/
gpt_oss_20260424_100022.csv``, cuDNN backend 9.22, non-deterministic backward, as Transformer
Engine runs it by default). Its TFLOPS count the band as pipesim does
(``benchmark_single_sdpa.py`` ``flops``: ``W(W+1)/2 + (S - W) W`` scores per head, forward
2 GEMMs, backward 5, i.e. 2.5x), so the table gives the kernel's achieved FLOP/s by sequence
length; between lengths it is interpolated in ``log2`` (clamped):

* forward: 153-167 TFLOPS on GB200 (160-173 on GB300) up to 16K tokens, 7 % of the dense BF16
  peak, where the causal table puts a 4K kernel near 50 %;
* backward: 176-188 (184-200) TFLOPS;
* FP8 attention (Transformer Engine's ``fp8_dpa``; with an MXFP8 training recipe TE runs MXFP8
  attention unless ``NVTE_DPA_FP8_RECIPE`` says otherwise: NVIDIA/TransformerEngine@4220403
  ``dot_product_attention.py`` lines 100-170): the forward runs as fast as BF16, but the
  backward does not skip the tiles outside the window: its time grows with the square of the
  sequence (MXFP8 on GB200 0.64 ms at 2K, 2.08 ms at 4K, 7.43 ms at 8K, against 0.24, 0.47 and
  0.91 ms in BF16) and at 4K it is 4.5x the BF16 backward.

Which GPUs: GB200's table also times B200 (the same silicon at a lower power limit: an
assumption, as :mod:`sim.compute.measured` carries B200 tables to GB200), GB300's times B300
(Blackwell Ultra, likewise). Only the measured shape is covered: window 128 and head dim 64 (the
benchmark runs 128 query and key heads, GPT-OSS 64 query heads over 8 key-value groups: the same
``samples x heads x queries`` of work, with less K/V to read; the kernel is not bound by its
bytes here, 2.6 TB/s of the 8 TB/s). The benchmark has no attention sink: GPT-OSS's learned
sink logit per head (one more term in each row's softmax denominator, cuDNN's ``sink_token``)
is assumed to cost nothing more. The rows were measured at cuDNN 9.22; the containers of the
Bridge releases carry their own cuDNN (release 26.06.01's GPT-OSS rows are published with a
note of a known cuDNN performance regression, NVIDIA/cudnn-frontend#256: not attention but the
fused grouped MLP's dGLU kernel, :mod:`sim.compute.dglu_regression`).
"""

from __future__ import annotations

from sim.compute.log_interp import log2_interp
from sim.compute.measured import SIXTEEN_BIT
from sim.hardware.gpu_compute import ComputeSpec

WINDOW = 128
"""The measured window (keys each query attends)."""
HEAD_DIM = 64
"""The measured head dim."""

# {table: {format: {pass: [(sequence, TFLOPS), ...]}}}: cudnn-frontend@3929da2 (module doc).
_TABLES: dict[str, dict[str, dict[str, list[tuple[float, float]]]]] = {
    "GB200": {
        "bf16": {
            "fwd": [(2048, 153), (4096, 161), (8192, 165), (16384, 167), (32768, 104)],
            "bwd": [(2048, 176), (4096, 182), (8192, 187), (16384, 188), (32768, 186)],
        },
        "fp8": {
            "fwd": [(2048, 165), (4096, 173), (8192, 177), (16384, 179), (32768, 179)],
            "bwd": [(2048, 78), (4096, 49), (8192, 28), (16384, 15), (32768, 8)],
        },
        "mxfp8": {
            "fwd": [(2048, 153), (4096, 161), (8192, 164), (16384, 166), (32768, 168)],
            "bwd": [(2048, 65), (4096, 41), (8192, 23), (16384, 12), (32768, 6)],
        },
    },
    "GB300": {
        "bf16": {
            "fwd": [(2048, 160), (4096, 167), (8192, 172), (16384, 173), (32768, 108)],
            "bwd": [(2048, 184), (4096, 191), (8192, 198), (16384, 200), (32768, 199)],
        },
        "fp8": {
            "fwd": [(2048, 193), (4096, 203), (8192, 208), (16384, 211), (32768, 212)],
            "bwd": [(2048, 89), (4096, 57), (8192, 33), (16384, 18), (32768, 9)],
        },
        "mxfp8": {
            "fwd": [(2048, 182), (4096, 194), (8192, 200), (16384, 203), (32768, 204)],
            "bwd": [(2048, 72), (4096, 45), (8192, 26), (16384, 14), (32768, 7)],
        },
    },
}
TABLE_OF = (("GB300", "GB300"), ("B300", "GB300"), ("GB200", "GB200"), ("B200", "GB200"))
"""GPU model prefix -> the table that times it (module doc)."""


def _table(spec: ComputeSpec) -> str | None:
    name = spec.model.upper()
    return next((t for prefix, t in TABLE_OF if name.startswith(prefix)), None)


def windowed_rate_flops(kern, spec: ComputeSpec, dtype: str) -> float | None:
    """Achieved FLOP/s of a windowed flash-attention kernel (``kern.window`` keys, head dim
    ``kern.k``, ``kern.n`` keys in all; ``_bwd`` names the backward; ``kern.precision`` FP8
    attention's format, else ``dtype``) on ``spec`` (module doc), or None where no measurement
    covers the GPU, the window, the head dim or the format.

    Example: a 4096-token forward on a GB200 in BF16 runs at 161 TFLOPS.
    """
    table = _table(spec)
    fmt = kern.precision or ("bf16" if dtype in SIXTEEN_BIT else dtype)
    if table is None or kern.window != WINDOW or kern.k != HEAD_DIM or not kern.n:
        return None
    by_pass = _TABLES[table].get(fmt)
    if by_pass is None:
        return None
    points = by_pass["bwd" if kern.name.endswith("_bwd") else "fwd"]
    return log2_interp(points, float(kern.n)) * 1e12

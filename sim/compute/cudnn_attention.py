"""Causal attention at head dim 128 as cuDNN runs it on GB200 and GB300, measured, by format
(and 64-wide heads on GB300 from that table: "64-wide heads on GB300" below).

cuDNN's SDPA training benchmark measures its fused attention on Llama 3.1's shape
(NVIDIA/cudnn-frontend@3929da2 ``benchmark/sdpa_benchmark_training/results/llama3.1/gb200/
llama3.1_20260424_100750.csv`` and ``results/llama3.1/gb300/llama3.1_20260424_100757.csv``:
causal ``top_left`` mask, head dim 128, batch 2 x 64 query heads over 8 key-value heads (grouped
query attention, 8 query heads per key-value head: Qwen3-30B-A3B's 32/4 alike), sequences 2K-32K,
non-deterministic backward as Transformer Engine runs it by default, cuDNN backend 9.22). Its
TFLOPS count the causal half as pipesim does (``benchmark_single_sdpa.py`` ``flops``: the
``tril`` elements x 2 x (``d_qk + d_vo``) forward, 2.5x that backward;
:mod:`sim.compute.attention`), so the table is the kernel's achieved FLOP/s by format
(``bf16``, ``fp8`` current scaling, ``mxfp8``: Transformer Engine's ``fp8_dpa``, which an MXFP8
training recipe runs as MXFP8 attention: :mod:`sim.compute.swa_speed`) and pass. At 4K tokens
on GB300: BF16 1703 / 1248 TFLOPS forward / backward, MXFP8 2272 / 1143: FP8 attention speeds
the forward and slows the backward.

**Use** (:func:`rate_flops`):

* GB300: the table as measured. Below the measured parallelism (``samples x heads x
  queries / keys`` under 128, the benchmark's 2 x 64) it is scaled by the B200 table's own
  fall with fewer heads at that length (:func:`sim.compute.measured.causal_head_scale`: query
  tiles set the efficiency there, as that table's module says). GB300 has no other measured
  attention (the preset's flat ``attention_efficiency`` stood for it).
* B200, GB200, B300 in an FP8 format: their attention is timed by the SimuMax B200 table, which
  is BF16 (:mod:`sim.compute.measured`); an FP8 kernel runs at that rate times the measured
  ratio of the format to BF16 at that length on the GPU of the same generation (GB200's for B200
  and GB200, GB300's for B300). In BF16 they keep the B200 table (None here).

Only head dim 128 and no window are measured (windows: :mod:`sim.compute.swa_speed`); between
lengths ``log2`` interpolation, clamped. Every number is a kernel-level measurement; none is
fitted to an iteration time.

**64-wide heads on GB300** (GPT-OSS's full-attention layers): the B200 family times them by the
B200 table times FlashAttention-4's measured forward ratio of 64- to 128-wide heads
(:mod:`sim.compute.hd64_attention`: 0.667 at 4K), but GB300 has no B200 table, so until now a
64-wide kernel there fell to the preset's flat ``attention_efficiency`` (0.70 of 2500 TFLOPS:
1750 TFLOPS both ways, above this table's own 128-wide BF16 kernel, 1703 / 1248 at 4K, which
the narrower head cannot exceed). :func:`rate_flops` now times it on GB300 as the B200 family is
timed: this table's BF16 rate at the kernel's length (and parallelism), the forward times
:func:`~sim.compute.hd64_attention.narrow_head_ratio`, the backward at the 128-wide rate
(:mod:`sim.compute.hd64_attention`'s assumption: no Blackwell measurement of a 64-wide backward).
An FP8 forward keeps that 16-bit speed (:mod:`sim.compute.fp8_attention_speed`'s assumption:
no causal FP8 measurement at head dim 64); an FP8 backward is that module's.
"""

from __future__ import annotations

from sim.compute.hd64_attention import NARROW_HEAD_DIM, narrow_head_ratio
from sim.compute.log_interp import log2_interp
from sim.compute.measured import SIXTEEN_BIT, attention_efficiency, causal_head_scale
from sim.hardware.gpu_compute import ComputeSpec

HEAD_DIM = 128
"""The measured head dim."""
MEASURED_HEADS = 128
"""Samples x query heads of every measured point (batch 2 x 64 heads)."""
SEQ = (2048, 4096, 8192, 16384, 32768)
"""The measured lengths (queries = keys) of every table here and in
:mod:`sim.compute.unmasked_attention`."""
# {table: {format: {pass: TFLOPS at SEQ}}}: cudnn-frontend@3929da2 (module doc), top_left.
_TFLOPS: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {
    "GB200": {
        "bf16": {"fwd": (1097, 1408, 1574, 1708, 1622), "bwd": (885, 1148, 1332, 1328, 1226)},
        "fp8": {"fwd": (1420, 1805, 2047, 2154, 2197), "bwd": (831, 1178, 1454, 1632, 1687)},
        "mxfp8": {"fwd": (1330, 1685, 1902, 1999, 2046), "bwd": (745, 1054, 1287, 1436, 1425)},
    },
    "GB300": {
        "bf16": {"fwd": (1373, 1703, 1856, 1915, 1953), "bwd": (967, 1248, 1435, 1507, 1490)},
        "fp8": {"fwd": (1954, 2532, 2897, 3054, 3108), "bwd": (944, 1396, 1781, 2035, 2128)},
        "mxfp8": {"fwd": (1751, 2272, 2570, 2727, 2785), "bwd": (811, 1143, 1404, 1563, 1590)},
    },
}
TABLE_OF = (("GB300", "GB300"), ("B300", "GB300"), ("GB200", "GB200"), ("B200", "GB200"))
"""GPU model prefix -> the table of its generation (module doc)."""


def table_of(spec: ComputeSpec) -> str | None:
    """The measured table (``GB200``, ``GB300``) that times ``spec``'s GPU (:data:`TABLE_OF`), or
    None for a GPU of another generation."""
    name = spec.model.upper()
    return next((t for prefix, t in TABLE_OF if name.startswith(prefix)), None)


def measured_tflops(table: str, fmt: str, phase: str, seq: float) -> float | None:
    """TFLOPS cuDNN measured on ``table`` (``GB200``, ``GB300``) in ``fmt`` for pass ``phase``
    (``fwd``, ``bwd``) at ``seq`` tokens (interpolated in ``log2``, clamped), or None for an
    unmeasured format.

    >>> measured_tflops("GB300", "mxfp8", "bwd", 4096)
    1143.0
    """
    return seq_tflops(_TFLOPS[table], fmt, phase, seq)


def seq_tflops(
    by_format: dict[str, dict[str, tuple[float, ...]]], fmt: str, phase: str, seq: float
) -> float | None:
    """TFLOPS of one measured table (``{format: {pass: TFLOPS at SEQ}}``) in ``fmt`` for pass
    ``phase`` at ``seq`` tokens, interpolated in ``log2`` and clamped; None for a format it has
    not. :func:`measured_tflops` and :mod:`sim.compute.unmasked_attention` read theirs so.

    Raises:
        KeyError: ``phase`` not in the format's passes.
    """
    by_pass = by_format.get(fmt)
    if by_pass is None:
        return None
    return log2_interp(list(zip(SEQ, by_pass[phase], strict=True)), seq)


def format_ratio(table: str, fmt: str, phase: str, seq: float) -> float | None:
    """cuDNN's ``fmt`` TFLOPS over its BF16 TFLOPS on ``table`` for ``phase`` at ``seq``
    tokens (each interpolated in ``log2``, clamped); None without a measurement of ``fmt``.

    Example: MXFP8 on GB200 at 8192 tokens.
        >>> round(format_ratio("GB200", "mxfp8", "fwd", 8192), 4), round(
        ...     format_ratio("GB200", "mxfp8", "bwd", 8192), 4)
        (1.2084, 0.9662)
    """
    own = measured_tflops(table, fmt, phase, seq)
    base = measured_tflops(table, "bf16", phase, seq)
    return None if own is None or base is None else own / base


def rate_flops(kern, spec: ComputeSpec, dtype: str) -> float | None:
    """Achieved FLOP/s of a causal flash-attention kernel (``m`` queries, ``n`` keys, head dim
    ``k``, ``batch`` samples x heads; ``_bwd`` names the backward; ``kern.precision`` FP8
    attention's format, else ``dtype``) on ``spec`` (module doc, "use"), or None where this
    table does not time it (another head dim, a window, an unmeasured GPU or format, a 16-bit
    kernel off GB300).

    Example: a GB300 backward in MXFP8 at 4K tokens over 256 heads runs at 1143 TFLOPS; a
    64-wide head on GB300 (:func:`narrow_gb300_rate_flops`).
    """
    table = table_of(spec)
    fmt = kern.precision or ("bf16" if dtype in SIXTEEN_BIT else dtype)
    if table is None or kern.window or not (kern.m and kern.n):
        return None
    if kern.k <= NARROW_HEAD_DIM:
        return narrow_gb300_rate_flops(kern, spec, dtype)
    if kern.k != HEAD_DIM:
        return None
    phase = "bwd" if kern.name.endswith("_bwd") else "fwd"
    seq, heads = float(kern.n), kern.batch * kern.m / kern.n
    own = measured_tflops(table, fmt, phase, seq)
    if own is None:
        return None
    if spec.model.upper().startswith("GB300"):
        return own * 1e12 * causal_head_scale(seq, heads, MEASURED_HEADS, phase == "bwd")
    if fmt == "bf16":
        return None  # the B200 table times it (sim.compute.measured)
    ratio = format_ratio(table, fmt, phase, seq)
    eff = attention_efficiency(kern, spec, "bf16")  # the B200 table's BF16 fraction
    if ratio is None or eff is None:
        return None
    return eff * spec.peak_flops("bf16") * ratio


def narrow_gb300_rate_flops(kern, spec: ComputeSpec, dtype: str) -> float | None:
    """FLOP/s of a causal, unwindowed flash-attention kernel with heads at most
    :data:`~sim.compute.hd64_attention.NARROW_HEAD_DIM` wide on GB300 (module doc, "64-wide
    heads on GB300"): the GB300 BF16 table at the kernel's length, scaled below the measured
    parallelism as :func:`rate_flops` scales it, times
    :func:`~sim.compute.hd64_attention.narrow_head_ratio` (the forward's 64/128 ratio); None
    off GB300 (the B200 table times it there), for an FP8 backward
    (:mod:`sim.compute.fp8_attention_speed`) and for a format other than 16 bits or FP8.

    Example: GB300, 4K tokens, 256 heads of 64: forward 1703 x 708 / 1062 = 1135.3 TFLOPS,
    backward 1248.
    """
    if not spec.model.upper().startswith("GB300") or kern.k > NARROW_HEAD_DIM:
        return None
    backward = kern.name.endswith("_bwd")
    if (kern.precision and backward) or (not kern.precision and dtype not in SIXTEEN_BIT):
        return None
    seq, heads = float(kern.n), kern.batch * kern.m / kern.n
    own = measured_tflops("GB300", "bf16", "bwd" if backward else "fwd", seq)
    assert own is not None  # the BF16 rows are always in the table
    ratio = narrow_head_ratio(kern.k, seq, backward)
    return own * 1e12 * ratio * causal_head_scale(seq, heads, MEASURED_HEADS, backward)

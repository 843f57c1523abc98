"""Kernel speeds measured on a GPU by published micro-benchmarks, where they exist.

The kernel model (:mod:`sim.compute.kernels`) times a kernel from its FLOPs and bytes at the
preset's achieved fractions of peak. For three kinds of kernels that depart from that roofline,
published measurements on the GPU say how fast they run, and this module gives them by shape
(None where no measurement covers the GPU or the dtype; the roofline then stands):

* **fused attention** by sequence length, heads and head dim:

  - B200 (and GB200, same silicon; and B300, below): MooreThreads/SimuMax@4dcaae5
    ``configs/system/b200_bf16_ceperm.json`` ``accelerator.op.sdp_fwd`` / ``sdp_bwd``, measured by
    ``simu_tools/efficency_test/test_fa_efficiency.py`` on the B200 node of SimuMax's published
    validation: Transformer Engine's ``DotProductAttention`` with ``attn_mask_type="causal"``,
    bf16, batch 1. That script counts ``2*b*s^2*a*(d_qk + d_v)`` forward FLOPs (and 2.5x
    backward) *without* halving for the causal mask, so its factors are twice the fraction of
    peak in pipesim's convention (causal work halved, :mod:`sim.compute.attention`): the tables
    below halve them. MLA rows (``d_qk = 192``, ``d_v = 128``) are pipesim's head dim 160
    (:mod:`sim.compute.mla` passes the mean of the two). A head dim of 64 (GPT-OSS) is looked
    up on the 128 rows, its forward scaled by the measured ratio of the two widths' FLOP rates
    on Blackwell (:mod:`sim.compute.hd64_attention`: 0.58-0.67 by sequence length).
  - H100 (and H200, GH200): FlashAttention-2, the backend of torch's SDPA that the dgx-h100 preset
    names (Dao-AILab/flash-attention@0251105a ``assets/flash3_fp16_fwd.png`` forward and
    ``assets/flash2_h100_fwd_bwd_benchmark.png`` forward + backward, causal, head dims 64 and
    128, ``batch x seqlen`` = 16k tokens, hidden 2048; the benchmark's FLOPs are halved for the
    causal mask, pipesim's convention). Backward TFLOPS ``2.5 / (3.5/fwd_bwd - 1/fwd)``.

  A kernel of ``s_q`` queries against ``s_k`` keys over ``b*a`` (samples x heads) is looked up as
  the equivalent full-length kernel: sequence ``s_k`` with ``b*a*s_q/s_k`` heads (exact for
  Ulysses' all-to-all context parallelism, which runs ``s`` queries over ``a/cp`` heads; an
  approximation for ring attention's per-step chunks). B200: interpolated linearly in
  ``log2`` of the heads along each measured length and in ``log2`` of the length between
  them, clamped to each length's measured heads; below the shortest length at the same number
  of query tiles (heads x length: parallelism sets the efficiency there). H100: by length only
  (every benchmarked point has 16k tokens x 16-32 heads of parallel work).
* **grouped GEMMs of MoE experts** (B200): SimuMax's ``accelerator.op.group_matmul`` (Transformer
  Engine's grouped GEMM, ``simu_tools/efficency_test/test_grouped_gemm_efficiency.py``, bf16,
  fp32 main gradients as Megatron accumulates them): the fraction of 2250 TFLOPS by rows per
  expert ``M`` and pass (forward, input gradient, weight gradient) for DeepSeek-V2's
  (``N, K``) = (3072, 5120), (5120, 1536) and DeepSeek-V3's (4096, 7168), (7168, 2048) expert
  GEMMs. A grouped GEMM uses the curve of the nearest measured ``(N, K)`` (in ``log2``) and
  interpolates in ``log2 M``, clamped: few rows per expert (128-300) run at 0.1-0.4 of peak,
  a weight gradient lower still, far below what the roofline and wave quantization give.

  **A floor per expert GEMM.** What SimuMax's test times is Transformer Engine's per-expert
  loop, not one batched kernel: ``general_grouped_gemm`` (its script, wall clock over 40 calls)
  runs one cuBLASLt GEMM per expert over ``nvte_get_num_compute_streams()`` = 4 CUDA streams
  (NVIDIA/TransformerEngine@70f5366 ``common/util/multi_stream.cpp`` 52-55,
  ``common/gemm/cublaslt_gemm.cu`` 924-975; the same at v2.7, @5671fd3, @71bbefb and @4220403,
  whose ``pytorch/csrc/extensions/gemm.cpp`` 602-607 still says "we only have multi-stream
  cublas backend"), so the measured fractions already hold the per-expert launches and the
  streams' overlap. Below a size the time per GEMM stops falling with its FLOPs: on the
  ``(5120, 1536)`` curve, 160 experts of 154 rows and 80 of 308 rows take the same wall time
  per GEMM (``2 M N K / (f x 2250 TFLOPS)``: forward 9.1 / 9.2 us, input gradient 8.6 / 8.7,
  weight gradient into bf16 8.8 / 8.8), although the second does twice the FLOPs per GEMM.
  That part of a GEMM's time is not its FLOPs, so a faster format (FP8, MXFP8, NVFP4: the
  16-bit fractions scaled by the format's rate, :mod:`sim.compute.kernels`) or a smaller
  expert shape than the four measured does not shorten it: a grouped GEMM of ``c`` experts
  takes at least ``c x`` :data:`TE_LOOP_GEMM_FLOOR_S` (the least of the measured per-GEMM
  times), on the same Blackwell parts as the tables (whether the floor is the loop's host
  work or its kernels' is not separable from a wall clock; it is carried unscaled to the
  other parts, an assumption). TE's fused grouped MLP (one persistent kernel,
  :mod:`sim.compute.moe`) has no such loop and no floor.

  **A weight gradient reads and writes its fp32 main gradient.** Megatron's gradient-accumulation
  fusion has each expert's weight-gradient GEMM accumulate into the weight's fp32 ``main_grad``
  (``grouped_linear.py`` ``general_grouped_gemm(..., accumulate=True)``; SimuMax's test runs it
  so: ``main_grad_dtype=fp32``, ``accumulate=True``), 8 bytes per weight element read and
  written whatever the GEMM's format. At few rows that traffic is the whole time: DeepSeek-V3's
  ``(4096, 7168)`` at 128 rows takes 43.1 us per GEMM into fp32 (fraction 0.077) and 23.6 us
  into bf16 (0.142), ``4096 x 7168 x 8`` bytes = 235 MB and half of it at 5.4 TB/s, the node's
  memory-bound rate (0.666 of 8 TB/s, the ``dgx-b200`` preset's). So a weight-gradient GEMM of
  ``c`` experts of ``m x n`` weights takes at least ``8 c m n`` bytes at the GPU's memory-bound
  HBM rate (:data:`MAIN_GRAD_ACCUMULATE_BYTES`), which a lower-precision format, scaled by its
  GEMM rate, does not shorten.

  **Grouped GEMMs relative to the dense rate.** SimuMax's node runs large dense BF16 GEMMs at
  0.4878 of 2250 TFLOPS (its own efficiency test, same pipeline, same node:
  :data:`SIMUMAX_NODE_MATMUL`), where Transformer Engine's GEMM benchmark measures 0.650 on an HGX
  B300 (0.642 moved to B200; the ``dgx-b200`` preset). The node is slower for every GEMM it
  ran, so its grouped-GEMM fractions are used as what they say about the kernel, a fraction of
  the node's dense rate: a grouped GEMM runs at ``table(M) / 0.4878`` times the GPU's dense GEMM
  rate (``ComputeSpec.matmul_rate``). On SimuMax's own node (the ``simumax-b200`` overlay,
  0.488) that is the table as measured; elsewhere the grouped GEMM moves with the dense rate
  the preset carries. That ratio is a property of the kernel on fifth-generation tensor cores
  and is carried to every Blackwell part (:data:`GROUPED_GPUS`, GB300 included: its absolute
  rates differ from the node's, the ratio is what is carried; an assumption).
* **token permutation** (B200): SimuMax's ``accelerator.bandwidth.permute_fwd`` /
  ``permute_bwd`` (Transformer Engine ``moe_permute_with_probs`` + ``moe_unpermute``, measured by
  ``test_ce_permute_efficiency.py`` on DeepSeek-V2/V3 shapes) with that script's byte count
  (``(t*h + 3*P*h)*d`` to permute ``t`` tokens into ``P`` rows, ``(3*P*h + t*h)*d`` to unpermute)
  and its ``30 us`` per launch, two launches per kernel: 0.50 (forward) and 0.51 (backward) of
  8000 GiB/s.

**Which GPUs carry the B200 tables.** The tables are absolute speeds (TFLOPS, bytes/s) of kernels
on an HGX B200 (dense BF16 2250, FP8 4500 TFLOPS; 8 TB/s HBM3e). The HGX B300 (Blackwell Ultra,
"B300 SXM6 AC") has the same dense BF16 and FP8 tensor rates per GPU on NVIDIA's HGX page (HGX
B300 | HGX B200, 8 GPUs with sparsity: FP16/BF16 36 | 36 PFLOPS, FP8 72 | 72 PFLOPS;
torchao@36027d8 ``testing/training/roofline_utils.py``: B200 and "NVIDIA B300 SXM6 AC" both
bf16 2.25e15, fp8 4.5e15), the same fifth-generation tensor cores (only the FP4 rate is higher:
NVIDIA, "Inside NVIDIA Blackwell Ultra", 15 PFLOPS dense NVFP4), the same shared-memory
bandwidth per SM that bounds the attention backward (128 B per clock per SM on B200, Together
AI's FlashAttention-4 post, arXiv:2603.05451; B300: 38.4 TB/s measured shared-memory reads =
148 SMs x 128 B x 2.03 GHz, ademeure/QuickRunCUDA@3a9f5f27 b300_clean/B300_TRUE_REFERENCE.md)
and 8 TB/s HBM3e; published micro-benchmarks of large GEMMs measure both alike (MAMF BF16 1745
vs 1769, FP8 3432.5 vs 3353.3 TFLOPS: stas00/ml-engineering@744d01e
compute/accelerator/README.md).
So B300 runs the B200 tables as measured (BF16/FP8 kernels; its higher NVFP4 peak changes
nothing here: the tables are 16-bit; the grouped GEMMs relative to its dense rate, above). One difference makes them a lower bound of B300's
attention forward: Blackwell Ultra doubles the SFU exponential rate that bounds the B200
forward (NVIDIA's blog; FlashAttention-4: the forward is exp-bound on B200), and no B300
attention throughput is published. GB300 (NVL72, 1400 W per GPU, dense BF16 2500 / FP8 5000
TFLOPS per NVIDIA's GB300 NVL72 table: a higher clock and power point than the HGX B200's
1000 W maximum, whose DGX user guide shows a 700 W set point) keeps its roofline fractions: no
measurement ties its kernels to the B200 node's, and its datasheet rates differ from it (GB200
keeps the tables, as before this note); only its grouped GEMMs use the tables, relative to its
own dense rate (above). Its head-dim-128 causal attention runs at cuDNN's own GB300 measurement,
and FP8 attention on every Blackwell part at cuDNN's measured format ratio
(:mod:`sim.compute.cudnn_attention`).

Every number is a kernel-level measurement; none is fitted to an iteration time.
"""

from __future__ import annotations

import math

from sim.compute.hd64_attention import narrow_head_ratio
from sim.compute.log_interp import log2_interp
from sim.hardware.gpu_compute import ComputeSpec

SIXTEEN_BIT = ("bf16", "fp16", "bfloat16", "float16")

# (seq, heads, forward, backward): SimuMax's factors (non-causal convention), halved in use.
_B200_ATTN = {
    128: [
        (4096, 4, 0.167, 0.346),
        (4096, 8, 0.310, 0.659),
        (4096, 16, 0.578, 0.755),
        (4096, 32, 0.732, 0.796),
        (4096, 64, 0.872, 0.729),
        (4096, 128, 0.997, 0.832),
        (32768, 8, 1.202, 0.955),
        (32768, 16, 1.165, 0.872),
        (131072, 8, 1.003, 0.826),
        (131072, 16, 0.989, 0.827),
    ],
    160: [
        (4096, 16, 0.637, 0.593),
        (4096, 32, 0.789, 0.610),
        (4096, 64, 0.885, 0.609),
        (4096, 128, 0.831, 0.643),
        (32768, 64, 0.812, 0.649),
        (131072, 64, 0.684, 0.658),
    ],
}
SIMUMAX_CAUSAL = 0.5
"""SimuMax's attention FLOPs are non-causal for causal kernels: its factors are halved."""

# (seq, forward TFLOPS, forward + backward TFLOPS): FlashAttention-2 on H100, causal.
_H100_FA2 = {
    64: [(512, 180, 141), (1024, 229, 192), (2048, 262, 232), (4096, 284, 257), (8192, 295, 273),
         (16384, 299, 284)],
    128: [(512, 191, 163), (1024, 260, 221), (2048, 298, 265), (4096, 319, 294),
          (8192, 333, 308), (16384, 335, 328)],
}  # fmt: skip
H100_PEAK = 989.4e12
"""The dense bf16 peak the H100 TFLOPS are taken as a fraction of (dgx-h100 preset)."""

# {(N, K): {pass: [(M, fraction of 2250 TFLOPS), ...]}}: SimuMax B200 grouped GEMMs.
_B200_GROUPED = {
    (3072, 5120): {
        "fwd": [(154, 0.200), (308, 0.387), (616, 0.462), (1232, 0.513), (2460, 0.487),
                (9832, 0.475)],
        "dgrad": [(154, 0.195), (308, 0.304), (616, 0.321), (1232, 0.422), (2460, 0.452),
                  (9832, 0.476)],
        "wgrad": [(154, 0.094), (308, 0.162), (616, 0.258), (1232, 0.328), (2460, 0.417),
                  (9832, 0.419)],
    },
    (5120, 1536): {
        "fwd": [(154, 0.116), (308, 0.235), (616, 0.326), (1232, 0.397), (2460, 0.496),
                (9832, 0.445)],
        "dgrad": [(154, 0.123), (308, 0.250), (616, 0.281), (1232, 0.389), (2460, 0.489),
                  (9832, 0.463)],
        "wgrad": [(154, 0.083), (308, 0.178), (616, 0.272), (1232, 0.320), (2460, 0.403),
                  (9832, 0.413)],
    },
    (4096, 7168): {
        "fwd": [(128, 0.208), (256, 0.271), (512, 0.367), (1024, 0.457)],
        "dgrad": [(128, 0.226), (256, 0.333), (512, 0.405), (1024, 0.435)],
        "wgrad": [(128, 0.077), (256, 0.147), (512, 0.219), (1024, 0.289)],
    },
    (7168, 2048): {
        "fwd": [(128, 0.178), (256, 0.303), (512, 0.427), (1024, 0.384)],
        "dgrad": [(128, 0.151), (256, 0.233), (512, 0.294), (1024, 0.430)],
        "wgrad": [(128, 0.080), (256, 0.141), (512, 0.215), (1024, 0.274)],
    },
}  # fmt: skip
SIMUMAX_PEAK = 2250e12
"""The B200 peak SimuMax's factors are fractions of (its ``tflops``: 2250)."""
SIMUMAX_NODE_MATMUL = 0.4878
"""The dense BF16 GEMM fraction of 2250 TFLOPS that SimuMax's efficiency tests measured on the
same node as the grouped GEMMs (MooreThreads/SimuMax@e691807 ``configs/system/
b200_bf16_ceperm.json`` ``accelerator.op.matmul.efficient_factor``; the ``simumax-b200``
overlay's ``matmul_efficiency``): the grouped-GEMM fractions are taken relative to it."""
GROUPED_GPUS = ("B200", "GB200", "B300", "GB300")
"""GPUs whose grouped expert GEMMs run at the measured fractions relative to their dense rate:
the Blackwell parts (fifth-generation tensor cores, module doc)."""
TE_LOOP_GEMM_FLOOR_S = 8.6e-6
"""Least wall time per expert GEMM of Transformer Engine's multi-stream cuBLAS loop that
SimuMax's grouped-GEMM test measured on B200 (module doc, "a floor per expert GEMM"): the
input gradient of ``(N, K) = (5120, 1536)`` at 154 and 308 rows per expert (fractions 0.125 and
0.247 of 2250 TFLOPS, 160 and 80 experts: ``2 x 154 x 5120 x 1536 / (0.125 x 2250e12)`` =
8.6 us), the same at both row counts."""
MAIN_GRAD_ACCUMULATE_BYTES = 8
"""HBM bytes per weight element a weight-gradient GEMM moves accumulating into an fp32
``main_grad``: read 4 and write 4 (module doc, "a weight gradient reads and writes")."""
PERMUTE_BPS = {"fwd": 0.5008 * 8000 * 2**30, "bwd": 0.5108 * 8000 * 2**30}
"""TE's fused permute/unpermute on B200, bytes/s of SimuMax's byte count (module doc)."""
PERMUTE_LAUNCH_S = 2 * 30e-6
"""SimuMax's 30 us per launch, two launches per kernel (four per permute + unpermute)."""
PERMUTE_KERNELS = {
    "permute": "fwd",
    "unpermute": "fwd",
    "permute_bwd": "bwd",
    "unpermute_bwd": "bwd",
}
"""The permutation kernels of :mod:`sim.compute.moe` and the pass each is measured in; each
moves ``(t + 3*P)*h*d`` bytes in SimuMax's count (permute and unpermute alike)."""


def family(spec: ComputeSpec) -> str | None:
    """``B200`` (B200, GB200, B300), ``H100`` (H100, H200, GH200) or None: the GPU a table
    covers (module doc: which parts carry the B200 tables, and why not GB300)."""
    name = spec.model.upper()
    if name.startswith(("B200", "GB200", "B300")):
        return "B200"
    if name.startswith(("H100", "H200", "GH200")):
        return "H100"
    return None


def _nearest(keys, value: float) -> float:
    return min(keys, key=lambda k: abs(math.log2(k) - math.log2(max(value, 1.0))))


def _b200_attention(seq: float, heads: float, hd: int, phase: int) -> float:
    rows = _B200_ATTN[int(_nearest(_B200_ATTN, hd))]
    seqs = sorted({r[0] for r in rows})
    if seq < seqs[0]:  # the same query tiles at the shortest measured length
        heads, seq = heads * seq / seqs[0], seqs[0]
    lengths = [
        (s, log2_interp([(r[1], r[2 + phase]) for r in rows if r[0] == s], heads)) for s in seqs
    ]
    narrow = narrow_head_ratio(hd, seq, backward=phase != 0)  # 64-wide heads: hd64_attention
    return log2_interp(lengths, seq) * SIMUMAX_CAUSAL * narrow


def causal_head_scale(seq: float, heads: float, measured: float, backward: bool) -> float:
    """How much slower a head-dim-128 causal kernel of ``heads`` (samples x heads) runs than one
    of ``measured`` heads at ``seq`` tokens, by the B200 table (its fall with fewer query tiles;
    at most 1): carries another table measured at ``measured`` heads to fewer
    (:mod:`sim.compute.cudnn_attention`).

    >>> round(causal_head_scale(4096, 32, 128, False), 3)  # 0.732 / 0.997
    0.734
    """
    phase = 1 if backward else 0
    ratio = _b200_attention(seq, heads, 128, phase) / _b200_attention(seq, measured, 128, phase)
    return min(1.0, ratio)


def _h100_attention(seq: float, hd: int, phase: int) -> float:
    rows = _H100_FA2[int(_nearest(_H100_FA2, hd))]
    fwd = [(s, f * 1e12 / H100_PEAK) for s, f, _ in rows]
    bwd = [(s, 2.5 / (3.5 / fb - 1.0 / f) * 1e12 / H100_PEAK) for s, f, fb in rows]
    return log2_interp(bwd if phase else fwd, seq)


def attention_efficiency(kern, spec: ComputeSpec, dtype: str) -> float | None:
    """Fraction of ``spec.peak_flops(dtype)`` a flash-attention kernel (``m`` queries, ``n``
    keys, head dim ``k``, ``batch`` samples x heads) reaches on ``spec`` (module doc), or None
    without a measurement for this GPU, dtype or kernel shape."""
    fam = family(spec)
    if fam is None or dtype not in SIXTEEN_BIT or not (kern.m and kern.n and kern.k):
        return None
    phase = 1 if kern.name.endswith("_bwd") else 0
    if fam == "B200":
        eff = _b200_attention(kern.n, kern.batch * kern.m / kern.n, kern.k, phase) * SIMUMAX_PEAK
    else:
        eff = _h100_attention(kern.n, kern.k, phase) * H100_PEAK
    return eff / spec.peak_flops(dtype)


def grouped_gemm_efficiency(kern, spec: ComputeSpec, dtype: str) -> float | None:
    """Fraction of ``spec.peak_flops(dtype)`` a grouped expert GEMM (``kern.grouped`` its pass:
    ``fwd``, ``dgrad``, ``wgrad``; ``m, n, k`` as the kernel runs) reaches on ``spec``: the
    measured fraction over the measuring node's own dense GEMM fraction
    (:data:`SIMUMAX_NODE_MATMUL`) times ``spec``'s dense GEMM rate (module doc, "grouped GEMMs
    relative to the dense rate"), or None off Blackwell (:data:`GROUPED_GPUS`)."""
    if not spec.model.upper().startswith(GROUPED_GPUS) or dtype not in SIXTEEN_BIT:
        return None
    if not kern.grouped:
        return None
    m, n, k = {
        "fwd": (kern.m, kern.n, kern.k),
        "dgrad": (kern.m, kern.k, kern.n),
        "wgrad": (kern.k, kern.n, kern.m),
    }[kern.grouped]
    shape = min(_B200_GROUPED, key=lambda s: abs(math.log2(s[0] / n)) + abs(math.log2(s[1] / k)))
    eff = log2_interp(_B200_GROUPED[shape][kern.grouped], m) / SIMUMAX_NODE_MATMUL
    return eff * spec.matmul_rate(dtype) / spec.peak_flops(dtype)


def grouped_gemm_floor_s(kern, spec: ComputeSpec) -> float:
    """Least seconds of a grouped expert GEMM of ``kern.batch`` experts on ``spec``, in any
    format (module doc): Transformer Engine's per-expert loop, ``batch x``
    :data:`TE_LOOP_GEMM_FLOOR_S`; a weight gradient (``m x n`` weights) at least its fp32
    main-gradient traffic, ``batch x m x n x`` :data:`MAIN_GRAD_ACCUMULATE_BYTES` at the HBM
    rate. 0 for other kernels and off Blackwell (:data:`GROUPED_GPUS`).

    Example: 8 experts on a B200 (HBM 8 TB/s at 0.85): 8 x 8.6 us; the weight gradients of
    4096 x 7168 weights 8 x 4096 x 7168 x 8 bytes / 6.8 TB/s = 276.3 us.

    >>> from types import SimpleNamespace
    >>> b200 = ComputeSpec("B200", 2250e12, 80e12, 8e12, 148, 0.642, 0.70)
    >>> fwd = SimpleNamespace(grouped="fwd", batch=8, m=64, n=1024)
    >>> wgrad = SimpleNamespace(grouped="wgrad", batch=8, m=4096, n=7168)
    >>> [round(grouped_gemm_floor_s(k, b200) * 1e6, 1) for k in (fwd, wgrad)]
    [68.8, 276.3]
    """
    if not kern.grouped or not spec.model.upper().startswith(GROUPED_GPUS):
        return 0.0
    loop = kern.batch * TE_LOOP_GEMM_FLOOR_S
    if kern.grouped != "wgrad":
        return loop
    accumulate = kern.batch * kern.m * kern.n * MAIN_GRAD_ACCUMULATE_BYTES
    return max(loop, accumulate / spec.hbm_rate_Bps())


def permute_time_s(kern, spec: ComputeSpec) -> float | None:
    """Seconds of a token permute / unpermute kernel (``m`` tokens, ``n`` permuted rows, ``k``
    bytes per row) on ``spec``: ``(m + 3 n)*k`` bytes at the measured rate plus two launches
    (module doc), or None."""
    if family(spec) != "B200" or kern.name not in PERMUTE_KERNELS or not kern.m:
        return None
    return (kern.m + 3 * kern.n) * kern.k / PERMUTE_BPS[PERMUTE_KERNELS[kern.name]] + (
        PERMUTE_LAUNCH_S
    )

"""The measured speed of Mamba-2's SSD scan kernels (``mamba_ssm``'s Triton kernels).

:mod:`sim.compute.ssm` counts the HBM bytes each kernel of the chunked scan reads and writes
(``_chunk_cumsum``, ``_chunk_state``, ``_state_passing``, ``_bmm_chunk``, ``_chunk_scan`` and
their backward kernels). At training shapes they are memory-bound on every preset, but they do
not stream their bytes at the rate a copy does: they run a few warps per SM (NVIDIA/TensorRT-LLM
#11345 on ``_chunk_scan_fwd_kernel`` for Nemotron Super: "theoretical occupancy (12.5%) is
limited by the number of required registers, and the required amount of shared memory"), so
the roofline at the preset's ``hbm_efficiency`` is too fast.

**Measurement.** vllm-project/vllm#27299 (comment of 2025-10-25, single H100, the unfused
five-kernel ``mamba_chunk_scan_combined`` forward, "Original", with the shape of
granite-4.0-h-small: 128 heads of 64, 1 group, state 128, chunk 256, 16-bit): 1.262327e7
tokens/s at sequence 8192, i.e. 0.6490 ms for the 8192 tokens (1.206e7 at 4096, 1.292e7 at
16384: linear in the tokens, so device time, not launch latency). The five kernels move 857.7 MB
by :func:`sim.compute.ssm._scan_fwd`'s count (without the gate ``z``); less five launches of
``kernel_overhead_s`` (5 us, dgx-h100) that is **0.410 of the H100's 3.35 TB/s**
(:data:`SSD_HBM_FRACTION`; ``tests/test_ssd_speed.py`` recomputes it).

**Use.** Every ``ssd_*`` kernel moves its bytes at :func:`ssd_hbm_rate_Bps` instead of the
preset's ``hbm_efficiency``; its FLOPs bound it as a GEMM's would. The backward's own kernels
(``*_bwd*``: :func:`is_ssd_bwd`) move theirs at :data:`SSD_BWD_RATE_RATIO` of that rate; the
forward kernels the backward recomputes (cumsum, ``CB``, chunk states, state passing) keep it.

**Backward measurement** (:data:`SSD_BWD_RATE_RATIO`): the TFLA paper's constant-token
kernel benchmark (Beck et al., "Tiled Flash Linear Attention", arXiv:2503.14376; its data
NX-AI/mlstm_kernels@39d3c61
``notebooks/plots_mlstm_kernel_benchmark_tfla_paper/mlstm_tfla_paper_consttoken_benchmark_results_rerun.p``,
H100) times ``mamba_ssm``'s ``mamba_split_conv1d_scan_combined`` (Megatron's training call)
forward and forward + backward: 128 heads of 64, 1 group, state 64, chunk 256, conv 4, bf16,
65,536 tokens a call (``scripts/run_training_kernel_benchmarks.py``
``consttoken_benchmark_mamba``, lines 568-706; ``mlstm_kernels/utils/benchmark/benchmarks/
training_kernel_benchmarks.py`` ``MambaKernelBenchmark``). At 8 x 8192: forward 7.074 ms,
forward + backward 44.376 ms. The harness adds, in the timed backward, the gradient of
``out[0]`` (zeros of ``out``), the bf16 -> fp32 copy back to its fp32 leaf ``zxbcdt`` and the
gradient accumulated in place into that leaf's ``.grad`` (no ``grad_to_none``: 2 + 4 and
4 + 4 + 4 bytes an element of ``zxbcdt``; its peak memory, 21.6 GB against 6.1 GB forward,
holds both fp32 gradients). With those, the conv (2 and 3 passes over ``xBC``) and the
recomputed forward kernels priced as pipesim prices them, the forward's five kernels move
their 7.365 GB (:func:`sim.compute.ssm._scan_fwd`) at 1.173 TB/s and the backward's own
eleven kernels their 22.297 GB at 0.869 TB/s: **0.741** of the forward's rate (0.728-0.746
over the benchmark's other batch x sequence splits). ``tests/test_ssd_speed.py``
recomputes it. Assumptions: the harness's PyTorch copies at the preset's
``hbm_efficiency``; the ratio of this January 2025 ``mamba_ssm`` carried to today's kernels
and to other shapes and GPUs. (That forward itself runs at 0.350 of the H100's HBM, 15 %
slower than vllm#27299's 0.410 at state 128: not used, the forward keeps vllm's figure.)

**Another GPU: per SM, not per byte of HBM.** The kernels are bound inside the SM (few warps
per SM, TRT-LLM#11345 above), and an occupancy-bound kernel moves what its resident warps have
in flight per memory latency (Little's law), a per-SM rate. A Blackwell SM has Hopper's
resources that set that occupancy: 64K 32-bit registers, 64 resident warps and 228 KB of
shared memory per SM (CUDA C++ Programming Guide, "Technical Specifications per Compute
Capability": compute capability 9.0 and 10.0 alike), and from H100 to B200 "both the SFU count
and shared memory bandwidth remains unchanged" (Together AI's FlashAttention-4 blog, arXiv
2603.05451; quoted in the project's research notes, gpus/microbench.md §5.3), while the HBM is
2.4x faster. So the measured rate is carried to another GPU per SM: ``min(SSD_HBM_FRACTION x HBM peak,
SSD_SM_RATE_Bps x sm_count)`` (:func:`ssd_hbm_rate_Bps`), where ``SSD_SM_RATE_Bps`` is the
H100 measurement over its 132 SMs. On the H100 both terms are the measurement; an A100 (108
SMs, 2.04 TB/s) keeps the HBM fraction (0.84 < 1.12 TB/s); B200/GB200/B300 (148 SMs) run the
scan at 1.54 TB/s and GB300 (160 SMs) at 1.67 TB/s, where the HBM fraction alone gave 3.28
TB/s. Assumptions: the same DRAM latency and SM clock on
both, and the same Triton tile configurations (no Blackwell measurement of these
kernels was found). vLLM's kernels are ``mamba_ssm``'s v2.2.4 kernels with variable-length
support added (its ``ssd_chunk_scan.py`` header); Megatron-Core calls ``mamba_ssm``'s own
through ``mamba_split_conv1d_scan_combined``.

**Cross-check** (not used to set anything): state-spaces/mamba#904 measured a pure Mamba-2
model (``d_model`` 2048, 48 layers, batch 4 x 4096, bf16) training at 102.5 / 239.2 / 360.4
TFLOP/s on A100 / H200 / GB200; its step-time ratios (the FLOP formula cancels) are GB200 /
H200 x1.507 and H200 / A100 x2.334, where these kernels with the rest of the layer give
x1.357 and x2.189 (``benchmarks/accuracy/mamba2_gpu_ratio.py``; the scan is 60 % of the
GB200 step). So the per-SM carry does not make Blackwell too fast: if anything pipesim's
GB200 is 10 % slow against its H200 here. If the issue's TFLOP/s count at least ``6 N T``,
its steps last at least 338 / 510 / 1190 ms where pipesim gives 323 / 438 / 959 ms (-5 / -14 /
-19 %; -15 / -22 / -25 % with the backward at the forward's rate).
"""

from __future__ import annotations

from typing import Protocol

SSD_HBM_FRACTION = 0.410
"""Achieved fraction of HBM peak bandwidth of the SSD Triton kernels (module doc)."""
H100_SM_COUNT = 132
"""SMs of the H100 SXM of the measurement (NVIDIA H100 Tensor Core GPU datasheet)."""
H100_HBM_Bps = 3.35e12
"""HBM peak of that H100 SXM (datasheet: 3.35 TB/s)."""
SSD_SM_RATE_Bps = SSD_HBM_FRACTION * H100_HBM_Bps / H100_SM_COUNT
"""Bytes per second one SM moves running the SSD kernels: the measured H100 rate over its SMs
(module doc: "Another GPU"), 10.4 GB/s."""
SSD_BWD_RATE_RATIO = 0.741
"""Bytes per second of the scan's backward kernels over the forward kernels' (module doc:
"Backward measurement", the TFLA benchmark's ``mamba_split_conv1d_scan_combined`` on an H100)."""
SSD_PREFIX = "ssd_"
"""Names of the scan's kernels in :mod:`sim.compute.ssm` start with this."""
SSD_BWD_MARK = "_bwd"
"""Names of the backward's own scan kernels contain this (not the forward ones it recomputes)."""


class _Kernel(Protocol):
    @property
    def name(self) -> str: ...


def is_ssd(kern: _Kernel) -> bool:
    """Whether ``kern`` is one of the SSD scan's Triton kernels (module doc)."""
    return kern.name.startswith(SSD_PREFIX)


def is_ssd_bwd(kern: _Kernel) -> bool:
    """Whether ``kern`` is one of the scan's backward kernels (module doc: "Use")."""
    return is_ssd(kern) and SSD_BWD_MARK in kern.name


def ssd_kernel_rate_Bps(kern: _Kernel, hbm_bandwidth_Bps: float, sm_count: int) -> float:
    """Bytes per second the SSD kernel ``kern`` moves: :func:`ssd_hbm_rate_Bps`, times
    :data:`SSD_BWD_RATE_RATIO` for a backward kernel (module doc: "Use").

    Example:
        >>> class K:
        ...     name = "ssd_bwd_dx"
        >>> round(ssd_kernel_rate_Bps(K(), 3.35e12, 132) / 1e12, 4)
        1.0178
    """
    rate = ssd_hbm_rate_Bps(hbm_bandwidth_Bps, sm_count)
    return rate * SSD_BWD_RATE_RATIO if is_ssd_bwd(kern) else rate


def ssd_hbm_rate_Bps(hbm_bandwidth_Bps: float, sm_count: int) -> float:
    """Bytes per second an SSD kernel moves on a GPU of ``hbm_bandwidth_Bps`` peak and
    ``sm_count`` SMs: ``min(SSD_HBM_FRACTION x hbm_bandwidth_Bps, SSD_SM_RATE_Bps x sm_count)``
    (module doc: "Another GPU").

    Example:
        >>> round(ssd_hbm_rate_Bps(8e12, 148) / 1e12, 3), round(ssd_hbm_rate_Bps(3.35e12, 132) / 1e12, 4)
        (1.54, 1.3735)
    """
    return min(hbm_bandwidth_Bps * SSD_HBM_FRACTION, SSD_SM_RATE_Bps * sm_count)

"""Kernel times on one GPU: GEMMs by shape, memory-bound kernels by bytes.

A :class:`Kernel` is one launch: a GEMM ``(m, n, k)`` (times ``batch``) or a memory-bound
kernel that moves ``bytes`` through HBM. Its time on a :class:`~sim.hardware.gpu_compute.ComputeSpec`:

* GEMM: ``overhead + max(flops / (peak * matmul_efficiency * wave(m, n, batch)),
  bytes / hbm_rate)`` with ``flops = 2*m*n*k*batch`` and ``bytes = (m*k + k*n + m*n)*d*batch``
  (a roofline: small or skinny GEMMs are memory-bound). ``wave`` is the wave-quantization
  factor of NVIDIA's Matrix Multiplication Background User's Guide: the output is cut into
  ``TILE_M x TILE_N`` tiles, each SM runs one tile at a time, and the last wave runs partly
  empty: ``tiles / (ceil(tiles / sm_count) * sm_count)``; tile quantization (padding of edge
  tiles) is in the same factor through ``ceil(m / TILE_M) * ceil(n / TILE_N)``.
* memory-bound: ``overhead + bytes / hbm_rate``; a memory-bound kernel that stands for
  ``batch`` launches of one kernel back to back on one stream (Transformer Engine's per-expert
  casts, :mod:`sim.compute.quantize`) adds :data:`BACK_TO_BACK_S` per launch after the first.

A GEMM whose ``precision`` names a low-precision format (``fp8``, ``mxfp8``, ``nvfp4``:
:mod:`sim.compute.precision`) runs at that format's achieved rate
(:meth:`~sim.hardware.gpu_compute.ComputeSpec.matmul_rate`); its ``bytes`` are its quantized
operands' and its 16-bit output's.

``overhead`` is ``kernel_overhead_s`` (launch and dispatch, see :mod:`sim.hardware.gpu_compute`).

Where a published micro-benchmark measured a kind of kernel on the GPU, its speed replaces the
roofline (:mod:`sim.compute.measured`): fused attention by sequence length, heads and head dim
(instead of the flat ``attention_efficiency``; on GB300 and in FP8 formats cuDNN's own
benchmark, :mod:`sim.compute.cudnn_attention`), MoE grouped GEMMs by rows per expert, the token
permutation kernels; Mamba-2's SSD scan kernels move their bytes at their measured rate, carried to other GPUs
per SM (:mod:`sim.compute.ssd_speed`); the MoE paged stash's copies at the measured speed of its
copy kernel (:mod:`sim.compute.stash_copy_speed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.compute import cudnn_attention, measured
from sim.compute.fp8_attention_speed import fp8_hd64_bwd_rate_flops
from sim.compute.ssd_speed import is_ssd, ssd_kernel_rate_Bps
from sim.compute.stash_copy_speed import copy_time_s
from sim.compute.swa_speed import windowed_rate_flops
from sim.hardware.gpu_compute import ComputeSpec

BACK_TO_BACK_S = 0.56e-6
"""Device seconds per kernel of a chain of kernels queued back to back on one stream, the
host ahead of it: the GPU's command processing per launch (ademeure/QuickRunCUDA@3a9f5f27
``b300_clean/10_launch_overhead.md`` §5: a CUDA graph of 1,000 no-op kernels on a B300 runs at
0.56 us per kernel, ``cudaGraphLaunch`` "N x 0.5 us dispatch"; the host's own 1.85 us per
``cudaLaunchKernel`` is the host model's). A lower bound of a small kernel's share: its own
last-wave tail is not measured there. Carried to the other GPUs (assumption)."""

TILE_M = 128
TILE_N = 128
"""Output tile of the modelled GEMM kernel: 128 x 128, one of the tile sizes NVIDIA's guide
lists for cuBLAS tensor-core kernels (the guide's examples use 256x128 and 128x128; assumption:
one tile per SM at a time)."""


@dataclass(frozen=True)
class Kernel:
    """One kernel launch.

    Attributes:
        name: what it computes, e.g. ``"qkv"`` or ``"softmax"``.
        kind: ``"gemm"``, ``"mem"`` (memory-bound) or ``"attn"`` (fused attention).
        flops: floating-point operations.
        bytes: bytes read plus written in HBM.
        m, n, k, batch: GEMM shape (``C[m, n] = A[m, k] @ B[k, n]``, ``batch`` of them);
            a flash-attention kernel's queries, keys, head dim and samples x heads; a token
            permutation's tokens, rows and bytes per row (:mod:`sim.compute.measured`); zero
            otherwise.
        grouped: the pass (``fwd``, ``dgrad``, ``wgrad``) of a grouped GEMM over MoE experts
            (``batch`` experts of ``m x n x k`` each); ``""`` for any other kernel. A
            memory-bound kernel's ``batch`` is the launches it stands for (module doc).
        precision: the GEMM's low-precision format (``fp8``, ``mxfp8``, ``nvfp4``); ``""``:
            the dtype its phase is timed in.
        window: a flash-attention kernel's sliding window (keys each query attends;
            :mod:`sim.compute.swa_speed`); 0: none.
        slowdown: how many times slower than modelled the kernel runs, beyond its launch
            overhead: a measured regression of the library that runs it
            (:mod:`sim.compute.dglu_regression`); 1: none.
    """

    name: str
    kind: str
    flops: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    grouped: str = ""
    precision: str = ""
    window: int = 0
    slowdown: float = 1.0


def gemm(name: str, m: int, n: int, k: int, elem_bytes: int, batch: int = 1) -> Kernel:
    """A GEMM kernel ``[m, k] @ [k, n]`` (``batch`` times) with ``elem_bytes`` per element.

    Raises:
        ValueError: a non-positive dimension.
    """
    if min(m, n, k, batch) < 1:
        raise ValueError(f"GEMM dimensions must be >= 1, got m={m} n={n} k={k} batch={batch}")
    flops = 2.0 * m * n * k * batch
    nbytes = float((m * k + k * n + m * n) * elem_bytes * batch)
    return Kernel(name, "gemm", flops, nbytes, m, n, k, batch)


def mem(name: str, nbytes: float, flops: float = 0.0) -> Kernel:
    """A memory-bound kernel moving ``nbytes`` bytes (read + write)."""
    return Kernel(name, "mem", float(flops), float(nbytes))


def wave_factor(m: int, n: int, batch: int, sm_count: int) -> float:
    """Useful fraction of the SM-tile slots a GEMM occupies (tile and wave quantization).

    ``m * n * batch / (ceil(tiles / sm_count) * sm_count * TILE_M * TILE_N)`` with
    ``tiles = ceil(m / TILE_M) * ceil(n / TILE_N) * batch``; in (0, 1].
    """
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N) * batch
    slots = math.ceil(tiles / sm_count) * sm_count
    return (m * n * batch) / (slots * TILE_M * TILE_N)


def gemm_time_s(kern: Kernel, spec: ComputeSpec, dtype: str, hbm_Bps: float | None = None) -> float:
    """Seconds of a GEMM kernel on ``spec`` (module doc): in ``kern.precision`` if set, else
    in ``dtype``; its bytes at ``hbm_Bps`` (default: the GPU's achievable HBM rate)."""
    rate = spec.matmul_rate(kern.precision or dtype) * wave_factor(
        kern.m, kern.n, kern.batch, spec.sm_count
    )
    hbm = spec.hbm_rate_Bps() if hbm_Bps is None else hbm_Bps
    return spec.kernel_overhead_s + max(kern.flops / rate, kern.bytes / hbm)


def gemm_efficiency(m: int, n: int, k: int, spec: ComputeSpec, dtype: str, batch: int = 1) -> float:
    """Achieved fraction of ``spec.peak_flops(dtype)`` of a GEMM of this shape, in (0, 1).

    Falls for small GEMMs (memory-bound, partly filled waves, fixed overhead) and tends to
    ``matmul_efficiency`` for large ones.
    """
    kern = gemm("gemm", m, n, k, 2 if dtype != "fp32" else 4, batch)
    return kern.flops / (gemm_time_s(kern, spec, dtype) * spec.peak_flops(dtype))


def kernel_time_s(kern: Kernel, spec: ComputeSpec, dtype: str) -> float:
    """Seconds of one kernel on ``spec``.

    ``attn`` kernels run at the measured efficiency of their shape where
    :mod:`sim.compute.measured` has one (a sliding-window kernel at its measured FLOP/s where
    :mod:`sim.compute.swa_speed` has it; a causal head-dim-128 kernel on GB300, or in an FP8
    format on the other Blackwell parts, at cuDNN's measured FLOP/s, and a 64-wide one on
    GB300 at that table times the measured 64/128 forward ratio,
    :mod:`sim.compute.cudnn_attention`), else at ``attention_efficiency`` of the tensor peak
    (or the fp32 peak for fp32; a full FP8 head-dim-64 backward as
    :mod:`sim.compute.fp8_attention_speed` measures it), bounded below by their bytes at HBM
    rate; grouped expert GEMMs and token permutations at their measured speeds where there are
    some, Mamba-2's scan kernels at their measured share of HBM bandwidth
    (:mod:`sim.compute.ssd_speed`) (a grouped GEMM in a low-precision format at its measured
    16-bit speed times the format's achieved rate
    over the 16-bit one, :meth:`~sim.hardware.gpu_compute.ComputeSpec.matmul_rate`).

    A kernel with a ``slowdown`` runs that many times its time beyond the launch overhead.

    Raises:
        ValueError: unknown kernel kind.
    """
    t = _kernel_time_s(kern, spec, dtype)
    if kern.slowdown == 1.0:
        return t
    return spec.kernel_overhead_s + kern.slowdown * (t - spec.kernel_overhead_s)


def _kernel_time_s(kern: Kernel, spec: ComputeSpec, dtype: str) -> float:
    """:func:`kernel_time_s` without the kernel's ``slowdown``."""
    if is_ssd(kern):  # Mamba-2's scan kernels at their measured bandwidth (sim.compute.ssd_speed)
        hbm = ssd_kernel_rate_Bps(kern, spec.hbm_bandwidth_Bps, spec.sm_count)
        if kern.kind == "gemm":
            return gemm_time_s(kern, spec, dtype, hbm)
        return spec.kernel_overhead_s + kern.bytes / hbm
    if kern.kind == "gemm":
        eff = measured.grouped_gemm_efficiency(kern, spec, dtype)
        if eff:
            rate = spec.peak_flops(dtype) * eff
            if kern.precision:  # measured in 16 bits: scaled as the format's large GEMMs are
                rate *= spec.matmul_rate(kern.precision) / spec.matmul_rate(dtype)
            floor = measured.grouped_gemm_floor_s(kern, spec)  # TE's per-expert loop
            return spec.kernel_overhead_s + max(kern.flops / rate, floor)
        return gemm_time_s(kern, spec, dtype)
    if kern.kind == "mem":
        permute = measured.permute_time_s(kern, spec)
        if permute is None:  # the paged stash's copies (sim.compute.stash_copy_speed)
            permute = copy_time_s(kern.name, kern.bytes, spec)
        if permute is not None:
            return spec.kernel_overhead_s + permute
        chain = (kern.batch - 1) * BACK_TO_BACK_S  # launches after the first (module doc)
        return spec.kernel_overhead_s + chain + kern.bytes / spec.hbm_rate_Bps()
    if kern.kind == "attn":
        # a windowed kernel at its measured rate (sim.compute.swa_speed)
        attn = windowed_rate_flops(kern, spec, dtype) if kern.window else None
        if attn is None:  # cuDNN's measured causal kernels (sim.compute.cudnn_attention)
            attn = cudnn_attention.rate_flops(kern, spec, dtype)
        if attn is None and kern.precision:  # FP8, head dim 64 (sim.compute.fp8_attention_speed)
            attn = fp8_hd64_bwd_rate_flops(kern, spec)
        if attn is None:
            eff = measured.attention_efficiency(kern, spec, dtype) or spec.attention_efficiency
            attn = spec.peak_flops(dtype) * eff
        return spec.kernel_overhead_s + max(kern.flops / attn, kern.bytes / spec.hbm_rate_Bps())
    raise ValueError(f"unknown kernel kind {kern.kind!r}; use gemm, mem or attn")


@dataclass(frozen=True)
class PhaseTime:
    """Seconds of a list of kernels, split by what bounds them.

    Attributes:
        total_s: sum of kernel times.
        matmul_s: time of GEMM and attention kernels (scales with achieved matmul FLOP/s).
        memory_s: time of memory-bound kernels (scales with HBM bandwidth).
        overhead_s: the fixed per-kernel part included in the two above.
        kernels: number of kernels.
    """

    total_s: float
    matmul_s: float
    memory_s: float
    overhead_s: float
    kernels: int


def phase_time(kernels: list[Kernel], spec: ComputeSpec, dtype: str) -> PhaseTime:
    """Total and split seconds of ``kernels`` run back to back on ``spec``."""
    matmul = memory = 0.0
    for kern in kernels:
        t = kernel_time_s(kern, spec, dtype)
        if kern.kind == "mem":
            memory += t
        else:
            matmul += t
    return PhaseTime(
        matmul + memory, matmul, memory, len(kernels) * spec.kernel_overhead_s, len(kernels)
    )

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

**Use.** Every ``ssd_*`` kernel (forward and backward) moves its bytes at
``SSD_HBM_FRACTION x`` the GPU's HBM peak instead of its ``hbm_efficiency``; its FLOPs bound it
as a GEMM's would. Assumptions: the backward kernels (not measured) run at the forward's
fraction, and Blackwell runs the same Triton kernels at the same fraction of its HBM peak (no
Blackwell measurement of these kernels was found). vLLM's kernels are ``mamba_ssm``'s v2.2.4
kernels with variable-length support added (its ``ssd_chunk_scan.py`` header); Megatron-Core
calls ``mamba_ssm``'s own through ``mamba_split_conv1d_scan_combined``.
"""

from __future__ import annotations

from typing import Protocol

SSD_HBM_FRACTION = 0.410
"""Achieved fraction of HBM peak bandwidth of the SSD Triton kernels (module doc)."""
SSD_PREFIX = "ssd_"
"""Names of the scan's kernels in :mod:`sim.compute.ssm` start with this."""


class _Kernel(Protocol):
    @property
    def name(self) -> str: ...


def is_ssd(kern: _Kernel) -> bool:
    """Whether ``kern`` is one of the SSD scan's Triton kernels (module doc)."""
    return kern.name.startswith(SSD_PREFIX)


def ssd_hbm_rate_Bps(hbm_bandwidth_Bps: float) -> float:
    """Bytes per second an SSD kernel moves on a GPU of ``hbm_bandwidth_Bps`` peak."""
    return hbm_bandwidth_Bps * SSD_HBM_FRACTION

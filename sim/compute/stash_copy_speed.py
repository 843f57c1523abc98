"""The speed of Megatron-Core's paged-stash copy kernel, measured (:mod:`sim.compute.paged_stash`).

**Measurement.** NVIDIA/Megatron-LM#6414 ("Add opt-in CuTeDSL copy kernels for MoE paged
stash", 2026-08-10, description) times the Triton ``paged_stash_copy_kernel`` that the stash
runs by default on DeepSeek-V3 671B's MXFP8 activations on a GB300: 896 MiB in 468 us and
256 MiB in 156 us (the CuTe-DSL kernels it adds, off by default, take 171 and 67 us). That is
2.01 and 1.72 TB/s of stashed bytes, each read once and written once: 54 % and 46 % of the
GPU's 8 TB/s HBM (datasheet) for the two-way traffic, below the roofline's
``hbm_efficiency`` (0.666 on the GB300 preset).

**Use.** A copy kernel of :mod:`sim.compute.paged_stash` (``kernel.bytes`` counts its reads and
writes, so ``bytes / 2`` are the stashed bytes) runs at the measured rate of its size,
interpolated in ``log2`` of the stashed bytes and clamped to the two measured sizes (an
assumption below 256 MiB: the small scale and probability tensors), as the measured fraction
of the GB300's HBM peak times the GPU's own peak (the other Blackwell parts have the same
8 TB/s: an assumption that the kernel's efficiency carries). The reload's ``paged_stash_pop_kernel``
is taken at the same speed (assumption: the same Triton loop the other way, not measured).
"""

from __future__ import annotations

from sim.compute.log_interp import log2_interp
from sim.hardware.gpu_compute import ComputeSpec

MIB = 2**20
MEASURED = ((256 * MIB, 156e-6), (896 * MIB, 468e-6))
"""``(stashed bytes, seconds)`` of the Triton copy kernel on a GB300 (Megatron-LM#6414)."""
MEASURED_HBM_BPS = 8e12
"""The measuring GPU's HBM peak, bytes/s (GB300 datasheet: 8 TB/s)."""
COPY_PREFIXES = ("paged_stash_", "paged_reload_")
"""Name prefixes of the stash's copy kernels (:mod:`sim.compute.paged_stash`)."""
META_SUFFIX = "_meta"
"""Name suffix of its bookkeeping kernels, which move no measured bytes."""


def is_stash_copy(name: str) -> bool:
    """Whether kernel ``name`` is one of the stash's copies (not its bookkeeping)."""
    return name.startswith(COPY_PREFIXES) and not name.endswith(META_SUFFIX)


def copy_time_s(name: str, nbytes: float, spec: ComputeSpec) -> float | None:
    """Seconds of a stash copy kernel ``name`` that reads and writes ``nbytes`` in all on
    ``spec`` (module doc), beyond its launch; None for any other kernel.

    Example: 896 MiB stashed (1792 MiB of traffic) on an 8 TB/s GPU takes the measured 468 us.
    """
    if not is_stash_copy(name):
        return None
    stashed = nbytes / 2.0
    if stashed <= 0.0:
        return 0.0
    rate = log2_interp([(b, b / t) for b, t in MEASURED], stashed)
    return stashed / (rate * spec.hbm_bandwidth_Bps / MEASURED_HBM_BPS)

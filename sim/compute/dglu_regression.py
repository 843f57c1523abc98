"""cuDNN frontend's grouped-GEMM dGLU kernel with a bias gradient: slow in v1.24 and v1.25.

Transformer Engine's fused grouped MLP (:mod:`sim.compute.moe`, "Fused grouped MLP") runs the
experts' backward through cuDNN frontend's SM100 CuTe-DSL kernels; the down projection's input
gradient is ``grouped_gemm_dglu_wrapper_sm100``, whose epilogue applies the gated activation's
gradient and, for experts with biases (GPT-OSS), reduces the up projection's bias gradient
(``generate_dbias``; kernel ``BlockScaledMoEGroupedGemmDgluDbiasKernel``).

**The regression** (NVIDIA/cudnn-frontend#256, "grouped_gemm_dglu_wrapper_sm100 became slower
between 1.23.0 and 1.24.0"): about 10x slower on a GB200-class GPU for a grouped GEMM dGeGLU
MoE workload (GPT-OSS-20B), good in v1.23.0, bad in v1.24.0, still bad in v1.25.0. The fix,
NVIDIA/cudnn-frontend#322 (merged 2026-06-23, "Fix grouped GEMM dGLU dbias reduction DSL 4.5
regression": CUTLASS DSL 4.5's code for the dbias reduction loop spilled to local memory),
measured the issue's shape on SM100 (CUTLASS DSL 4.5.0), median kernel time:

============================  =========================  ========================
case                          ``generate_dbias=false``   ``generate_dbias=true``
============================  =========================  ========================
before the fix                139.392 us                 1362.768 us
after the fix                 138.960 us                 155.632 us
============================  =========================  ========================

so only the bias-gradient path regressed, by :data:`SLOWDOWN` = 1362.768 / 155.632 = 8.756x.
cuDNN frontend v1.26.0 (NVIDIA/cudnn-frontend#353, 2026-07-07) is the first release after the
fix.

**How it is modelled:** a fused grouped MLP with expert biases under a regressed frontend
(:func:`regressed`) runs its ``d_expert_down_in`` kernel :data:`SLOWDOWN` times slower than the
kernel model times it (:attr:`sim.compute.kernels.Kernel.slowdown`). Assumptions: the ratio
measured at the issue's shape (not published) holds at other shapes and on GB300/B300 (SM103;
the measurement is SM100's); the other DSL versions the releases pair with v1.24 (Megatron-Bridge
26.06.01: CUTLASS DSL 4.6.1) generate the same slow loop.
"""

from __future__ import annotations

REGRESSED = ("1.24", "1.25")
"""cuDNN frontend ``major.minor`` versions whose dGLU dbias kernel is slow
(NVIDIA/cudnn-frontend#256: bad v1.24.0, persists in v1.25.0)."""

BEFORE_FIX_S = 1362.768e-6
"""Median seconds of the dGLU kernel with ``generate_dbias=true`` before the fix
(NVIDIA/cudnn-frontend#322, SM100, the issue's shape)."""

AFTER_FIX_S = 155.632e-6
"""The same after the fix (NVIDIA/cudnn-frontend#322)."""

SLOWDOWN = BEFORE_FIX_S / AFTER_FIX_S
"""How many times slower the regressed kernel runs (module doc): 8.756."""

SOURCE = (
    "cuDNN frontend {version}'s grouped GEMM dGLU kernel with a bias gradient runs "
    f"{SLOWDOWN:.2f}x slower (NVIDIA/cudnn-frontend#256; 1362.768 vs 155.632 us before and "
    "after the fix, cudnn-frontend#322, SM100); the ratio is carried to this run's shape and GPU"
)
"""The note a run whose experts' backward is slowed carries (``version`` to format)."""


def regressed(frontend_version: str) -> bool:
    """Whether cuDNN frontend ``frontend_version`` (``"1.24.0"``) has the slow dGLU dbias
    kernel (:data:`REGRESSED`)."""
    return ".".join(frontend_version.strip().split(".")[:2]) in REGRESSED

"""What the compute model needs to know about one GPU: :class:`ComputeSpec`.

A spec holds datasheet peaks (hardware.md §1) and achievable fractions of them. The fractions
are measured by others where a measurement exists (cited per preset in the preset YAML's
``description`` and in :data:`SOURCES`); the rest are marked as assumptions there.

The model (see :mod:`sim.compute.kernels`) uses:

* ``matmul_flops`` x ``matmul_efficiency``: the best a large, well-shaped fp16/bf16 GEMM
  reaches (Stas Bekman's "Maximum Achievable Matmul FLOPS", ml-engineering
  ``compute/accelerator/README.md``: A100 SXM 267.9 of 312 TFLOPS = 85.9 %, H100 SXM 792.1 of
  989 = 80.1 %, both bf16, CUDA 12.1);
* ``fp32_flops`` x ``matmul_efficiency`` for fp32 traces (no tensor cores, no TF32: torch's
  default ``allow_tf32 = False`` for matmuls);
* ``hbm_bandwidth_Bps`` x ``hbm_efficiency`` for memory-bound kernels;
* ``sm_count`` for wave quantization (NVIDIA, "Matrix Multiplication Background User's Guide",
  docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication, §"Wave
  quantization");
* ``attention_efficiency``: fraction of ``matmul_flops`` the fused attention kernel reaches;
* ``kernel_overhead_s``: fixed cost per kernel on the device (the host's dispatch and launch
  are modelled apart, :mod:`sim.hardware.host_ops`; see :data:`SOURCES`);
* ``low_precision``: the GEMM formats below 16 bits the GPU's tensor cores run
  (:class:`LowPrecisionRate`: ``fp8`` E4M3/E5M2 with per-tensor or software block scales,
  ``mxfp8`` and ``nvfp4`` block-scaled MMA on Blackwell), each with its datasheet peak and its
  achieved fraction (cited per preset); :mod:`sim.compute.precision` decides which GEMMs run
  in which format.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

SOURCES = {
    "matmul_efficiency": "Maximum Achievable Matmul FLOPS (MAMF), stas00/ml-engineering "
    "compute/accelerator/README.md: A100 SXM 267.9/312 = 0.859, H100 SXM "
    "792.1/989 = 0.801 (bf16, CUDA 12.1); other GPUs: see preset description",
    "wave_quantization": "NVIDIA Matrix Multiplication Background User's Guide (tile and wave "
    "quantization)",
    "hbm_efficiency": "0.85: STREAM-like kernels on the A100 reach it (te42kyfo/gpu-benches@"
    "cdcc732 cuda-stream/a100_80.txt: A100-SXM4-80GB 'scale', one read and one write stream, "
    "1732 of 2039 GB/s = 0.849; 'triad' 0.863); other GPUs: an assumption unless their preset "
    "cites one; measure with `sim calibrate --device cuda`",
    "kernel_overhead_s": "assumption 5 us per kernel (CUDA launch + PyTorch eager dispatch, "
    "unverified); measure with `sim calibrate --device cuda`. The host's side of a launch "
    "(Python, dispatcher, cudaLaunchKernel) is now modelled apart by the hardware's "
    "host_overhead (sim.hardware.host_ops), so while the device is the bottleneck this figure "
    "double-counts up to its launch share: to be re-sourced as the device-side gap alone",
}

DEFAULT_HBM_EFFICIENCY = 0.85
"""Achievable fraction of HBM peak (the A100's measured streaming rate; an assumption for other
GPUs, see :data:`SOURCES`)."""
DEFAULT_KERNEL_OVERHEAD_S = 5e-6
"""Fixed cost per kernel in seconds (assumption, see :data:`SOURCES`)."""


PRESET_SOURCE = (
    "the hardware preset's description (sim hardware show <preset> prints it), which cites it "
    "or labels it an assumption"
)
"""Where a spec's datasheet peaks and preset-set fractions come from."""


def spec_sources(spec: dict) -> dict[str, str]:
    """Where each figure of a spec's dict (:meth:`ComputeSpec.to_dict`, as a trace's provenance
    records it under ``inputs.gpu``) comes from: :data:`SOURCES` for ``hbm_efficiency`` and
    ``kernel_overhead_s`` at their defaults (measured on the A100 / an assumption), else
    :data:`PRESET_SOURCE`. ``model`` (a name, not a figure) is left out.

    Example:
        >>> spec_sources({"model": "X", "kernel_overhead_s": 5e-6})["kernel_overhead_s"][:10]
        'assumption'
    """
    defaults = {
        "hbm_efficiency": DEFAULT_HBM_EFFICIENCY,
        "kernel_overhead_s": DEFAULT_KERNEL_OVERHEAD_S,
    }
    out = {}
    for key, value in spec.items():
        if key == "model":
            continue
        out[key] = SOURCES[key] if defaults.get(key) == value else PRESET_SOURCE
    return out


LOW_PRECISION_FORMATS = ("fp8", "mxfp8", "nvfp4")
"""GEMM formats below 16 bits: ``fp8`` (E4M3/E5M2 tensor cores: Hopper and Blackwell; per-tensor,
row-wise or software block scales), ``mxfp8`` (E4M3 with an E8M0 scale per 32 elements, block
scales applied by Blackwell's tensor cores) and ``nvfp4`` (E2M1 with an E4M3 scale per 16
elements, Blackwell). Transformer Engine's recipes: NVIDIA/TransformerEngine@d0067d0
transformer_engine/common/recipe/__init__.py."""


@dataclass(frozen=True)
class LowPrecisionRate:
    """A GEMM format below 16 bits on one GPU.

    Attributes:
        format: one of :data:`LOW_PRECISION_FORMATS`.
        peak_flops: dense tensor-core peak in FLOP/s (datasheet).
        efficiency: achievable fraction of it for large GEMMs, in (0, 1].
        non_tn: the tensor cores take FP8 operands in any layout, so one FP8 copy of a tensor
            serves both the GEMM and its transpose (Blackwell); False: a separate transposed FP8
            copy is made (Hopper: Transformer Engine ``is_non_tn_fp8_gemm_supported``,
            NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/utils.py:658-663).
    """

    format: str
    peak_flops: float
    efficiency: float
    non_tn: bool = False

    def __post_init__(self) -> None:
        if self.format not in LOW_PRECISION_FORMATS:
            raise ValueError(
                f"unknown low-precision format {self.format!r}; use one of "
                f"{', '.join(LOW_PRECISION_FORMATS)}"
            )
        if not self.peak_flops > 0:
            raise ValueError(f"{self.format} peak_flops must be > 0, got {self.peak_flops!r}")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"{self.format} efficiency must be in (0, 1], got {self.efficiency!r}")


def _rates(value: object) -> tuple[LowPrecisionRate, ...]:
    """``value`` (rates, or their dicts as ``dataclasses.asdict`` wrote them) as a tuple."""
    items = list(value) if isinstance(value, (list, tuple)) else []
    return tuple(x if isinstance(x, LowPrecisionRate) else LowPrecisionRate(**x) for x in items)


@dataclass(frozen=True)
class ComputeSpec:
    """The compute side of one GPU model.

    Attributes:
        model: product name, e.g. ``"A100-SXM4-80GB"``.
        matmul_flops: dense fp16/bf16 tensor-core peak in FLOP/s (datasheet).
        fp32_flops: fp32 (non-tensor) peak in FLOP/s (datasheet).
        hbm_bandwidth_Bps: HBM peak in bytes/s (datasheet).
        sm_count: streaming multiprocessors (datasheet / whitepaper).
        matmul_efficiency: achievable fraction of peak for large GEMMs, in (0, 1].
        attention_efficiency: achievable fraction of ``matmul_flops`` for the fused attention
            kernel (forward + backward), in (0, 1].
        hbm_efficiency: achievable fraction of HBM peak, in (0, 1].
        kernel_overhead_s: fixed seconds per kernel.
        low_precision: the GEMM formats below 16 bits it runs (:class:`LowPrecisionRate`);
            empty: none (or not described).
    """

    model: str
    matmul_flops: float
    fp32_flops: float
    hbm_bandwidth_Bps: float
    sm_count: int
    matmul_efficiency: float
    attention_efficiency: float
    hbm_efficiency: float = DEFAULT_HBM_EFFICIENCY
    kernel_overhead_s: float = DEFAULT_KERNEL_OVERHEAD_S
    low_precision: tuple[LowPrecisionRate, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "low_precision", _rates(self.low_precision))
        for name in ("matmul_flops", "fp32_flops", "hbm_bandwidth_Bps", "sm_count"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("matmul_efficiency", "attention_efficiency", "hbm_efficiency"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)!r}")
        if self.kernel_overhead_s < 0:
            raise ValueError(f"kernel_overhead_s must be >= 0, got {self.kernel_overhead_s!r}")

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for GEMMs in ``dtype``: tensor-core peak for 16-bit, fp32 peak for fp32,
        the format's peak for a low-precision format (:data:`LOW_PRECISION_FORMATS`).

        Raises:
            ValueError: unknown dtype, or a low-precision format this GPU does not run.
        """
        if dtype in ("fp16", "bf16", "float16", "bfloat16"):
            return self.matmul_flops
        if dtype in ("fp32", "float32"):
            return self.fp32_flops
        return self.low_rate(dtype).peak_flops

    def low_rate(self, fmt: str) -> LowPrecisionRate:
        """The :class:`LowPrecisionRate` of format ``fmt``.

        Raises:
            ValueError: ``fmt`` is not a format this GPU runs (or not a dtype at all).
        """
        for rate in self.low_precision:
            if rate.format == fmt:
                return rate
        if fmt in LOW_PRECISION_FORMATS:
            runs = ", ".join(r.format for r in self.low_precision) or "none described"
            raise ValueError(f"{self.model} has no {fmt} GEMMs (low-precision formats: {runs})")
        raise ValueError(
            f"unknown dtype {fmt!r}; use one of fp32, fp16, bf16, "
            + ", ".join(LOW_PRECISION_FORMATS)
        )

    def runs(self, fmt: str) -> bool:
        """Whether this GPU runs GEMMs in low-precision format ``fmt``."""
        return any(r.format == fmt for r in self.low_precision)

    def matmul_rate(self, dtype: str) -> float:
        """Achieved FLOP/s of a large GEMM: ``peak_flops(dtype) * matmul_efficiency`` (the
        format's own efficiency for a low-precision format)."""
        if dtype in LOW_PRECISION_FORMATS:
            rate = self.low_rate(dtype)
            return rate.peak_flops * rate.efficiency
        return self.peak_flops(dtype) * self.matmul_efficiency

    def to_dict(self) -> dict:
        """``dataclasses.asdict`` of this spec, without ``low_precision`` when it is empty (so a
        trace's record of a 16-bit GPU is what it was before low precision existed);
        ``ComputeSpec(**d)`` reads it back."""
        out = asdict(self)
        if not self.low_precision:
            out.pop("low_precision")
        return out

    def without_low_precision(self) -> ComputeSpec:
        """This spec without its low-precision formats: what times 16- and 32-bit work (two
        specs that differ only there time a bf16 trace alike)."""
        return replace(self, low_precision=()) if self.low_precision else self

    def hbm_rate_Bps(self) -> float:
        """Achieved bytes/s of a memory-bound kernel: ``hbm_bandwidth_Bps * hbm_efficiency``."""
        return self.hbm_bandwidth_Bps * self.hbm_efficiency


def spec_from_gpu(gpu: object) -> ComputeSpec | None:
    """The :class:`ComputeSpec` a topology GPU carries (attribute ``compute``), or None."""
    return getattr(gpu, "compute", None)


def same_device(a: str, b: str) -> bool:
    """Whether two device names denote the same GPU type for timing purposes.

    The memory size suffix does not matter unless the HBM differs (A100 40 GB has HBM2 at
    1555 GB/s, 80 GB HBM2e at 2039 GB/s), so only exact names or a name that is a prefix of the
    other (``"V100"`` vs ``"V100-SXM2-16GB"``) are the same.
    """
    a, b = a.upper(), b.upper()
    return a == b or a.startswith(b + "-") or b.startswith(a + "-")

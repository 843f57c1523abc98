"""The ``gpu:`` key of a hardware description: the GPU type of every GPU of the server, its
peaks, efficiencies, low-precision formats, power caps, the overheads ``sim calibrate``
measures, and the memory a PyTorch process sees; its compute capability."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from sim.hardware.gpu_compute import (
    DEFAULT_HBM_EFFICIENCY,
    DEFAULT_KERNEL_OVERHEAD_S,
    ComputeSpec,
    LowPrecisionRate,
)
from sim.hardware.spec_fields import Bandwidth, Bytes, Flops, Seconds

_FLOORS = {
    "memory": (2.0**20, "bytes", "GiB"),
    "cuda_memory": (2.0**20, "bytes", "MiB"),
    "peak_flops": (1e6, "FLOP/s", "TFLOPS"),
    "hbm_bandwidth": (1e6, "B/s", "GB/s"),
}
"""Values below which a GPU figure is a unit left out, not a GPU (``memory: 80`` is 80
bytes): 1 MiB, 1 MFLOP/s, 1 MB/s, far under any device pipesim models, the calibrated CPU
ranks included (0.1 TFLOPS, 28 GB/s); with the unit the message suggests."""


class TPOverheadSpec(BaseModel):
    """Seconds one tensor-parallel module adds beyond its compute and collectives."""

    model_config = ConfigDict(extra="forbid")

    forward: Seconds = Field(default=0.0, ge=0, description="Per module, in a forward.")
    backward: Seconds = Field(default=0.0, ge=0, description="Per module, in a backward.")


class ActionOverheadSpec(BaseModel):
    """Seconds a pipeline runtime spends per action on a rank beyond the action's layers and
    its link transfers (``sim calibrate``: backends.torch.calibrate.runtime_costs)."""

    model_config = ConfigDict(extra="forbid")

    forward: Seconds = Field(default=0.0, ge=0, description="Per forward action (F).")
    backward: Seconds = Field(default=0.0, ge=0, description="Per backward action (B or I).")


class StepCostSpec(BaseModel):
    """Measured time of one optimizer's update on a rank: ``tensors * per_tensor +
    parameter bytes / bandwidth`` (``sim calibrate``: backends.torch.calibrate.runtime_costs)."""

    model_config = ConfigDict(extra="forbid")

    per_tensor: Seconds = Field(ge=0, description="Per parameter tensor, e.g. '6 us'.")
    bandwidth: Bandwidth = Field(
        gt=0, description="Parameter bytes updated per second beyond the per-tensor cost."
    )


class LowPrecisionSpec(BaseModel):
    """One GEMM format below 16 bits (sim.hardware.gpu_compute.LowPrecisionRate)."""

    model_config = ConfigDict(extra="forbid")

    peak_flops: Flops = Field(gt=0, description="Dense tensor-core peak, e.g. '1979 TFLOPS'.")
    matmul_efficiency: float = Field(
        gt=0, le=1, description="Achievable fraction of that peak for large GEMMs (cited)."
    )
    non_tn: bool = Field(
        default=False,
        description="The tensor cores take FP8 operands in any layout (Blackwell), so one FP8 "
        "copy serves a GEMM and its transpose; false (Hopper): a transposed copy is kept.",
    )


class PowerCapSpec(BaseModel):
    """A power limit with the throughput a source measured under it."""

    model_config = ConfigDict(extra="forbid")

    watts: float = Field(gt=0, description="The power limit in W.")
    matmul_scale: dict[str, float] = Field(
        description="Achieved GEMM rate under the cap over the uncapped one, per format that "
        "was measured ('bf16', 'fp8', 'mxfp8', 'nvfp4'); formats not listed are not sourced "
        "and keep their rate."
    )
    source: str = Field(description="Where the measurement is published.")


class GPUSpec(BaseModel):
    """The GPU type of every GPU of the server (hardware.md §1)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Product name, e.g. 'V100-SXM2-16GB'.")
    memory: Bytes = Field(gt=0, description="HBM capacity, e.g. '16 GiB' (bytes if a number).")
    peak_flops: Flops = Field(
        gt=0, description="Dense fp16/bf16 tensor peak, e.g. '125 TFLOPS' (FLOP/s if a number)."
    )
    hbm_bandwidth: Bandwidth = Field(
        gt=0, description="HBM bandwidth, e.g. '900 GB/s' (bytes/s if a number)."
    )
    fp32_flops: Flops | None = Field(
        default=None,
        gt=0,
        description="fp32 (non-tensor) peak, e.g. '15.7 TFLOPS'; default: peak_flops / 8 "
        "(the V100 ratio, an assumption). Used for fp32 traces.",
    )
    sm_count: int = Field(
        default=108,
        ge=1,
        description="Streaming multiprocessors (wave quantization of GEMMs); default 108 "
        "(A100, an assumption for other GPUs).",
    )
    matmul_efficiency: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Achievable fraction of peak for large GEMMs (measured MAMF where known; "
        "the default 0.8 is an assumption). See sim.hardware.gpu_compute.",
    )
    attention_efficiency: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Achievable fraction of the tensor peak for fused (flash) attention, "
        "forward + backward; the default 0.5 is an assumption.",
    )
    hbm_efficiency: float = Field(
        default=DEFAULT_HBM_EFFICIENCY,
        gt=0,
        le=1,
        description="Achievable fraction of HBM peak for memory-bound kernels (default: an "
        "assumption, sim.hardware.gpu_compute).",
    )
    kernel_overhead: Seconds = Field(
        default=DEFAULT_KERNEL_OVERHEAD_S,
        ge=0,
        description="Fixed cost per kernel (launch + dispatch), e.g. '5 us' (default: an "
        "assumption, sim.hardware.gpu_compute).",
    )
    compute_capability: float | None = Field(
        default=None,
        gt=0,
        description="CUDA compute capability (7.0 V100, 8.0 A100/A800, 9.0 H100/H200): the GPUs "
        "run NCCL, whose collectives and sends are timed by NCCL's own tuning model "
        "(sim.comm.nccl). Default: from `model` (COMPUTE_CAPABILITY; NVIDIA's CUDA GPU list), "
        "none for Blackwell models (NOT_DEFAULTED) and other models (then the links' latency "
        "and rate time them).",
    )
    nvls: bool = Field(
        default=False,
        description="NVLink SHARP (NVSwitch gen3 multicast) is available to NCCL, which then "
        "may run all-reduces as NVLS (sm90 and newer; one server).",
    )
    tp_module_overhead: TPOverheadSpec = Field(
        default_factory=TPOverheadSpec,
        description="Host seconds one tensor-parallel module (a column- or row-parallel linear, "
        "a sequence-parallel norm) adds per forward and backward beyond its compute and "
        "collectives: torch DTensor's dispatch, measured by `sim calibrate` "
        "(backends.torch.calibrate.comm). Default 0: Megatron's tensor parallelism runs plain "
        "tensors.",
    )
    action_overhead: ActionOverheadSpec = Field(
        default_factory=ActionOverheadSpec,
        description="Seconds the pipeline runtime adds to every forward and backward action on "
        "the rank's compute stream beyond its layers' profiled time and its link transfers "
        "(receive, dispatch, bookkeeping and send of our torch runtime), measured by `sim "
        "calibrate` on CPU ranks, where the host thread is the device. Default 0: on GPUs this "
        "is host time that runs ahead of the device (no cited value).",
    )
    optimizer_step: dict[str, StepCostSpec] = Field(
        default_factory=dict,
        description="Measured update time per optimizer ('sgd': the replay's plain SGD, "
        "'adam': torch.optim.Adam as constructed by default), by `sim calibrate`; it replaces "
        "the memory-bound estimate (parameters x bytes / hbm_bandwidth, sim.memory.states) "
        "for that optimizer. Default: none (the estimate).",
    )
    nccl_nvlink_bandwidth: Bandwidth | None = Field(
        default=None,
        gt=0,
        description="Per-direction bandwidth NCCL's kernels achieve over one NVLink of this GPU "
        "(NCCL src/graph/topo.h ncclTopoNVLinkBw: 20 GB/s on sm_70/sm_80, 20.6 on sm_90, of a "
        "25 GB/s line rate). An 'nvlink'/'nvswitch' link of `count` NVLinks then carries NCCL "
        "p2p and collectives at count x this, unless it gives `nccl_bandwidth`; raw copies keep "
        "the link's `bandwidth`. Default: none (NCCL at `bandwidth`).",
    )

    low_precision: dict[Literal["fp8", "mxfp8", "nvfp4"], LowPrecisionSpec] = Field(
        default_factory=dict,
        description="GEMM formats below 16 bits the tensor cores run, each with its dense peak "
        "and achievable fraction (sim.compute.precision chooses which GEMMs use them). "
        "Default: none described (low-precision recipes are then refused).",
    )
    power_caps: list[PowerCapSpec] = Field(
        default_factory=list,
        description="Power limits whose throughput cost a source measured (only those can be "
        "chosen with power_cap).",
    )
    power_cap: float | None = Field(
        default=None,
        gt=0,
        description="Run the GPUs under this power limit in W: one of power_caps' watts, whose "
        "measured GEMM slow-down then applies. Default: none (the GPU's default limit).",
    )

    @field_validator("memory", "cuda_memory", "peak_flops", "hbm_bandwidth")
    @classmethod
    def _a_unit_left_out(cls, value: float | None, info: ValidationInfo) -> float | None:
        floor, unit, meant = _FLOORS[str(info.field_name)]
        if value is not None and 0 < value < floor:
            raise ValueError(
                f"{value:g} {unit} is no GPU's figure: a number without a unit is in {unit}; "
                f"write the unit, e.g. '{value:g} {meant}'"
            )
        return value

    @model_validator(mode="after")
    def _known_cap(self) -> GPUSpec:
        if self.power_cap is not None and self._cap() is None:
            known = ", ".join(f"{c.watts:g} W" for c in self.power_caps) or "none"
            raise ValueError(
                f"power_cap {self.power_cap:g} W has no published throughput for {self.model} "
                f"(sourced caps: {known})"
            )
        return self

    def _cap(self) -> PowerCapSpec | None:
        return next((c for c in self.power_caps if c.watts == self.power_cap), None)

    def compute_spec(self) -> ComputeSpec:
        """The :class:`~sim.hardware.gpu_compute.ComputeSpec` of this GPU (under its
        ``power_cap``'s measured slow-down, if one is chosen)."""
        cap = self._cap()
        scale = cap.matmul_scale if cap is not None else {}
        low = tuple(
            LowPrecisionRate(fmt, x.peak_flops, x.matmul_efficiency * scale.get(fmt, 1.0), x.non_tn)
            for fmt, x in self.low_precision.items()
        )
        return ComputeSpec(
            model=self.model,
            matmul_flops=self.peak_flops,
            fp32_flops=self.fp32_flops or self.peak_flops / 8,
            hbm_bandwidth_Bps=self.hbm_bandwidth,
            sm_count=self.sm_count,
            matmul_efficiency=self.matmul_efficiency * scale.get("bf16", 1.0),
            attention_efficiency=self.attention_efficiency,
            hbm_efficiency=self.hbm_efficiency,
            kernel_overhead_s=self.kernel_overhead,
            low_precision=low,
        )

    # memory as a PyTorch process sees it (sim.hardware.capacity); defaults are sourced there
    cuda_memory: Bytes | None = Field(
        default=None,
        gt=0,
        description="Total memory as CUDA reports it (e.g. '16160 MiB' on a V100-SXM2-16GB); "
        "default: the sourced value for `model` in sim.hardware.capacity.CUDA_TOTAL_MIB, else "
        "`memory`.",
    )
    cuda_context: Bytes | None = Field(
        default=None, ge=0, description="CUDA context per process (default 400 MiB, memory.md §1)."
    )
    cublas_workspace: Bytes | None = Field(
        default=None,
        ge=0,
        description="cuBLAS workspace per GEMM stream (default 8.125 MiB; 32 MiB on Hopper).",
    )
    nccl_buffer: Bytes | None = Field(
        default=None, ge=0, description="NCCL_BUFFSIZE per channel and peer (default 4 MiB)."
    )
    nccl_channels: int | None = Field(
        default=None, ge=1, description="NCCL channels per communicator (default 4, assumed)."
    )
    allocator_margin: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="Share of the activation memory lost to the caching allocator, fixed (a "
        "calibrated figure); default: replay PyTorch's caching allocator rules "
        "(sim.memory.allocator) on each rank's tensors.",
    )


COMPUTE_CAPABILITY = {"V100": 7.0, "A100": 8.0, "A800": 8.0, "H100": 9.0, "H800": 9.0}
COMPUTE_CAPABILITY |= {"H200": 9.0, "RTX-3090": 8.6, "RTX-4090": 8.9}
COMPUTE_CAPABILITY |= {"B200": 10.0, "GB200": 10.0, "B300": 10.3, "GB300": 10.3}
"""Compute capability by model-name prefix (NVIDIA, "CUDA GPUs - Compute Capability",
developer.nvidia.com/cuda-gpus): V100 7.0, A100 8.0, H100 9.0, RTX 3090 8.6, RTX 4090 8.9,
B200 / GB200 10.0, B300 / GB300 10.3; the A800, H800 and H200 are the A100's and H100's dies.
No prefix is another's, so the order of the entries does not matter."""
NOT_DEFAULTED = frozenset({"B200", "GB200", "B300", "GB300"})
"""Prefixes of :data:`COMPUTE_CAPABILITY` that are not a GPU spec's default
(:func:`compute_capability`): a capability switches NCCL's tuning model on for the GPU's
collectives, and the DGX B200 and B300 presets leave it unset on purpose, their collectives
timed by the links and the measured tables of SimuMax's B200 node (dgx-b200.yaml,
dgx-b300.yaml), so a default would change their predictions (the GB200 and GB300 presets set
theirs). Counting NCCL's CTAs reads them still (:func:`model_capability`,
:func:`sim.comm.nccl_ctas.capability`)."""


def model_capability(model: str) -> float | None:
    """The :data:`COMPUTE_CAPABILITY` of GPU ``model``'s name prefix (every entry); None if
    no prefix matches.

    >>> model_capability("B300-SXM6-288GB"), model_capability("H100-SXM5-80GB")
    (10.3, 9.0)
    """
    return next((cc for p, cc in COMPUTE_CAPABILITY.items() if model.startswith(p)), None)


def compute_capability(g: GPUSpec) -> float | None:
    """``g.compute_capability``, else the :data:`COMPUTE_CAPABILITY` of its model's prefix
    unless that prefix is :data:`NOT_DEFAULTED`."""
    if g.compute_capability is not None:
        return g.compute_capability
    return next(
        (cc for p, cc in COMPUTE_CAPABILITY.items()
         if g.model.startswith(p) and p not in NOT_DEFAULTED),
        None,
    )  # fmt: skip

"""The hardware description as YAML: its pydantic models (built into a :class:`Topology` by
:mod:`sim.hardware.build`).

A hardware file names one server: a GPU type and how many, the CPU sockets (hosts) with their
DRAM, the NUMA socket of each GPU, switch nodes, and the physical links between nodes::

    name: dgx1-v100-16gb
    description: ...            # sources, and which numbers are peak and which effective
    gpu: {model: V100-SXM2-16GB, memory: 16 GiB, peak_flops: 125 TFLOPS, hbm_bandwidth: 900 GB/s}
    num_gpus: 8
    hosts: [{name: cpu0, dram: 256 GiB}, {name: cpu1, dram: 256 GiB}]
    gpu_hosts: [cpu0, cpu0, cpu0, cpu0, cpu1, cpu1, cpu1, cpu1]
    switches: [sw0, sw1, sw2, sw3]
    links:
      - {a: gpu0, b: gpu3, bandwidth: 48 GB/s, latency: 10 us, kind: nvlink, count: 2}

GPU nodes are named ``gpu0`` ... ``gpu<num_gpus-1>``. Quantities accept unit strings
(``25 GB/s``, ``16 GiB``, ``10 us``, ``125 TFLOPS``; see :mod:`sim.units`) or bare numbers in
base units (bytes, bytes/s, seconds, FLOP/s). A link's ``bandwidth`` is the per-direction
bandwidth of the whole connection, i.e. of all ``count`` bundled links together (an NV2 pair on
DGX-1 says ``bandwidth: 48 GB/s, count: 2``): the rate of raw copies. NCCL's p2p and collectives
get less of an NVLink (SM copies of 128-byte payloads; NVIDIA/nccl-tests#149): ``count`` NVLinks
at ``gpu.nccl_nvlink_bandwidth`` each (:func:`sim.hardware.build.nccl_bandwidth_Bps`). An undirected link
(the default) becomes two directed :class:`Link` s, ``a->b`` then ``b->a``.

``base: PRESET`` (resolved by :func:`sim.hardware.loader.load_hardware_spec`, before
validation) starts from a preset and overrides its keys: mappings merge key by key, lists and
scalars replace the preset's value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from sim.hardware.comm_tables import CollectiveTable
from sim.hardware.fabric import RailFatTree
from sim.hardware.gpu_compute import (
    DEFAULT_HBM_EFFICIENCY,
    DEFAULT_KERNEL_OVERHEAD_S,
    ComputeSpec,
    LowPrecisionRate,
)
from sim.hardware.host_ops import HostOverhead
from sim.units import parse_bandwidth, parse_bytes, parse_flops, parse_seconds

NODE_NAME = r"^[A-Za-z][A-Za-z0-9_.-]*$"
LinkKind = Literal[
    "nvlink", "nvswitch", "pcie", "qpi", "upi", "xgmi", "network", "loopback", "link"
]


def _quantity(parse: Callable[[str | float], float], example: str) -> BeforeValidator:
    def convert(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"expected a quantity such as '{example}' or a number, got {value!r}")
        number = parse(value)
        if not math.isfinite(number):
            raise ValueError(f"must be finite, got {value!r}")
        return number

    return BeforeValidator(convert)


Bytes = Annotated[float, _quantity(parse_bytes, "16 GiB")]
Bandwidth = Annotated[float, _quantity(parse_bandwidth, "25 GB/s")]
Seconds = Annotated[float, _quantity(parse_seconds, "10 us")]
Flops = Annotated[float, _quantity(parse_flops, "125 TFLOPS")]


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
        "none for other models (then the links' latency and rate time them).",
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
"""Compute capability by model-name prefix (NVIDIA, "CUDA GPUs - Compute Capability",
developer.nvidia.com/cuda-gpus): V100 7.0, A100 8.0, H100 9.0, RTX 3090 8.6, RTX 4090 8.9; the
A800, H800 and H200 are the A100's and H100's dies."""


def compute_capability(g: GPUSpec) -> float | None:
    """``g.compute_capability``, else the :data:`COMPUTE_CAPABILITY` of its model's prefix."""
    if g.compute_capability is not None:
        return g.compute_capability
    return next((cc for p, cc in COMPUTE_CAPABILITY.items() if g.model.startswith(p)), None)


class CollectiveTableSpec(BaseModel):
    """Measured times of one collective over ``ranks`` members (sim.hardware.comm_tables)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["allreduce", "all_gather", "reduce_scatter", "alltoall"] = Field(
        description="The collective (``alltoall``: a balanced all-to-all, sim.comm.alltoall)."
    )
    ranks: int = Field(ge=2, description="Communicator size it was measured with.")
    sizes: list[Bytes] = Field(
        min_length=1,
        description="Increasing message sizes, nccl-tests' B (all-reduce buffer, all-gather "
        "output, reduce-scatter input, all-to-all send buffer per rank), e.g. '1 MiB'.",
    )
    times: list[Seconds] = Field(
        min_length=1, description="Median time at each size, e.g. '120 us'."
    )
    source: str = Field(default="", description="Where and how it was measured.")
    servers: int = Field(
        default=1,
        ge=1,
        description="Servers the measured communicator spanned (1: inside one server); the "
        "table holds only for communicators of `ranks` over that many servers.",
    )

    def table(self) -> CollectiveTable:
        """The :class:`~sim.hardware.comm_tables.CollectiveTable`.

        Raises:
            ValueError: sizes not increasing or lengths differ.
        """
        return CollectiveTable(
            self.kind, self.ranks, tuple(self.sizes), tuple(self.times), self.source, self.servers
        )


class HostSpec(BaseModel):
    """One CPU socket (NUMA node) and the DRAM attached to it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NODE_NAME, description="Node name, e.g. 'cpu0'.")
    dram: Bytes = Field(ge=0, description="DRAM installed on this socket, e.g. '256 GiB'.")
    usable_dram: Bytes | None = Field(
        default=None,
        ge=0,
        description="DRAM the OS gives processes (MemTotal); default: `dram` less the kernel's "
        "page map, 1/64 of it (sim.hardware.host_memory.os_usable_bytes).",
    )
    adam_params_per_s: float = Field(
        default=1.84e9,
        gt=0,
        description="CPU Adam throughput of this socket in parameters/s (offloaded optimizer "
        "steps). Default 1.84e9: half of the 3.675e9 params/s DeepSpeed's CPU-Adam reaches on a "
        "DGX-2 host (2x Xeon Platinum 8168, DDR4-2666; ZeRO-Offload, Ren et al. ATC'21, Tables 2 "
        "and 4, least squares over its 1-10B rows: sim.memory.host_adam.REN_TABLE4); presets "
        "scale it per CPU by peak DRAM bandwidth (sim.memory.host_adam.dram_scaled_rate).",
    )


class LinkSpec(BaseModel):
    """A physical connection between two nodes (both directions unless ``directed``)."""

    model_config = ConfigDict(extra="forbid")

    a: str = Field(description="One end: 'gpu<i>', a host name or a switch name.")
    b: str = Field(description="The other end (the destination when directed).")
    bandwidth: Bandwidth = Field(
        gt=0,
        description="Per-direction bandwidth of the whole connection (all `count` links "
        "together), e.g. '48 GB/s'.",
    )
    latency: Seconds = Field(
        default=10e-6,
        ge=0,
        description="Fixed cost per transfer crossing this link, e.g. '10 us'. The default is "
        "the ~10 us per copy of hardware.md §6 (an unverified estimate).",
    )
    kind: LinkKind = Field(default="link", description="Technology, e.g. 'nvlink' or 'pcie'.")
    count: int = Field(
        default=1,
        ge=1,
        description="Number of bundled physical links (NV2 = 2); sets NCCL's rate over NVLink "
        "(count x gpu.nccl_nvlink_bandwidth).",
    )
    directed: bool = Field(
        default=False, description="Only the direction a -> b (default: both directions)."
    )
    nccl_bandwidth: Bandwidth | None = Field(
        default=None,
        gt=0,
        description="Per-direction bandwidth NCCL's p2p and collectives achieve over this "
        "connection; default: `count` x gpu.nccl_nvlink_bandwidth for NVLink/NVSwitch links when "
        "that is given, else `bandwidth`.",
    )


class HostOverheadSpec(BaseModel):
    """What issuing one op costs a training process's CPU thread (:mod:`sim.hardware.host_ops`):
    the host side of eager PyTorch. Every GPU's process pays it; the device runs an op only
    once it has been issued."""

    model_config = ConfigDict(extra="forbid")

    op: Seconds = Field(
        ge=0,
        description="Host time per op of a forward (Python, dispatcher, autograd recording, "
        "kernel launch), per op as traces count them (fwd_ops), e.g. '10 us'.",
    )
    backward_op: Seconds = Field(
        ge=0, description="Host time per op the autograd engine dispatches in a backward."
    )
    nograd_op: Seconds | None = Field(
        default=None,
        ge=0,
        description="Host time per op of a forward without autograd recording (the first "
        "forward of a checkpointed layer); default: `op`.",
    )
    checkpoint: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time of the activation-checkpoint wrapper per checkpointed region "
        "and micro-batch, besides the ops it re-runs.",
    )
    read: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time of a blocking read of a device scalar (.item()) besides its "
        "op: the device-to-host copy of a few bytes and the wait for it, e.g. '10 us'.",
    )
    module: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time per nn.Module call besides its ops (e.g. '2 us'); sim calibrate "
        "measures it.",
    )
    function: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time per torch.autograd.Function apply besides its ops.",
    )
    function_backward: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time per Python backward node (a Function's backward) the autograd "
        "engine calls, besides its ops.",
    )
    te_module: Seconds = Field(
        default=0.0,
        ge=0,
        description="Host time a Transformer Engine module's forward adds over a torch.nn.Linear "
        "forward (NVIDIA/TransformerEngine#2053), charged per TE module of a layer run with "
        "--transformer-impl transformer_engine.",
    )
    launch: Seconds | None = Field(
        default=None,
        ge=0,
        description="Host time per kernel launched from C++ without a Python-level op around it "
        "(cuLaunchKernel, a cuBLASLt GEMM in an extension's per-expert loop); default: 3.0/9.8 "
        "of `op` (dgx-h100's split).",
    )
    mode: Literal["eager", "cuda_graphs"] = Field(
        default="eager",
        description="'eager' (every op costs the host) or 'cuda_graphs' (captured regions are "
        "replayed by one launch: per-op host cost 0).",
    )
    cpu: str = Field(default="", description="The host CPU these numbers belong to.")
    source: str = Field(default="", description="Measurement or citation, with assumptions.")

    def overhead(self) -> HostOverhead:
        """The :class:`~sim.hardware.host_ops.HostOverhead` this describes."""
        return HostOverhead(
            self.op,
            self.backward_op,
            self.checkpoint,
            self.nograd_op,
            self.mode,
            self.cpu,
            self.source,
            self.read,
            module_s=self.module,
            function_s=self.function,
            function_backward_s=self.function_backward,
            te_module_s=self.te_module,
            launch_s=self.launch,
        )


class NetworkSpec(BaseModel):
    """The network between the servers of a multi-server description: one NIC per GPU, GPU
    ``i`` of every server on rail ``i``, leaf and spine switches (:mod:`sim.hardware.fabric`)."""

    model_config = ConfigDict(extra="forbid")

    nic_bandwidth: Bandwidth = Field(
        gt=0,
        description="Per-direction bandwidth of each GPU's NIC and of each switch port, e.g. "
        "'50 GB/s' (400 Gb/s NDR) or '25 GB/s' (200 Gb/s HDR).",
    )
    latency: Seconds = Field(
        default=1e-6,
        ge=0,
        description="Fixed cost per network link crossed, e.g. '1 us' (NIC and switch port "
        "latencies are below 1 us on InfiniBand; the preset says its source). NCCL's own "
        "network latency (sim.comm.nccl) times NCCL's sends and collectives.",
    )
    servers_per_leaf: int = Field(
        default=32,
        ge=1,
        description="Servers per scalable unit, i.e. per rail leaf switch (DGX SuperPOD: 20 "
        "DGX A100, 32 DGX H100).",
    )
    oversubscription: float = Field(
        default=1.0,
        ge=1.0,
        description="A leaf's downlink bandwidth over its uplink bandwidth (1: a full fat "
        "tree; 2: half as many uplinks as servers).",
    )
    technology: str = Field(
        default="", description="What the network is, e.g. 'InfiniBand NDR 400 Gb/s'."
    )
    nccl_nic_bandwidth: Bandwidth | None = Field(
        default=None,
        gt=0,
        description="The rate NCCL's graph search gives a GPU's path to its NIC: the NIC's "
        "speed, or the GPU's PCIe link when slower as NCCL reads it (gen4 x16 24 GB/s, gen5 "
        "x16 48 GB/s: NCCL src/graph/xml.h kvDictPciGen, width x speed / 80); default: "
        "nic_bandwidth. NCCL's sends and collectives cross the NIC at this rate.",
    )

    def fabric(self, servers: int, gpus_per_server: int) -> RailFatTree:
        """The :class:`~sim.hardware.fabric.RailFatTree` this describes for ``servers``."""
        return RailFatTree(
            servers,
            gpus_per_server,
            self.nic_bandwidth,
            self.latency,
            self.servers_per_leaf,
            self.oversubscription,
            self.technology,
            self.nccl_nic_bandwidth,
        )


class HardwareSpec(BaseModel):
    """A server: the YAML form of a :class:`~sim.hardware.topology.Topology`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Preset or user name of the server.")
    description: str = Field(default="", description="Free text: sources, peak vs effective.")
    base: str | None = Field(
        default=None,
        description="Preset this description starts from; its keys override the preset's "
        "(mappings merge, lists replace).",
    )
    gpu: GPUSpec = Field(description="The GPU type (all GPUs are alike).")
    num_gpus: int = Field(ge=1, description="Number of GPUs, named gpu0 ... gpu<num_gpus-1>.")
    hosts: list[HostSpec] = Field(min_length=1, description="CPU sockets with their DRAM.")
    gpu_hosts: list[str] | None = Field(
        default=None,
        description="Host (NUMA socket) of each GPU, one per GPU; default: the first host.",
    )
    switches: list[str] = Field(
        default_factory=list, description="Switch node names (PCIe switches, 'nvswitch')."
    )
    links: list[LinkSpec] = Field(default_factory=list, description="Physical connections.")
    servers: int = Field(
        default=1,
        ge=1,
        description="Identical servers of this description joined by `network` (GPU i of "
        "server n is gpu<n*num_gpus + i>; sim.hardware.cluster). The preset name 'Nx-PRESET' "
        "(e.g. '2x-dgx-h100') sets it.",
    )
    network: NetworkSpec | None = Field(
        default=None, description="The network between servers (needed when servers > 1)."
    )
    collectives: list[CollectiveTableSpec] = Field(
        default_factory=list,
        description="Measured collective times of this machine's library by size (written by "
        "`sim calibrate`); a communicator of the measured size uses them instead of a model.",
    )
    host_overhead: HostOverheadSpec | None = Field(
        default=None,
        description="Host time per op of eager PyTorch on this server's CPU (every socket "
        "alike); default: the host is not modelled (ops are issued in no time).",
    )

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

Its keys' models live one concept a module: :mod:`sim.hardware.gpu_spec` (``gpu:``),
:mod:`sim.hardware.host_spec` (``hosts:``, ``host_overhead:``),
:mod:`sim.hardware.interconnect_spec` (``links:``, ``network:``, ``collectives:``), over the
field types of :mod:`sim.hardware.spec_fields`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sim.hardware.gpu_spec import GPUSpec
from sim.hardware.host_spec import HostOverheadSpec, HostSpec
from sim.hardware.interconnect_spec import CollectiveTableSpec, LinkSpec, NetworkSpec


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

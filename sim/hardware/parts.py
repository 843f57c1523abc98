"""The parts of a :class:`~sim.hardware.topology.Topology`: its GPUs, its host CPU sockets, and the
directed links between nodes."""

from __future__ import annotations

from dataclasses import dataclass

from sim.hardware.capacity import NO_RESERVE, RuntimeReserve
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.host_ops import NO_HOST, HostOverhead


@dataclass(frozen=True)
class GPU:
    """One GPU.

    Attributes:
        name: node name, ``gpu<i>``.
        model: product name, e.g. ``V100-SXM2-16GB``.
        memory_bytes: usable capacity in bytes: the total CUDA reports (below the datasheet
            figure; :mod:`sim.hardware.capacity`).
        peak_flops: dense fp16/bf16 tensor peak in FLOP/s (hardware.md §1).
        hbm_bandwidth_Bps: HBM bandwidth in bytes/s.
        host: name of the CPU socket whose DRAM is this GPU's host memory.
        compute: the compute model's view of the GPU (:mod:`sim.hardware.gpu_compute`), or None.
        reserve: what a training process holds besides tensors (context, cuBLAS, NCCL,
            allocator margin, working memory; :mod:`sim.hardware.capacity`). Hardware files get
            the sourced defaults; a GPU built in code counts tensors only unless given one.
        compute_capability: CUDA compute capability (7.0, 8.0, 9.0 ...): the GPU runs NCCL,
            whose collectives and sends are timed by NCCL's own model
            (:mod:`sim.comm.nccl`); None (CPU ranks, GPUs built in code): the links' latency
            and rate alone.
        nvls: NVLink SHARP (NVSwitch multicast) is available to NCCL on this GPU's server.
        tp_module_overhead_s: ``(forward, backward)`` seconds one tensor-parallel module adds
            beyond its compute and collectives (torch DTensor's dispatch, measured by ``sim
            calibrate``; 0 for Megatron's plain-tensor parallelism; :mod:`sim.parallel.shard`).
        action_overhead_s: ``(forward, backward)`` seconds the pipeline runtime adds to each
            F and each B or I on this GPU's compute stream beyond the layers and the link
            transfers (measured on CPU ranks by ``sim calibrate``; 0 elsewhere;
            :mod:`sim.engine.actions`).
        step_costs: measured optimizer updates, ``(optimizer, seconds per parameter tensor,
            parameter bytes per second)`` each (:meth:`step_cost`); empty: the memory-bound
            estimate of :mod:`sim.memory.states`.
    """

    name: str
    model: str
    memory_bytes: float
    peak_flops: float
    hbm_bandwidth_Bps: float
    host: str
    compute: ComputeSpec | None = None
    reserve: RuntimeReserve = NO_RESERVE
    compute_capability: float | None = None
    nvls: bool = False
    tp_module_overhead_s: tuple[float, float] = (0.0, 0.0)
    action_overhead_s: tuple[float, float] = (0.0, 0.0)
    step_costs: tuple[tuple[str, float, float], ...] = ()

    @property
    def memory_bound_Bps(self) -> float:
        """Achieved bytes/s of a memory-bound kernel on this GPU: the compute model's
        :meth:`~sim.hardware.gpu_compute.ComputeSpec.hbm_rate_Bps` (peak x ``hbm_efficiency``),
        as the kernel model times norms and element-wise kernels; the peak without one."""
        return self.compute.hbm_rate_Bps() if self.compute is not None else self.hbm_bandwidth_Bps

    def step_cost(self, optimizer: str) -> tuple[float, float] | None:
        """``(seconds per parameter tensor, parameter bytes per second)`` of ``optimizer``'s
        measured update on this GPU, or None when it was not measured.

        Example:
            >>> g = GPU("gpu0", "cpu-rank", 1e9, 1e11, 1e10, "cpu0", step_costs=(("sgd", 5e-6, 4e9),))
            >>> g.step_cost("sgd"), g.step_cost("adam")
            ((5e-06, 4000000000.0), None)
        """
        for name, per_tensor_s, bandwidth_Bps in self.step_costs:
            if name == optimizer:
                return per_tensor_s, bandwidth_Bps
        return None


@dataclass(frozen=True)
class Host:
    """One CPU socket with its DRAM.

    Attributes:
        name: node name, ``cpu<i>``.
        dram_bytes: DRAM of this socket that processes can use (``MemTotal``'s share), in
            bytes (:func:`sim.hardware.host_memory.os_usable_bytes` of the installed DRAM).
        adam_params_per_s: CPU Adam throughput in parameters per second (for offloaded
            optimizer steps); default: a DGX-2 socket's (``HostSpec.adam_params_per_s``).
        overhead: what issuing an op costs a training process on this socket
            (:mod:`sim.hardware.host_ops`); :data:`~sim.hardware.host_ops.NO_HOST` when not modelled.
    """

    name: str
    dram_bytes: float
    adam_params_per_s: float = 1.84e9
    overhead: HostOverhead = NO_HOST


@dataclass(frozen=True)
class Link:
    """One direction of a physical connection.

    Attributes:
        name: unique name, ``"<src>-><dst>"``.
        src: source node name.
        dst: destination node name.
        bandwidth_Bps: bytes per second in this direction (effective, not peak, unless the
            preset says otherwise): the rate of raw copies (``cudaMemcpy``, copy engines:
            swaps, chunk moves, host offload).
        latency_s: fixed cost per transfer in seconds.
        kind: ``nvlink``, ``nvswitch``, ``pcie``, ``qpi``, ``loopback`` ...
        nccl_bandwidth_Bps: bytes per second NCCL's kernels achieve over this link (p2p
            send/receive and collectives), or None for ``bandwidth_Bps``. NCCL moves data with
            SM copies of 128-byte payloads, copy engines with 256-byte ones, so NCCL gets less
            of an NVLink than a raw copy (~20 of 25 GB/s per NVLink; NCCL ``src/graph/topo.h``,
            NVIDIA/nccl-tests#149): see :mod:`sim.hardware.spec`.
    """

    name: str
    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float
    kind: str = "link"
    nccl_bandwidth_Bps: float | None = None

    def rate_Bps(self, nccl: bool = False) -> float:
        """Bytes/s this link carries a transfer at: NCCL's rate (``nccl_bandwidth_Bps`` when
        known) for NCCL traffic, ``bandwidth_Bps`` for raw copies and where NCCL's is unknown."""
        if nccl and self.nccl_bandwidth_Bps is not None:
            return self.nccl_bandwidth_Bps
        return self.bandwidth_Bps

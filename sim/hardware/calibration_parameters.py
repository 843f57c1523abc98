"""The hardware parameters ``sim calibrate --from-runs`` may fit (:data:`PARAMETERS`): each a
field of a hardware description (:mod:`sim.hardware.overlay` writes the fitted values), with
physical bounds; the table and the fit are :mod:`sim.calibrate_runs`'s module doc."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parameter:
    """One declared parameter (module doc).

    Attributes:
        name: short name.
        section, key: where it lives in a hardware description.
        low, high: bounds, in the unit of ``value`` (absolute, or a factor of the preset's
            value when ``relative``).
        relative: bounds are factors of the preset's value.
        floor: the prior's smallest width (for a preset value of 0), in the value's unit.
        multi_server: only meaningful with runs across servers.
        what: what it is.
        also: further keys of the section scaled by the same factor (relative parameters).
    """

    name: str
    section: str
    key: str
    low: float
    high: float
    relative: bool = False
    floor: float = 0.0
    multi_server: bool = False
    what: str = ""
    also: tuple[str, ...] = ()


PARAMETERS: tuple[Parameter, ...] = (
    Parameter("gemm", "gpu", "matmul_efficiency", 0.2, 1.0,
              what="large-GEMM fraction of the bf16/fp16 tensor peak"),
    Parameter("attention", "gpu", "attention_efficiency", 0.1, 1.0,
              what="fused attention's fraction of the tensor peak"),
    Parameter("memory_bound", "gpu", "hbm_efficiency", 0.3, 1.0,
              what="memory-bound kernels' fraction of HBM bandwidth"),
    Parameter("kernel_overhead", "gpu", "kernel_overhead", 0.0, 100e-6, floor=2e-6,
              what="host dispatch and launch time per kernel (s)"),
    Parameter("host_op", "host_overhead", "op", 0.3, 5.0, relative=True,
              what="eager PyTorch's host time per op", also=("nograd_op", "backward_op")),
    Parameter("nvlink_busbw", "gpu", "nccl_nvlink_bandwidth", 0.3, 1.2, relative=True,
              what="NCCL's bytes/s per NVLink"),
    Parameter("network_busbw", "network", "nccl_nic_bandwidth", 0.3, 1.0, relative=True,
              multi_server=True, what="NCCL's bytes/s to the NIC"),
    Parameter("network_latency", "network", "latency", 0.0, 20e-6, floor=1e-6,
              multi_server=True, what="latency per network link crossed (s)"),
)  # fmt: skip
"""The declared set (module doc)."""
NOT_MODELLED = {
    "overlap_efficiency": "how much of a collective hides under compute: pipesim has no "
    "overlap model for Megatron's buckets yet (issue 26 item 2)",
}
"""Parameters the issue names that the model cannot take yet, and why."""

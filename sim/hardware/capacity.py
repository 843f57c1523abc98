"""What a GPU really offers a PyTorch training process: usable capacity and the runtime reserve.

A "16 GB" GPU does not give a training process 16 GiB of tensors:

* **usable capacity** is what CUDA reports as the device's total (``cudaMemGetInfo`` /
  ``torch.cuda.get_device_properties(i).total_memory``), below the datasheet figure
  (:data:`CUDA_TOTAL_MIB`);
* a **runtime reserve** is taken before the first tensor: the CUDA context, the cuBLAS
  workspace of each stream that runs GEMMs, and NCCL's buffers (per channel and per peer of
  each communicator) (:class:`RuntimeReserve`);
* the caching **allocator** rounds and fragments: a share of the activation memory, which
  churns every micro-batch, is lost on top of it (:attr:`RuntimeReserve.allocator_margin`).

Every default below names its source; ``sim calibrate --device cuda`` measures them on the
machine at hand. Numbers marked *unverified* come from secondary reports or general knowledge.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 2**20

CUDA_TOTAL_MIB: dict[str, tuple[float, str]] = {
    "V100-SXM2-16GB": (
        16160,
        "torch.cuda.get_device_properties: total_memory=16160MB on a "
        "Tesla V100-SXM2-16GB (torch 1.8.1+cu101, YOLOv5 profile output "
        "quoted publicly); issue 12 quotes the same 16,160 MiB",
    ),
    "V100-SXM2-32GB": (
        32480,
        "nvidia-smi 32480MiB on Tesla V100-SXM2 32 GB, driver 418.116 "
        "(godweiyang/GrabGPU#5); CUDA total assumed equal (unverified)",
    ),
    "V100-SXM3-32GB": (32480, "assumed equal to V100-SXM2-32GB (unverified)"),
    "A100-SXM4-40GB": (
        40339,
        "deviceQuery: 'Total amount of global memory: 40339 MBytes "
        "(42298834944 bytes)', CUDA 12.2 driver "
        "(bottlerocket-os/bottlerocket#3873); nvidia-smi shows 40960MiB "
        "(modal-labs/modal-client#2797)",
    ),
    "A100-SXM4-80GB": (
        81050,
        "torch OOM messages '79.15 GiB total capacity' on A100 80GB "
        "(widely quoted; nvidia-smi 81920MiB, modal-labs/modal-client#2797)",
    ),
    "H100-SXM5-80GB": (
        81559,
        "nvidia-smi 81559MiB (NVIDIA/nccl#1264, wilicc/gpu-burn#114); "
        "CUDA's total is somewhat lower (unverified): calibrate measures it",
    ),
    "H200-SXM-141GB": (
        143155,
        "torch OOM messages 'GPU 0 has a total capacity of 139.80 GiB' on "
        "8xH200 runs (public logs; unverified); nvidia-smi 143771MiB "
        "(issue 12, unverified)",
    ),
    "RTX-4090-24GB": (24217, "torch '23.65 GiB total capacity' on RTX 4090 (unverified)"),
    "B200-SXM-180GB": (
        182642,
        "hashcat's device header 'Name: NVIDIA B200, ... Memory.Total: 182642 MB' (the CUDA "
        "device's global memory in MiB); nvidia-smi shows 183359MiB (public logs, "
        "/work/research/gpus/gpus.yaml b200-smi)",
    ),
    "GB200-186GB": (
        189471,
        'MLPerf Training v5.1 GB200 system JSON: "accelerator_memory_capacity": "189471 MiB" '
        "(an nvidia-smi figure; CUDA's total is somewhat lower, unverified: calibrate measures "
        "it)",
    ),
}
"""CUDA-visible total memory in MiB per GPU model, with its source."""


def cuda_total_bytes(model: str, datasheet_bytes: float) -> tuple[float, str]:
    """``(bytes, source)``: what CUDA reports as ``model``'s total memory.

    Falls back to ``datasheet_bytes`` (the preset's ``memory``) for a model not in
    :data:`CUDA_TOTAL_MIB`, and says so in the source.
    """
    entry = CUDA_TOTAL_MIB.get(model)
    if entry is None:
        return datasheet_bytes, f"no CUDA-reported total known for {model!r}: datasheet memory"
    mib, source = entry
    return mib * MIB, source


CUDA_CONTEXT_BYTES = 400 * MIB
"""CUDA context of one process on one GPU: ~300-500 MB on V100/A100 with CUDA 11/12
(memory.md §1, an unverified estimate); 400 MiB is its middle."""

CUBLAS_WORKSPACE_BYTES = {"pre-hopper": 4096 * 1024 * 2 + 16 * 1024 * 8, "hopper": 32 * MIB}
"""cuBLAS workspace per stream that runs GEMMs. PyTorch's default ``CUBLAS_WORKSPACE_CONFIG``
is ``:4096:2:16:8`` (2 x 4 MiB + 8 x 16 KiB = 8.125 MiB; torch docs, "Reproducibility" /
``torch.use_deterministic_algorithms``), 32 MiB on Hopper, as cuBLAS recommends for sm90
(cuBLAS docs, ``cublasSetWorkspace``). Unverified for torch 2.13."""

NCCL_BUFFSIZE_BYTES = 4 * MIB
"""``NCCL_BUFFSIZE`` default, 4 MiB per channel, per peer, per direction (NCCL docs,
Environment Variables)."""

NCCL_CHANNELS = 4
"""NCCL channels per communicator. NCCL picks it from the topology; 4 is an assumption
(unverified) for NVLink servers, which ``sim calibrate`` replaces with a measurement."""

ALLOCATOR_MARGIN = 0.05
"""Caching-allocator overhead (rounding to 512 B blocks, fragmentation) as a share of the
activation memory, whose allocations churn every micro-batch (model states are allocated once),
used while policies plan (before the replay of the caching allocator's rules,
:func:`sim.memory.tensor_program.allocator_margin_bytes`, gives the finalized plan's margin).
Megatron's memory estimator multiplies its activation estimate by 1.05
(``theoretical_memory_usage.py``, memory.md §2); the CUDA caching allocator rounds to 512 B
(memory.md §1)."""


def is_sm90_or_later(model: str) -> bool:
    """True for GPUs of compute capability 9.0 or later: Hopper (H100, H200, GH200) and
    Blackwell (B200, B300, GB200, GB300), by the model name's prefix."""
    name = model.upper()
    return name.startswith(("H100", "H200", "GH200", "B100", "B200", "B300", "GB200", "GB300"))


def is_hopper(model: str) -> bool:
    """True for Hopper GPUs (H100, H200, GH200), which get the 32 MiB cuBLAS workspace."""
    name = model.upper()
    return name.startswith(("H100", "H200", "GH200"))


@dataclass(frozen=True)
class RuntimeReserve:
    """What a training process holds on one GPU besides its tensors.

    Attributes:
        cuda_context_bytes: the CUDA context (:data:`CUDA_CONTEXT_BYTES`).
        cublas_workspace_bytes: cuBLAS workspace per stream running GEMMs
            (:data:`CUBLAS_WORKSPACE_BYTES`).
        nccl_buffer_bytes: NCCL buffer per channel and peer (:data:`NCCL_BUFFSIZE_BYTES`).
        nccl_channels: channels per communicator (:data:`NCCL_CHANNELS`).
        allocator_margin: allocator overhead as a share of the activation memory, fixed (a
            calibrated or hand-set figure); None: the replay of PyTorch's caching allocator
            (:mod:`sim.memory.allocator`) on the finalized plan, :data:`ALLOCATOR_MARGIN` while
            planning.
        working: whether stages also charge their working memory (backward transients,
            pipeline output cache, DDP buckets; :mod:`sim.memory.reserve`).

    ``RuntimeReserve()`` has the sourced defaults; :data:`NO_RESERVE` counts tensors only (the
    bare model of the reference formulas, and the default of a hand-built
    :class:`~sim.hardware.parts.GPU`).
    """

    cuda_context_bytes: float = CUDA_CONTEXT_BYTES
    cublas_workspace_bytes: float = CUBLAS_WORKSPACE_BYTES["pre-hopper"]
    nccl_buffer_bytes: float = NCCL_BUFFSIZE_BYTES
    nccl_channels: int = NCCL_CHANNELS
    allocator_margin: float | None = None
    working: bool = True

    def nccl_bytes(self, peers: int) -> float:
        """NCCL buffers for ``peers`` (communicator, peer) pairs:
        ``NCCL_BUFFSIZE x channels x peers``."""
        return self.nccl_buffer_bytes * self.nccl_channels * peers

    def runtime_bytes(self, peers: int, gemm_streams: int = 1) -> float:
        """Context + cuBLAS workspaces + NCCL buffers, in bytes."""
        return (
            self.cuda_context_bytes
            + self.cublas_workspace_bytes * gemm_streams
            + self.nccl_bytes(peers)
        )

    def allocator_bytes(self, activation_bytes: float) -> float:
        """Bytes the allocator loses on top of ``activation_bytes`` of activation memory, as a
        planning estimate (``allocator_margin``, else :data:`ALLOCATOR_MARGIN`)."""
        share = ALLOCATOR_MARGIN if self.allocator_margin is None else self.allocator_margin
        return share * activation_bytes

    @property
    def replays_allocator(self) -> bool:
        """Whether finalized plans take the allocator's margin from the replay of its rules
        (no fixed ``allocator_margin``, and tensors beyond the model's are counted)."""
        return self.allocator_margin is None and self.working


NO_RESERVE = RuntimeReserve(
    cuda_context_bytes=0.0,
    cublas_workspace_bytes=0.0,
    nccl_buffer_bytes=0.0,
    allocator_margin=0.0,
    working=False,
)
"""Tensors only: no runtime reserve, no allocator margin, no working memory."""


def default_reserve(model: str) -> RuntimeReserve:
    """The sourced defaults for a GPU ``model`` (Hopper gets the larger cuBLAS workspace).

    A CPU rank (``model`` starting with ``cpu``, as ``sim calibrate --device cpu`` writes it)
    has no CUDA context, cuBLAS workspace or NCCL buffers, and the CPU replay counts tensors
    only (parameters, versions and saved-for-backward bytes): :data:`NO_RESERVE`.
    """
    if model.lower().startswith("cpu"):
        return NO_RESERVE
    key = "hopper" if is_hopper(model) else "pre-hopper"
    return RuntimeReserve(cublas_workspace_bytes=CUBLAS_WORKSPACE_BYTES[key])

"""DeepSpeed's offload buffers: what ZeRO-Offload and ZeRO-3 with CPU offload allocate.

Per rank with ``n`` parameters in its partition (``P / w``):

**ZeRO-Offload** (ZeRO-2 with ``offload_optimizer: cpu``; microsoft/DeepSpeed
``deepspeed/runtime/zero/stage_1_and_2.py`` at 022f223 with deepspeedai/DeepSpeed#7309):

* GPU: the 16-bit weights (``bit16_groups_flat``) and the contiguous gradient buffer of each
  backward: ``ipg_buffer`` of ``reduce_bucket_size`` elements, two with ``overlap_comm``
  ("double buffers to avoid data access conflict", ``backward``) (:func:`ipg_buffer_bytes`).
  The ZeRO-Offload release allocated ``4.5 * reduce_bucket_size`` per buffer
  (``stage2.py``, deepspeedai/DeepSpeed#374: "we ran this with 4.5 to get the best
  performance"); today's allocates the bucket size.
* Host (:func:`zero_offload_host`): the fp32 master partition, pinned
  (``weights_partition = get_accelerator().pin_memory(...)``), a pinned 16-bit staging copy of
  it for the host-to-device weight copy (#7309, ``param_buffer_of_bit16_for_cpu_offload_groups``;
  before it the step copied the fp32 partition to the GPU, 3x the 16-bit weights there, #7253),
  the fp32 gradient partition (``single_partition_of_fp32_groups[i].grad``) and Adam's momentum
  and variance (``DeepSpeedCPUAdam``: ``torch.zeros_like`` of the fp32 partition, pageable):
  4 + 2 + 4 + 8 = 18 bytes per parameter, the pinned ones rounded by torch's host allocator
  (:func:`sim.hardware.host_memory.pinned_block_bytes`), one allocation per parameter group.
* Host, per process: DeepSpeedCPUAdam's two pinned staging tiles, ``cudaMallocHost`` of
  ``TILE * sizeof(float)`` each, ``TILE = 128 * 1024 * 1024`` (``csrc/includes/cpu_adam.h``,
  ``Adam_Optimizer``; ``csrc/includes/simd.h``): 1 GiB, exact (not torch's allocator).

**ZeRO-3 with CPU offload** (``offload_param`` and ``offload_optimizer`` to ``cpu``;
``deepspeed/runtime/zero/stage3.py``, ``partition_parameters.py``): the 16-bit parameter
partition (``ds_tensor`` on the CPU), the fp32 master, fp32 gradients
(``fp32_partitioned_groups_flat[i].grad``) and Adam's moments: 2 + 4 + 4 + 8 = 18 bytes per
parameter (:func:`zero3_offload_host`; pipesim counted 16 before, with 16-bit gradients).

**ZeRO-Offload as released** (DeepSpeed v0.3.0, deepspeedai/DeepSpeed@41db1c2f0, "ZeRO-Offload
release (#391)": the code Ren et al. ATC'21 measured), where it differs
(:func:`zero_offload_release_host`, :data:`RELEASE_IPG_FACTOR`, :data:`RELEASE_TILE_FLOATS`):

* GPU: each contiguous gradient buffer holds ``4.5 * reduce_bucket_size`` 16-bit elements
  (``stage2.py`` ``backward``: ``torch.empty(int(self.reduce_bucket_size * 4.5), ...)``).
* Host: the fp32 master, the fp32 gradient partition (pinned: ``single_grad_partition.
  pin_memory()``) and Adam's moments, 16 bytes per parameter (no 16-bit staging copy, which
  #7309 added later), exact under the torch 1.x of the time; CPU Adam's two pinned tiles are
  ``TILE = 1024 * 1024 * 1024`` floats each (``csrc/includes/cpu_adam.h``): 8 GiB.
* Step: ``DeepSpeedCPUAdam.step(fp16_param_groups=...)`` updates the partition a tile at a time
  and, after each tile, ``launch_param_update`` has a GPU kernel read the tile's fp32 values
  from the pinned buffer into the 16-bit weights while the CPU updates the next tile into the
  other buffer (``csrc/adam/cpu_adam.cpp``, ``Step``): 4 bytes per parameter cross PCIe,
  overlapped with the update but for the last tile.

Gradients cross PCIe in fp32 in both versions: each bucket's 16-bit gradients are cast on the
GPU and copied into the pinned fp32 gradient partition (``async_inplace_copy_grad_to_fp32_buffer_
from_gpu``: ``.float()`` at the release, ``.to(master_weights_and_grads_dtype)`` today), 4 bytes
per parameter at the step's micro-batch; on the ``m - 1`` micro-batches before it 16-bit
gradients go to the per-parameter pinned accumulation buffers (``async_accumulate_grad_in_cpu_
via_gpu``), 2 bytes (:func:`grad_copy_bytes_per_param`).

``pin_memory`` defaults to false in DeepSpeed's offload configs
(``deepspeed/runtime/zero/offload_config.py``); the master partition is pinned regardless.
"""

from __future__ import annotations

from sim.hardware.host_memory import PINNED_ROUNDING, pinned_block_bytes

CPU_ADAM_TILE_FLOATS = 128 * 1024 * 1024
"""``TILE`` of DeepSpeedCPUAdam (``csrc/includes/simd.h``)."""

CPU_ADAM_STAGING_BYTES = 2 * CPU_ADAM_TILE_FLOATS * 4
"""DeepSpeedCPUAdam's two pinned tiles per process (``Adam_Optimizer`` constructor): 1 GiB."""

MASTER_BYTES, STAGING16_BYTES, GRAD32_BYTES, MOMENTS_BYTES = 4, 2, 4, 8
"""fp32 master, 16-bit staging copy, fp32 gradient, Adam momentum + variance, per parameter."""

RELEASE_TILE_FLOATS = 1024 * 1024 * 1024
"""``TILE`` of DeepSpeedCPUAdam at the ZeRO-Offload release (``csrc/includes/cpu_adam.h``@41db1c2f0)."""

RELEASE_CPU_ADAM_STAGING_BYTES = 2 * RELEASE_TILE_FLOATS * 4
"""The release's two pinned tiles (``cudaMallocHost(TILE * sizeof(float))`` each): 8 GiB."""

RELEASE_IPG_FACTOR = 4.5
"""Elements of each contiguous gradient buffer per ``reduce_bucket_size`` at the release."""

GRAD32_COPY_BYTES, GRAD16_COPY_BYTES = 4, 2
"""PCIe bytes per parameter of a gradient copy to the host: fp32 at the step's micro-batch,
16-bit into the accumulation buffers before it (module doc)."""

RELEASE_PARAM_COPY_BYTES = 4
"""PCIe bytes per parameter of the release's weight update: the fp32 tile read by the GPU."""

PARAM16_BYTES = 2
"""ZeRO-3's 16-bit parameter partition on the host, per parameter."""


def ipg_buffer_bytes(bucket_elems: float, params: float, overlap: bool, d: int = 2) -> float:
    """GPU bytes of ZeRO-2's contiguous gradient buffers: ``min(bucket, params) * d``, twice
    with ``overlap_comm`` (module doc)."""
    return (2 if overlap else 1) * min(bucket_elems, params) * d


def zero_offload_host(
    params: float, pinned: bool = False, rounding: str = PINNED_ROUNDING
) -> float:
    """Host bytes of one rank's ZeRO-Offload partition of ``params`` parameters (module doc):
    the fp32 master (always pinned), the 16-bit staging copy and the fp32 gradients (pinned
    with ``pin_memory``), Adam's moments (pageable)."""
    pin = (lambda b: pinned_block_bytes(b, rounding)) if pinned else float
    return (
        pinned_block_bytes(params * MASTER_BYTES, rounding)
        + pin(params * STAGING16_BYTES)
        + pin(params * GRAD32_BYTES)
        + params * MOMENTS_BYTES
    )


def zero_offload_release_host(params: float) -> float:
    """Host bytes of one rank's partition at the ZeRO-Offload release: fp32 master, pinned
    fp32 gradients and Adam's moments, 16 bytes per parameter, exact (module doc)."""
    return params * (MASTER_BYTES + GRAD32_BYTES + MOMENTS_BYTES)


def grad_copy_bytes_per_param(microbatches: int) -> float:
    """Mean PCIe bytes per parameter of one backward's gradient copy to the host with
    ``microbatches`` micro-batches per step: ``((m - 1) * 2 + 4) / m`` (module doc)."""
    m = max(1, microbatches)
    return ((m - 1) * GRAD16_COPY_BYTES + GRAD32_COPY_BYTES) / m


def zero3_offload_host(params: float) -> float:
    """Host bytes of one rank's ZeRO-3 CPU-offload partition of ``params`` parameters: 16-bit
    parameters, fp32 master and gradients, Adam's moments, 18 bytes each (module doc;
    pageable, DeepSpeed's default ``pin_memory: false``)."""
    return params * (PARAM16_BYTES + MASTER_BYTES + GRAD32_BYTES + MOMENTS_BYTES)

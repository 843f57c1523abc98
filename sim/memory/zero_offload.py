"""Policy ``zero_offload`` (ZeRO-Offload, Ren et al. ATC'21 §4; memory.md §5.2): optimizer on
the host, gradients streamed there in buckets during the backward.

``zero_offload[:N][:recompute][:overlap][:release]``: ``N`` the reduce bucket in millions (2**20)
of elements (default: DeepSpeed's ``reduce_bucket_size`` of 5e8 elements,
``ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT = 500000000`` in
``deepspeed/runtime/zero/constants.py``); ``recompute``: full activation checkpointing of every
layer too (ZeRO-Offload's evaluation ran with it, paper §6); ``overlap``: DeepSpeed's
``overlap_comm`` (two gradient buffers; each bucket reduced and copied on a side stream, which
the per-parameter overflow check still waits for: below); ``cpu_ckpt`` (with ``recompute``):
DeepSpeed's activation checkpointing with ``cpu_checkpointing`` (and ``partition_activations``,
``contiguous_memory_optimization``), as DeepSpeedExamples' ZeRO-Offload 10B script configured it
(microsoft/DeepSpeedExamples@ece5e0e0 ``Megatron-LM/scripts/ds_zero-offload_10B_config.json``):
each layer's checkpoint is copied to a host buffer in the forward and back before its recompute
(``CheckpointFunction``, ``deepspeed/runtime/activation_checkpointing/checkpointing.py``@41db1c2f0),
modelled as a swap of the checkpoints to the GPU's host socket. The buffers are pageable
(``new_empty(..., device='cpu')``), so the copies are synchronous and at most the link's rate:
pipesim times them at the link's rate (a lower bound) as swaps, which a single micro-batch
exposes whole as DeepSpeed does; with several micro-batches pipesim overlaps them where
DeepSpeed would not. At the release (with ``release``) the forward copies them into freshly
mapped pages, whose faults slow the copy to :data:`FRESH_PAGE_D2H_Bps`; the difference
(:func:`fresh_page_s`) is charged in the step's GPU time; ``release``: DeepSpeed as ZeRO-Offload was released and measured
(v0.3.0, :mod:`sim.memory.deepspeed`: 4.5-bucket gradient buffers, 16 B/param on the host,
CPU Adam's 1G-float pinned tiles whose weights go up while the next tile updates).

Per stage replica with ``P`` parameters and ``w`` replicas (bytes as DeepSpeed allocates them,
:mod:`sim.memory.deepspeed`):

* **GPU**: the 16-bit weights (every version the schedule stashes) and the contiguous gradient
  buffer(s) of ``min(P, bucket)`` 16-bit elements: the backward fills a bucket and it drains to
  the host while the next one fills (§4.1: "gradients are offloaded to CPU memory ... as they
  are produced"), so no full gradient buffer stays on the GPU.
* **Host**: of the replica's ``P / w`` partition, the fp32 master (pinned), a 16-bit staging
  copy, fp32 gradients and Adam's moments, 18 bytes per parameter, the pinned ones rounded by
  torch's host allocator; and CPU Adam's 1 GiB of pinned tiles per process (``release``: 16
  bytes and 8 GiB). CPU Adam runs there, in the server's CPU-Adam pool: its OpenMP threads use
  every socket, shared by the server's ranks (:mod:`sim.memory.host_adam`).
* **Traffic**: the stage's gradients are reduce-scattered over the ``w`` replicas (ZeRO-2,
  DeepSpeed reduces every micro-step) and the replica's share goes to the host cast to fp32
  (4 bytes per parameter at the step's micro-batch, 2 on the ones before it,
  :func:`~sim.memory.deepspeed.grad_copy_bytes_per_param`), bucket by bucket as the backward
  fills them, on a side stream with ``overlap``, else on the compute stream
  (``reduce_ipg_grads``: ``stream = reduction_stream if overlap_comm else current_stream``);
  either way the backward waits for them (next item).
  After the host step the updated weights come back (2 bytes per parameter from the 16-bit
  staging copy; ``release``: 4, tile by tile during the step) and are all-gathered. Delayed
  parameter update (DPU) is not modelled: the host step is on the critical path.
* **The gradient path is synchronous, with or without** ``overlap``: for every parameter of a
  full bucket ``copy_grads_in_partition`` computes its norm, checks it for inf/NaN and starts
  its copy (``set_norm_for_param_grad_in_gpu``, ``update_overflow_tracker_for_param_grad``,
  ``async_inplace_copy_grad_to_fp32_buffer_from_gpu``), and the check reads a value back to the
  host (``_has_inf_or_nan``: ``float(x.float().sum())`` at the release, deepspeedai/DeepSpeed@
  41db1c2f0 ``deepspeed/runtime/zero/stage2.py``; ``inf_or_nan.float().max()`` tested by
  ``if`` today, @38327e07 ``stage_1_and_2.py``). The read waits for the copy of the parameter
  before it on the same stream, and the backward's thread, which runs the hook, issues no
  kernel meanwhile: the copies never run beside the backward (``blocking_moves``). The path's
  GPU work (:data:`BUCKET_COPY_BYTES`, :data:`GRAD_PATH_BYTES`, :data:`RELEASE_GRAD_PATH_BYTES`)
  and its reads back
  (one per parameter tensor, the host model's ``serial_reads_s``) are charged in the step's
  GPU time (:func:`grad_path_s`).
* **The host unscales the gradients**: before CPU Adam, ``unscale_and_clip_grads`` runs
  ``grad.data.mul_(1. / combined_scale)`` over the fp32 gradient partition on the host (both
  versions; unconditional). Like CPU Adam it is a streaming loop bound by the host's DRAM;
  it moves :data:`UNSCALE_HOST_BYTES` of the :data:`ADAM_HOST_BYTES` per parameter CPU Adam
  moves, so it runs at the CPU-Adam rate times their ratio (:func:`unscale_s`); the release's
  CPU Adam moves :data:`RELEASE_TILE_STORE_BYTES` more per parameter than the rate's.
"""

from __future__ import annotations

import math
from dataclasses import replace

from sim.memory.base import MemoryPolicy
from sim.memory.compose import activation_plan, describe, finalize_plans, resident_plan
from sim.memory.context import StageContext
from sim.memory.deepspeed import (
    CPU_ADAM_STAGING_BYTES,
    RELEASE_CPU_ADAM_STAGING_BYTES,
    RELEASE_IPG_FACTOR,
    RELEASE_PARAM_COPY_BYTES,
    RELEASE_TILE_FLOATS,
    grad_copy_bytes_per_param,
    ipg_buffer_bytes,
    zero_offload_host,
    zero_offload_release_host,
)
from sim.memory.estimate import copy_s, swap_exposed_s
from sim.memory.host_adam import adam_pool, adam_rate, pool_sharers
from sim.memory.plan import StagePlan, Transfer
from sim.memory.stash import stash
from sim.memory.states import StateBytes

HOST_BYTES = 4 + 4
"""Host bytes per parameter without Adam (fp32 master and fp32 gradient, sim.memory.deepspeed);
with mixed-precision Adam: :func:`sim.memory.deepspeed.zero_offload_host`."""

REDUCE_BUCKET_ELEMS = 500_000_000
"""DeepSpeed's default ``reduce_bucket_size`` (elements)."""

BUCKET_COPY_BYTES = 4
"""GPU (HBM) bytes per parameter of the backward hook's copy of every gradient into the
contiguous bucket (``new_grad_tensor.copy_(param.grad.view(-1))``: read 2, write 2), both
versions; every replica copies all the stage's parameters."""

GRAD_PATH_BYTES = 18 + 28 + 6
"""GPU bytes per parameter of today's per-parameter gradient path on the replica's own
partition (module doc; deepspeedai/DeepSpeed@38327e07 ``stage_1_and_2.py``, only for
parameters ``is_param_in_current_partition``): the norm ``grad.double().norm(2)`` (read 2,
write 8, read 8); the overflow check ``_has_inf_or_nan`` (``x.float()``: 2 + 4, ``isnan``:
4 + 1, ``isinf``: 4 + 1, ``logical_or``: 1 + 1 + 1, ``.float()``: 1 + 4, ``.max()``: 4); the fp32
cast for the copy (``.float()``: 2 + 4)."""

RELEASE_GRAD_PATH_BYTES = 18 + 10 + 6
"""The same at the release (deepspeedai/DeepSpeed@41db1c2f0 ``stage2.py``): the overflow
check is ``float(x.float().sum())`` (the fp32 copy 2 + 4, the sum 4)."""

GRAD_PATH_OPS = 4
"""Ops the host issues per parameter tensor before the check's read (module doc): the norm's
cast and reduction, the check's cast and reduction (the release's count; for a weight-sized
tensor only the first op's issue is exposed, so today's longer check costs the same)."""

ADAM_HOST_BYTES = 4 * 4 + 3 * 4
"""Host DRAM bytes per parameter of DeepSpeedCPUAdam's loop (``csrc/adam/cpu_adam.cpp``
``Step``, both versions): loads of the gradient, momentum, variance and fp32 parameter, stores
of the parameter, momentum and variance."""

RELEASE_TILE_STORE_BYTES = 4 + 4
"""Host DRAM bytes per parameter the release's ``adam_update_copy`` adds to CPU Adam's loop:
``Step`` also stores each updated fp32 value into the pinned tile the GPU reads
(``SIMD_STORE(_doubled_buffer[_buf_index] + (i - t), param_4.data)``, deepspeedai/DeepSpeed@
41db1c2f0 ``csrc/adam/cpu_adam.cpp``): 4 bytes, and as ``_mm512_storeu_ps`` is a regular store
to a line not loaded before, its read for ownership, 4 more (Intel 64 and IA-32 Architectures
Optimization Reference Manual: only non-temporal stores skip it). The preset's CPU-Adam rate is
Ren et al.'s Table 4, CPU Adam alone, so the release's step runs at ``28 / 36`` of it."""

UNSCALE_HOST_BYTES = 4 + 4
"""Host DRAM bytes per parameter of ``grad.data.mul_(1. / combined_scale)`` on the fp32
gradient partition (``unscale_and_clip_grads``): a load and a store."""

FRESH_PAGE_D2H_Bps = 2**30 / 0.5479
"""Device-to-host rate (bytes per second) into pageable host memory that was just allocated
and never touched: 1 GiB in 0.5479 s, where the same copy takes 0.0997 s once every page has
been written first (rapidsai/dask-cuda#98, madsbk 2019-08-01: ``numpy.empty`` then numba's
``copy_to_host`` of a 1 GiB CuPy array on a Quadro GV100 workstation, PCIe gen3); each 4 KiB
page faults and is zeroed during the copy. With ``release`` and ``cpu_ckpt`` every checkpoint
of every iteration is copied into such memory: the release's ``CheckpointFunction`` allocates
its contiguous host buffers with ``new_empty(..., device='cpu')`` in the first forward after
each backward dropped them (``contiguous_data_buffers = []``; deepspeedai/DeepSpeed@41db1c2f0
``deepspeed/runtime/activation_checkpointing/checkpointing.py``), and a buffer that large
(a layer's input, tens of MB) is a fresh ``mmap`` every time (glibc's malloc maps requests above
its threshold, at most 32 MiB on 64-bit, mallopt(3) ``M_MMAP_THRESHOLD``), returned on free.
DeepSpeed later writes a zero into every page before the copy for this reason (its comment:
"Because the 'new_empty' returns uninitialized pages, the pages need to be populated during the
cudaMemcpy time which increases the data copy time", @599258f97, 2021-03-08), so without
``release`` the checkpoints move at the link's rate. That the DGX-2's host faults pages as
fast as the workstation did is an assumption."""

MELEMS = 2**20
RECOMPUTE = "recompute"
OVERLAP = "overlap"
RELEASE = "release"
CPU_CKPT = "cpu_ckpt"


def parse_options(name: str, args: list[str], words: tuple[str, ...]) -> tuple[int | None, set]:
    """``(size in M elements or None, words given)`` of ``name:[N][:word]...``.

    Raises:
        ValueError: an argument that is neither a positive integer nor one of ``words``, or
            one given twice.
    """
    size, seen = None, set()
    for arg in args:
        if arg.isdigit() and int(arg) > 0 and size is None:
            size = int(arg)
        elif arg in words and arg not in seen:
            seen.add(arg)
        else:
            allowed = " and/or ".join(f"':{w}'" for w in words)
            raise ValueError(
                f"use {name}[:N][{']['.join(':' + w for w in words)}] (N a size in M elements, "
                f"then {allowed}), got {':'.join(args)!r}"
            )
    return size, seen


def grad_path_s(ctx: StageContext, release: bool) -> float:
    """GPU-side seconds per optimizer step of DeepSpeed's per-parameter gradient path on one
    replica of ``w`` (module doc): the bucket copy of the stage's ``P`` parameters and the path
    of the replica's ``P / w``, ``(P * 4 + P / w * bytes) / memory_bound_Bps`` with
    :data:`GRAD_PATH_BYTES` (:data:`RELEASE_GRAD_PATH_BYTES` with ``release``), plus one host
    read per parameter tensor of the partition after :data:`GRAD_PATH_OPS` ops
    (:meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s`, each tensor counted large;
    zero where the host is not modelled). Only the step's micro-batch runs the path (the
    ``m - 1`` before it accumulate on the host's pinned buffers, not modelled)."""
    per_param = RELEASE_GRAD_PATH_BYTES if release else GRAD_PATH_BYTES
    w = ctx.dp_width
    hbm = ctx.topology.gpu(ctx.gpu_index).memory_bound_Bps
    host = ctx.topology.host(ctx.host).overhead
    tensors = round(ctx.param_tensors / w)
    reads = host.serial_reads_s(small=0, large=tensors, ops=GRAD_PATH_OPS)
    return ctx.params * (BUCKET_COPY_BYTES + per_param / w) / hbm + reads


def fresh_page_s(ctx: StageContext, nbytes: float) -> float:
    """Seconds a device-to-host copy of ``nbytes`` into untouched pageable memory takes beyond
    its time at the link's rate (:data:`FRESH_PAGE_D2H_Bps`; the engine times the copy at the
    link's rate): ``max(0, nbytes / FRESH_PAGE_D2H_Bps - copy_s(gpu -> host))``."""
    link = copy_s(ctx, ctx.gpu, ctx.host, nbytes)
    return max(0.0, nbytes / FRESH_PAGE_D2H_Bps - link)


def unscale_s(params: float, adam_params_per_s: float) -> float:
    """Host seconds of ``unscale_and_clip_grads``' pass over ``params`` fp32 gradients (module
    doc): both it and CPU Adam stream host DRAM, so its rate is CPU Adam's times
    :data:`ADAM_HOST_BYTES` / :data:`UNSCALE_HOST_BYTES`.

    Example:
        >>> unscale_s(3.5e9, 1e9)  # 3.5 s of CPU Adam; 8 of its 28 bytes per parameter
        1.0
    """
    return params / (adam_params_per_s * ADAM_HOST_BYTES / UNSCALE_HOST_BYTES)


def with_overhead(ctx: StageContext, plan: StagePlan) -> StagePlan:
    """``plan`` with its runtime reserve, allocator margin and working memory for what it keeps
    (as :func:`sim.memory.compose.finalize_plans` will charge them), so that its notes' peak
    and ``fits`` are the engine's."""
    return finalize_plans([ctx], [plan])[0]


def base_plan(ctx: StageContext, recompute: bool, cpu_ckpt: bool = False) -> StagePlan:
    """Everything resident, or with every layer fully checkpointed (``cpu_ckpt``: the
    checkpoints swapped to the host, module doc)."""
    if not recompute:
        return resident_plan(ctx)
    st = stash(ctx, full=range(len(ctx.layers)))
    return activation_plan(ctx, st, ((ctx.host, st.kept_bytes),) if cpu_ckpt else ())


def offload_states(
    ctx: StageContext,
    base: StagePlan,
    bucket_elems: float = REDUCE_BUCKET_ELEMS,
    overlap: bool = False,
    release: bool = False,
) -> tuple[StagePlan, float]:
    """``base`` with the optimizer state and step on the host and the gradients streamed there
    in buckets (module doc), and the estimated seconds the step adds per iteration (copies and
    CPU Adam, minus the GPU step it replaces; the gradient copies are left to the engine)."""
    own = ctx.params / ctx.dp_width
    g, d = ctx.state.grad, ctx.state.weight
    dp = ctx.dp_width > 1
    adam = ctx.state.optimizer >= 12
    buffers = ipg_buffer_bytes(bucket_elems, ctx.params, overlap, g)
    if release:
        buffers *= RELEASE_IPG_FACTOR
        host = zero_offload_release_host(own) if adam else own * HOST_BYTES
        staging, up, tiles = RELEASE_CPU_ADAM_STAGING_BYTES, RELEASE_PARAM_COPY_BYTES, own
    else:
        host = zero_offload_host(own) if adam else own * HOST_BYTES
        staging, up, tiles = CPU_ADAM_STAGING_BYTES, d, 0.0
    down = grad_copy_bytes_per_param(ctx.microbatches) if adam else g
    adam_bytes = ADAM_HOST_BYTES + (RELEASE_TILE_STORE_BYTES if release else 0)
    plan = replace(
        base,
        grad_bytes=buffers,
        grad_bucket_bytes=0.0,
        optimizer_bytes=0.0,
        host_bytes=host,
        host_framework_bytes=staging,
        optimizer_s=grad_path_s(ctx, release),
        host_optimizer_s=own / adam_rate(ctx) * adam_bytes / ADAM_HOST_BYTES
        + unscale_s(own, adam_rate(ctx)),
        host_optimizer_pool=adam_pool(ctx),
        host_step_tiles=math.ceil(tiles / RELEASE_TILE_FLOATS),
        fetch_source=ctx.host,
        writeback_bytes=own * down,
        blocking_moves=True,  # the path's reads back (module doc), with or without overlap
        scatter_bytes=ctx.params * g if dp else 0.0,
        step_transfers_after=(Transfer(ctx.host, ctx.gpu, own * up, f"weights s{ctx.stage}"),),
        dp_sharded=dp,
        dp_grad_bytes=ctx.params * g,
    )
    copy_up = copy_s(ctx, ctx.host, ctx.gpu, own * up)
    if plan.host_step_tiles:
        copy_up /= plan.host_step_tiles  # all but the last tile go up during the step
    added = plan.host_optimizer_s + copy_up + plan.optimizer_s - base.optimizer_s
    return plan, added


class ZeroOffloadPolicy(MemoryPolicy):
    """ZeRO-Offload: optimizer state and step on the host, gradients streamed in buckets.

    Args:
        bucket_melems: the reduce bucket in millions (2**20) of elements (None: DeepSpeed's
            5e8 elements).
        recompute: checkpoint every layer's activations too.
        overlap: DeepSpeed's ``overlap_comm`` (default false in DeepSpeed; the ZeRO-Offload
            tutorial sets it): two gradient buffers instead of one, copies on a side stream.
        release: DeepSpeed as ZeRO-Offload was released (module doc).
        cpu_ckpt: the checkpoints go to host DRAM (module doc; needs ``recompute``).

    Raises:
        ValueError: ``cpu_ckpt`` without ``recompute``.
    """

    name = "zero_offload"
    shards_states = True
    description = "optimizer state and Adam step on the host CPU, gradients streamed in buckets"

    def __init__(
        self,
        bucket_melems: int | None = None,
        recompute: bool = False,
        overlap: bool = False,
        release: bool = False,
        cpu_ckpt: bool = False,
    ):
        if cpu_ckpt and not recompute:
            raise ValueError("zero_offload's ':cpu_ckpt' moves checkpoints: add ':recompute'")
        self.bucket_elems = REDUCE_BUCKET_ELEMS if bucket_melems is None else bucket_melems * MELEMS
        self.recompute, self.overlap, self.release = recompute, overlap, release
        self.cpu_ckpt = cpu_ckpt
        self.mode = "full" if recompute else None

    @classmethod
    def from_args(cls, args: list[str]) -> ZeroOffloadPolicy:
        words_allowed = (RECOMPUTE, OVERLAP, RELEASE, CPU_CKPT)
        size, words = parse_options(cls.name, args, words_allowed)
        return cls(size, *(w in words for w in words_allowed))

    def plan_all(self, contexts, fixed=()) -> list[StagePlan]:
        out = []
        for ctx in contexts:
            base = base_plan(ctx, self.recompute, self.cpu_ckpt)
            plan, added = offload_states(ctx, base, self.bucket_elems, self.overlap, self.release)
            added += (pool_sharers(contexts, ctx) - 1) * plan.host_optimizer_s
            added += ctx.microbatches * plan.recompute_s
            faults = 0.0
            if self.cpu_ckpt:
                added += ctx.microbatches * swap_exposed_s(ctx, plan.swap_parts)
            if self.cpu_ckpt and self.release:  # synchronous, so exposed in every micro-batch;
                # charged in the step's GPU time, as the gradient path is (grad_path_s)
                faults = ctx.microbatches * fresh_page_s(ctx, plan.swap_bytes)
                plan = replace(plan, optimizer_s=plan.optimizer_s + faults)
                added += faults
            out.append(
                describe(
                    ctx,
                    with_overhead(ctx, plan),
                    "optimizer on host"
                    + (", full recompute" if self.recompute else "")
                    + (", checkpoints on host" if self.cpu_ckpt else ""),
                    added,
                    host_state_gib=round(plan.host_bytes / 2**30, 3),
                    gpu_grad_bucket_gib=round(plan.grad_bytes / 2**30, 3),
                    **({"ckpt_page_fault_ms": round(faults * 1e3, 3)} if faults else {}),
                )
            )
        return out

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """The 16-bit weights stay on the GPU; gradients and optimizer state go to the host."""
        return float(states.weight)

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]

"""Policy ``chunked`` (PatrickStar, Fang et al. TPDS 2022 / arXiv 2108.05818; memory.md §5.4):
model states in chunks on GPU or host, partitioned over the data-parallel replicas, with the
bytes PatrickStar's code allocates.

``chunked[:N][:recompute][:msc][:v045]``: chunks of ``N`` M (2**20) elements (default: per stage, the
size PatrickStar's chunk-size search recommends, the smallest footprint of those that fit on all
the stage's replicas, :func:`search_score`, :mod:`sim.memory.memtracer`);
``recompute``: full activation checkpointing of every layer, as PatrickStar always ran
(paper §7 "activation checkpointing"; ``examples/run_transformers.sh`` passes ``--use_ckp``);
``msc``: memory-saving communication (``--with_mem_saving_com``, v0.4.3; ``MSC=1`` in every
benchmark script of ``examples/benchmark/``): each remote chunk is broadcast from its owner
when first used and reduced to it after the backward, one chunk at a time
(``client._fetch_remote_chunks``, ``release_dist``), instead of whole groups;
``v045``: the memory tracer as PatrickStar released it up to v0.4.5 (2021-12-13), which ran both
published throughput figures (the V100 figure ``doc/mgpu_scalability.png`` last changed at
6ee4fe8, 2021-12-08; the A100 figure's 8-GPU 6B-50B and 68B points are in it by 4ef26cc,
2021-12-14): it kept a whole chunk group free in ``available_chunk_mem`` and counted a group's
remote chunks in hybrid Adam's margin (``param_fp16_chunks_max_mem_usage``) also with ``msc``,
which moved one chunk at a time (``memtracer.py`` ``- world_size * 2 * self._default_chunk_size``,
``client.py`` ``+ (world_size - 1) * self.default_chunk_size * 2`` at 6ee4fe8 and 4ef26cc); b4cd853 (2021-12-16, "fix a margin gpu space calculation
bug") and 2b29d81 / 44104b8 (2021-12-17, "hard fix the MSC ava chunk bug") made both count
one chunk with ``msc`` (:mod:`sim.memory.memtracer`). Without ``msc`` it changes nothing.
Per stage replica, with ``w`` replicas and chunks of ``C`` elements:

* **Packing** (:func:`~sim.memory.chunks.pack`): each module's parameters are appended to the
  last chunk or open a new one (``client.append_tensor``), so chunks have empty tails (their
  utilization) and a module larger than a chunk is refused; a chunk costs its whole capacity.
* **Chunk groups and owners** (paper §5 "distributed"; ``chunk_list.new_chunk`` returns
  ``(comm_group_idx, comm_group_offset)``): the 16-bit chunks form groups of ``w`` (padded
  with dummy chunks, ``client.append_dummy_chunk``); replica ``r`` owns chunk ``r`` of every
  group; only real chunks have optimizer chunks (``append_tensor_as_ref``).
* **All-gather before use** (``client.access_dist``, ``_fetch_remote_chunks``): before each F
  and each B the stage's chunk groups are all-gathered, whole chunks (``w * 2C`` bytes per
  group); a group's ``(w - 1)`` remote chunks are live (one remote chunk with ``msc``).
* **Reduce-scatter after the backward** (``client.release_dist``). With ``msc`` the chunks
  holding parameters are broadcast and reduced one by one, a chunk within one checkpointed
  block is fetched once more by the recomputed forward; with or without it, each fetch
  zeroes a chunk and each reduce averages one (:mod:`sim.memory.chunk_comm`).
* **Synchronous** (``blocking_moves``): the collectives are ``torch.distributed`` calls with
  ``async_op=False`` on the compute stream and chunk moves are ``payload.to(device)``
  (``chunk_list.access_chunk``; ``--with_async_move`` is off in the benchmarks), so nothing is
  fetched or gathered ahead: each F and B waits for its gathers and moves, and each B for its
  reduce-scatter and gradient moves.
* **Owned 16-bit chunks** (2 bytes per element; plus a gradient chunk when gradients
  accumulate over ``m > 1`` micro-batches, else the gradient reuses the parameter chunk) take
  the GPU memory PatrickStar's memory tracer leaves them: ``0.8 T`` less the other tensors and
  one group kept free (:func:`~sim.memory.memtracer.chunkable_gpu_bytes`). If they do not all
  fit, the GPU keeps ``r`` of them plus a 2-chunk staging area through which each F and B
  streams the others in from the host (Belady eviction, :mod:`sim.memory.chunks`,
  ``core/eviction_policy.py``), and every B writes the gradients of streamed chunks back.
* **Optimizer chunks** (fp32 weight, momentum, variance: 12 bytes per element) of the real
  owned chunks: hybrid Adam keeps its margin's worth on the GPU
  (:func:`~sim.memory.memtracer.gpu_adam_chunks`), the rest live in host DRAM as pinned CPU
  chunks (``Chunk.allocate_payload``), within ``0.8 * MemTotal / ranks`` per rank, and CPU
  Adam updates them (on the rank's share of the server's threads, :mod:`sim.memory.host_adam`; reading the
  16-bit gradients, 26 bytes per element against DeepSpeed's 28, :func:`host_adam_s`), with their
  16-bit gradients copied down before the host step (``FP32ChunkReadBuffer``, a pinned 16-bit
  chunk) and their updated weights up after it in fp32, 4 bytes per element: PatrickStar's
  ``FP16ChunkWriteBuffer.write_from_cache`` copies each host fp32 chunk into a GPU fp32 buffer
  and casts it into the 16-bit chunk there ("a two stage copy, 1) CPU fp32 -> GPU fp32, 2) GPU
  fp32 -> GPU fp16 is faster than one single copy_", ``patrickstar/ops/chunk_io_buff.py``
  @2384535); the cast's HBM traffic is left out.
* **The step, chunk by chunk** (``host_step_chunks``; ``FP16Adam.fp16_chunk_adam_ops``,
  ``patrickstar/ops/fp16_cpu_adam.py`` 336-467 @2384535): hybrid Adam visits the owned
  chunks in order, the GPU margin's first (``FP32ChunkReadBuffer.access_from_cache``:
  ``cached_chunk_num < margin_chunk_num_for_gpu_adam``), then each host chunk's gradients
  down, its CPU Adam and its weights up, each copy a blocking ``copy_`` on the rank's one
  Python thread (the engine's :meth:`~sim.engine.traffic.MemoryTraffic.chunked_step`).
* **Each rank's CPU Adam on its own threads** (``StagePlan.host_optimizer_thread_share``): the
  launch scripts of both published figures give each of a server's ``GPU_NUM`` processes
  ``OMP_NUM_THREADS = nproc / GPU_NUM`` (``examples/run_bert.sh``@6ee4fe8,
  ``examples/run_transformers.sh``@4ef26cc 141-185: ``TNUM``), and the loop's ``#pragma omp parallel
  for`` (``ops/csrc/adam/cpu_adam.cpp`` ``Step``) runs on the calling process's team, so a
  rank's chunk updates at its team's share of the server's rate, ``1 / ranks``, whether or not
  the other ranks are copying; its copies and its CPU Adam follow one another. Its share is
  taken as its threads' share of the server's rate (an assumption: CPU Adam bound by the
  cores running it, not by DRAM; ZeRO-Offload's Table 4, measured on every core of the DGX-2,
  moves 51.5 GB/s per socket, 40 % of its peak DRAM bandwidth, so it does not saturate DRAM,
  :mod:`sim.memory.host_adam`). The ranks also enter the loop together
  (``FP16Adam.step``, ``fp16_cpu_adam.py``@4ef26cc 549: ``has_overflow_and_reset_param``, an
  ``all_reduce`` and ``.item()`` just before it)
  with equal chunks, so no rank finds the others' cores idle for long. A rank's host step is
  its copies plus all ranks' CPU Adam; the planner's estimate of the time beyond its serial
  path is :func:`own_threads_wait_s`. (Before: one FIFO pool at the server's whole rate, which
  updated one rank's chunk while the others copied.)
* The ``0.2`` of the GPU and of the host that the tracer keeps from chunks is charged to the
  framework (``framework_bytes``, ``host_framework_bytes``), so the engine's ledger overflows
  where PatrickStar would not place its chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.hardware.host_memory import cached_pinned_bytes
from sim.memory.base import MemoryPolicy
from sim.memory.chunk_comm import chunk_traffic
from sim.memory.chunk_hooks import hook_host_s
from sim.memory.chunks import pack, steady_misses, utilization
from sim.memory.compose import describe, gib, resident_plan
from sim.memory.context import StageContext
from sim.memory.estimate import activation_peak_bytes, budget_bytes, copy_s, planned_peak_bytes
from sim.memory.host_adam import adam_pool, adam_rate, pool_sharers
from sim.memory.memtracer import (
    PINNED_ROUNDING,
    chunk_candidates,
    chunkable_gpu_bytes,
    gpu_adam_chunks,
    gpu_framework_bytes,
    host_chunk_cap_bytes,
    host_framework_bytes,
    search_score,
)
from sim.memory.plan import StagePlan, Transfer
from sim.memory.reserve import overhead
from sim.memory.tensors import stage_groups
from sim.memory.zero_offload import (
    ADAM_HOST_BYTES,
    RECOMPUTE,
    base_plan,
    parse_options,
    with_overhead,
)

MIB = 2**20
STAGING = 2
"""Chunk slots kept free for streaming (PatrickStar's 2-chunk margin)."""
MSC = "msc"
V045 = "v045"
"""PatrickStar's memory tracer as released up to v0.4.5 (2021-12-13), the code of both published
throughput figures (module doc, "``v045``")."""


HOST_ADAM_BYTES = 2 + 3 * 4 + 3 * 4
"""Host DRAM bytes per element of PatrickStar's CPU Adam: its copy of DeepSpeed's loop
(Tencent/PatrickStar@6ee4fe8 and @4ef26cc ``patrickstar/ops/csrc/adam/cpu_adam.cpp``
``Adam_Optimizer::Step``) is called with the 16-bit gradients of the pinned read buffer
(``FP16Adam.ds_cpu_adam_update`` gets ``read_chunk_buff.access_from_cache(...)``, a
``torch.half`` chunk, ``patrickstar/ops/fp16_cpu_adam.py``; ``ds_adam_step`` sets
``grad_half_precision`` from ``grads.options().dtype() == at::kHalf``, ``cpu_adam.cpp`` 737
@4ef26cc), so it loads each gradient as 2 bytes (``SIMD_LOAD_HALF``; ``(float)grads_cast_h[k]``
in the scalar tail) and unscales it in the loop (``loss_scale``); the fp32 weight, momentum and
variance are loaded and stored (4 bytes each, both ways): 26 bytes, against the 28 of DeepSpeed's CPU Adam
with fp32 gradients whose rate ZeRO-Offload's Table 4 measures
(:data:`sim.memory.zero_offload.ADAM_HOST_BYTES`; the rate is taken as bound by DRAM
bandwidth, :mod:`sim.memory.host_adam`)."""

UPLOAD_BYTES = 4
"""Bytes per element of a host-updated weight on its way up: the fp32 master chunk
(``FP16ChunkWriteBuffer``'s two-stage copy, module doc)."""
GPU_ADAM_BYTES = 108
"""HBM bytes per element of hybrid Adam's GPU update, op by op as ``FP16Adam`` runs it
(Tencent/PatrickStar@2384535 ``patrickstar/ops/fp16_cpu_adam.py``, ``fp16_chunk_adam_ops`` and
``torch_adam_update``, no weight decay; each op reads its operands and writes its result):
the 16-bit gradient chunk copied into the read buffer (2 + 2), ``.float()`` (2 + 4),
``grad.div_(loss_scale)`` (4 + 4), ``exp_avg.mul_`` (4 + 4) and ``.add_(grad)`` (8 + 4),
``exp_avg_sq.mul_`` (4 + 4) and ``.addcmul_(grad, grad)`` (12 + 4), ``sqrt()``, ``/ c`` and
``.add_(eps)`` (3 x (4 + 4)), ``data.addcdiv_`` (12 + 4), and the fp32 weight cast into the
16-bit chunk (4 + 2): 108, against a fused kernel's 28 (:func:`~sim.memory.states.
optimizer_step_s`)."""

GRAD_ZERO_BYTES = 2
"""HBM bytes per 16-bit parameter element, once per iteration, of the gradient PatrickStar's
pre-backward hook creates: ``param.grad = torch.zeros_like(tmp_tensor)`` on the first backward
visit (Tencent/PatrickStar@2384535 ``patrickstar/core/hook.py``
``pre_sub_module_backward_function``), a 16-bit write."""
GRAD_HOOK_BYTES = 20
"""HBM bytes per 16-bit parameter element and backward of the per-parameter gradient path of
PatrickStar@2384535: autograd accumulates into that existing gradient (``grad += new``: reads
2 + 2, writes 2) instead of taking the new one; the post-backward hook
(``post_sub_module_backward_function``) runs ``client.optimizer.check_overflow(param)``, whose
``DynamicLossScaler._has_inf_or_nan`` (``patrickstar/fp16/loss_scaler.py``; the benchmark's
``"loss_scale": 0``, ``examples/ps_config.py``) computes ``float(x.float().sum())`` (the fp32
copy: 2 + 4; the sum: 4), then copies the gradient into the parameter's chunk
(``tmp_tensor.copy_(param.grad)``: 2 + 2): 20. Charged in the step's GPU time (the same
iteration time on one stage; the hooks run in the backward), with the host time of the blocking
read per parameter tensor (:func:`grad_hooks_s`)."""


@dataclass(frozen=True)
class ChunkLayout:
    """Where a stage replica's chunks live.

    Attributes:
        chunks: 16-bit chunks the replica owns (``n``; dummy chunks included).
        real: of those, chunks holding parameters: only they have optimizer chunks.
        elems: capacity of a chunk in elements (``C``): a chunk's bytes, however full it is.
        slot_bytes: GPU bytes of one 16-bit chunk (with its gradient when ``m > 1``).
        resident: chunks that stay on the GPU.
        misses: ``(in forwards, in backwards)`` per iteration, by Belady over the op order.
        free_bytes: GPU bytes left for chunks after activations, weight versions and
            PatrickStar's limits (:mod:`sim.memory.memtracer`).
        sys_bytes: the replica's other tensors at their peak (PatrickStar's ``sys`` memory).
        utilization: share of the chunks' capacity its parameters fill (:func:`pack`).
    """

    chunks: int
    real: int
    elems: float
    slot_bytes: float
    resident: int
    misses: tuple[int, int]
    free_bytes: float
    sys_bytes: float = 0.0
    utilization: float = 1.0

    @property
    def streamed(self) -> int:
        return self.chunks - self.resident


def owned_chunks(ctx: StageContext, chunk_elems: int) -> tuple[int, int, float]:
    """``(16-bit chunks the replica owns, real ones among them, utilization)``: the stage's
    parameter groups packed as PatrickStar packs them (:func:`~sim.memory.chunks.pack`),
    padded with dummy chunks to whole groups of ``w`` (``client.append_dummy_chunk``; a dummy
    is all-gathered, so its owner allocates it, but it has no optimizer chunks: those are
    built per parameter, ``append_tensor_as_ref``); replica ``r`` owns chunk ``r`` of each.

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    used = pack(stage_groups(ctx.layers, ctx.dtype_bytes), chunk_elems)
    w, r = ctx.dp_width, ctx.replica % ctx.dp_width
    real = max(0, math.ceil((len(used) - r) / w))
    return math.ceil(len(used) / w), real, utilization(used, chunk_elems)


def gathered_live_bytes(ctx: StageContext, elems: float, msc: bool = False) -> float:
    """GPU bytes of the remote chunks live during an action: one chunk group's,
    ``(w - 1) * chunk``, or one chunk with memory-saving communication (0 without data
    parallelism). Nothing is gathered ahead (the calls are synchronous, module doc)."""
    if ctx.dp_width <= 1:
        return 0.0
    return (1 if msc else ctx.dp_width - 1) * elems * ctx.state.weight


def sys_bytes(ctx: StageContext, act: StagePlan) -> float:
    """The replica's tensors other than chunks at their peak: activations, receive buffers and
    working memory (``torch.cuda.memory_allocated`` sees them; the CUDA context and the
    allocator's slack it does not)."""
    peak = activation_peak_bytes(act, ctx)
    return peak + overhead(ctx, peak, 0.0)["working_bytes"]


def chunk_layout(
    ctx: StageContext,
    act: StagePlan,
    chunk_elems: int,
    msc: bool = False,
    tracer_msc: bool | None = None,
) -> ChunkLayout:
    """Pack the replica's owned parameters and decide which 16-bit chunks stay (module doc).
    ``msc``: one remote chunk is live, not a group; ``tracer_msc``: the memory tracer keeps one
    chunk free for it, not a group (None: as ``msc``; False for ``v045``, module doc).

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    m, d, w = ctx.microbatches, ctx.state.weight, ctx.dp_width
    n, real, util = owned_chunks(ctx, chunk_elems)
    e = float(chunk_elems)
    slot = e * (d + (ctx.state.grad if m > 1 else 0))
    versions = (ctx.weight_versions - 1) * n * e * d
    gathered = gathered_live_bytes(ctx, e, msc)
    peak = activation_peak_bytes(act, ctx)
    runtime = sum(overhead(ctx, peak, 0.0).values())  # reserve, allocator, working memory
    sys = sys_bytes(ctx, act)
    own_budget = budget_bytes(ctx) - peak - runtime - versions - gathered
    kept_one = msc if tracer_msc is None else tracer_msc
    tracer = chunkable_gpu_bytes(ctx.capacity_bytes, sys, w, chunk_elems, d, kept_one)
    free = min(own_budget, tracer - gathered - versions)
    if free >= n * slot:
        return ChunkLayout(n, real, e, slot, n, (0, 0), free, sys, util)
    staging = 2 * STAGING * e * d  # this action's staging area and the next one's
    resident = min(n - 1, max(0, math.floor((free - staging) / slot)))
    cache = max(1, min(resident + STAGING, n - 1))  # fewer slots than chunks: it streams
    misses = steady_misses(ctx.order or ("F", "B") * m, n, cache)
    return ChunkLayout(n, real, e, slot, resident, misses, free, sys, util)


def gpu_optimizer_chunks(ctx: StageContext, lay: ChunkLayout, msc: bool = False) -> int:
    """Optimizer chunk groups (fp32 weight, momentum, variance) kept and updated on the GPU:
    hybrid Adam's margin (:func:`~sim.memory.memtracer.gpu_adam_chunks`; ``msc``: the tracer
    counts one remote chunk, not a group's, False for ``v045``), within what the chunks may use
    during a forward or backward next to the resident 16-bit chunks (otherwise PatrickStar
    evicts them to the host), and only for resident chunks."""
    if ctx.state.optimizer <= 0:
        return lay.real  # sgd: no optimizer state
    d, e = ctx.state.weight, int(lay.elems)
    w = ctx.dp_width
    margin = gpu_adam_chunks(ctx.capacity_bytes, lay.sys_bytes, lay.chunks, w, e, d, msc)
    staging = 2 * STAGING * e * d if lay.streamed else 0.0
    room = (lay.free_bytes - lay.resident * lay.slot_bytes - staging) / (e * ctx.state.optimizer)
    return max(0, min(lay.real, lay.resident, math.floor(margin), math.floor(room)))


def host_chunk_bytes(ctx: StageContext, lay: ChunkLayout, os_gpu_chunks: int) -> float:
    """Host bytes of the replica's chunks: the optimizer chunks not on the GPU (three fp32
    chunks each) and the streamed 16-bit chunks (with a gradient chunk when ``m > 1``), each a
    pinned allocation (``Chunk.allocate_payload``: ``pin_memory=True`` on the CPU). Streamed
    chunks come and go; torch's host allocator keeps each size class's peak
    (:func:`~sim.hardware.host_memory.cached_pinned_bytes`, under PatrickStar's torch,
    :data:`~sim.memory.memtracer.PINNED_ROUNDING`)."""
    e, d, g = lay.elems, ctx.state.weight, ctx.state.grad
    peaks: dict[float, int] = {}
    if ctx.state.optimizer > 0:
        peaks[e * 4] = round(ctx.state.optimizer / 4) * (lay.real - os_gpu_chunks)
    peaks[e * d] = peaks.get(e * d, 0) + lay.streamed
    if ctx.microbatches > 1:
        peaks[e * g] = peaks.get(e * g, 0) + lay.streamed
    return cached_pinned_bytes(peaks, PINNED_ROUNDING)


def chunk_states(
    ctx: StageContext,
    act: StagePlan,
    chunk_elems: int,
    ranks: int = 1,
    msc: bool = False,
    recompute: bool = False,
    v045: bool = False,
) -> tuple[StagePlan, float, dict]:
    """``act`` with its model states in chunks; the estimated seconds added per iteration; notes.

    ``ranks``: processes sharing the server's host DRAM (PatrickStar divides it among them);
    ``msc``: memory-saving communication (module doc); ``recompute``: full checkpointing, whose
    recomputed forwards fetch some chunks again (:mod:`sim.memory.chunk_comm`); ``v045``: the
    memory tracer of PatrickStar up to v0.4.5 (module doc).

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    tracer_msc = msc and not v045
    lay = chunk_layout(ctx, act, chunk_elems, msc, tracer_msc)
    m, d, g, o = ctx.microbatches, ctx.state.weight, ctx.state.grad, ctx.state.optimizer
    e, stream, w, n = lay.elems, lay.streamed, ctx.dp_width, lay.chunks
    fetch = sum(lay.misses) / (2 * m) * e * d
    k = gpu_optimizer_chunks(ctx, lay, tracer_msc)
    os_gpu, os_host = k * e, (lay.real - k) * e  # optimizer state elements on GPU / host
    back = os_host * lay.resident / n  # host-updated, 16-bit copy on the GPU
    hbm = ctx.topology.gpu(ctx.gpu_index).memory_bound_Bps
    versions = (ctx.weight_versions - 1) * n * e * d
    mem_total = ctx.topology.host_dram_bytes
    traffic = chunk_traffic(ctx, (lay.chunks, lay.real), int(e), msc, recompute)
    plan = replace(
        act,
        weight_bytes=lay.resident * lay.slot_bytes + versions,
        grad_bytes=0.0,
        optimizer_bytes=os_gpu * o,
        optimizer_s=os_gpu * lay.utilization * GPU_ADAM_BYTES / hbm
        + grad_hooks_s(ctx, hbm)
        + traffic.memset_s(hbm),
        host_bytes=host_chunk_bytes(ctx, lay, k),
        host_framework_bytes=host_framework_bytes(mem_total, ranks),
        host_optimizer_s=host_adam_s(os_host * lay.utilization, adam_rate(ctx)),  # per tensor
        host_optimizer_pool=adam_pool(ctx),
        host_step_chunks=lay.real - k,
        step_transfers_before=_copy(ctx.gpu, ctx.host, back * g, "grads"),
        step_transfers_after=_copy(ctx.host, ctx.gpu, back * UPLOAD_BYTES, "weights"),
        fetch_bytes=fetch,
        fetch_source=ctx.host if fetch or stream else None,
        fetch_live_bytes=STAGING * e * d if stream else None,
        writeback_bytes=stream * e * g,
        gather_bytes=traffic.gather_bytes,
        gather_live_bytes=gathered_live_bytes(ctx, e, msc),
        blocking_moves=True,
        scatter_bytes=traffic.scatter_bytes,
        grad_bucket_bytes=0.0,  # gradients reduce-scatter from the chunks they overwrite
        dp_sharded=w > 1,
        dp_grad_bytes=ctx.params * g,
    )
    added = (
        2 * m * copy_s(ctx, ctx.host, ctx.gpu, fetch, ctx.host_sharers)  # synchronous moves
        + plan.host_optimizer_s
        + copy_s(ctx, ctx.gpu, ctx.host, back * g)
        + copy_s(ctx, ctx.host, ctx.gpu, back * UPLOAD_BYTES)
        + plan.optimizer_s
        - resident_plan(ctx).optimizer_s
    )
    cap = host_chunk_cap_bytes(mem_total, ranks)
    notes: dict[str, object] = dict(
        chunks=n,
        chunk_mib=round(lay.slot_bytes / MIB, 1),
        chunk_utilization=round(lay.utilization, 3),
        resident_chunks=lay.resident,
        streamed_chunks=stream,
        owned_chunks=n,
        misses_per_iteration=sum(lay.misses),
        chunk_fetches_per_iteration=traffic.fetches,
        optimizer_on_gpu_share=round(k / lay.real, 3) if lay.real else 1.0,
        host_state_gib=gib(plan.host_bytes),
        host_chunk_cap_gib=gib(cap),
    )
    if plan.host_bytes > cap:
        notes["warning"] = (
            f"the rank's host chunks ({gib(plan.host_bytes)} GiB) exceed PatrickStar's "
            f"overall_cpu_mem_ratio share of the host ({gib(cap)} GiB)"
        )
    return plan, added, notes


def grad_hooks_s(ctx: StageContext, hbm_Bps: float) -> float:
    """Seconds of PatrickStar's per-parameter gradient path per optimizer step on one replica:
    every parameter of the stage (gathered for its backward) goes through it once
    (:data:`GRAD_ZERO_BYTES` + :data:`GRAD_HOOK_BYTES`), at the GPU's memory-bound rate
    ``hbm_Bps``; and each of its ``param_tensors`` tensors is read back by ``float(...)``, which
    waits for the device, so the device then idles while the host issues the next op and reads
    (:meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s`: weight matrices large, biases
    and LayerNorm vectors small), and runs the hooks' two Python backward nodes per module
    (:func:`~sim.memory.chunk_hooks.hook_host_s`; the socket's host model, zero where it is not
    modelled). PatrickStar runs one
    backward per step (no gradient accumulation in its benchmarks); where pipesim's schedules
    run ``m > 1`` backwards per step, the other ``m - 1`` are left out."""
    return ctx.params * (GRAD_ZERO_BYTES + GRAD_HOOK_BYTES) / hbm_Bps + hook_host_s(ctx)


def host_adam_s(elems: float, adam_params_per_s: float) -> float:
    """Seconds of PatrickStar's CPU Adam over ``elems`` elements on a host whose DeepSpeed CPU
    Adam (fp32 gradients) updates ``adam_params_per_s`` parameters per second: the DRAM-bound
    rate scaled by the bytes each loop streams, :data:`HOST_ADAM_BYTES` (16-bit gradients)
    against :data:`~sim.memory.zero_offload.ADAM_HOST_BYTES`.

    >>> round(host_adam_s(2.8e9, 1e9), 6)
    2.6
    """
    return elems / adam_params_per_s * HOST_ADAM_BYTES / ADAM_HOST_BYTES


def own_threads_wait_s(host_s: float, sharers: int) -> float:
    """Estimated seconds a rank's host step takes beyond ``host_s`` (its CPU Adam at the
    server's whole rate) when it runs on its own ``1 / sharers`` of the server's threads
    (``StagePlan.host_optimizer_thread_share``, module doc): ``(sharers - 1) * host_s``.

    >>> own_threads_wait_s(2.0, 8)
    14.0
    """
    return max(0.0, (sharers - 1) * host_s)


def _step_copies(plan: StagePlan) -> tuple[Transfer, ...]:
    return plan.step_transfers_before + plan.step_transfers_after


def _copy(src: str, dst: str, nbytes: float, what: str) -> tuple[Transfer, ...]:
    return (Transfer(src, dst, nbytes, f"{what} {src}->{dst}"),) if nbytes > 0 else ()


class ChunkedPolicy(MemoryPolicy):
    """PatrickStar-style chunked model states (module doc).

    Args:
        chunk_melems: chunk size in millions (2**20) of elements; None: per stage, the size of
            PatrickStar's search (:func:`~sim.memory.memtracer.chunk_candidates`) that fits
            with the smallest footprint (:func:`search_score`).
        recompute: checkpoint every layer's activations too (PatrickStar's setting).
        msc: memory-saving communication (module doc).
        v045: the memory tracer of PatrickStar up to v0.4.5 (module doc).
    """

    name = "chunked"
    shards_states = True
    description = "model states in chunks owned across replicas, on GPU or host; ':recompute'"

    def __init__(
        self,
        chunk_melems: int | None = None,
        recompute: bool = False,
        msc: bool = False,
        v045: bool = False,
    ):
        self.chunk_elems = None if chunk_melems is None else chunk_melems * MIB
        self.recompute, self.msc, self.v045 = recompute, msc, v045
        self.mode = "full" if recompute else None

    @classmethod
    def from_args(cls, args: list[str]) -> ChunkedPolicy:
        size, words = parse_options(cls.name, args, (RECOMPUTE, MSC, V045))
        return cls(size, RECOMPUTE in words, MSC in words, V045 in words)

    def plan_all(self, contexts, fixed=()) -> list[StagePlan]:
        """Per stage, one chunk size for all its replicas (PatrickStar's ``default_chunk_size``
        is one setting of the whole process group), chosen by :func:`search_score`: of the
        candidates whose plans fit, the one PatrickStar's search reports with the smallest
        footprint; if none fits, the one whose plans lack fewest bytes."""
        out: dict[int, StagePlan] = {}
        stages: dict[int, list[int]] = {}
        for i, ctx in enumerate(contexts):
            stages.setdefault(ctx.stage, []).append(i)
        for idx in stages.values():
            ref = contexts[idx[0]]
            groups = stage_groups(ref.layers, ref.dtype_bytes)
            sizes = [self.chunk_elems] if self.chunk_elems else chunk_candidates(groups)
            best: tuple | None = None
            for size in sizes:
                plans = [self._try(contexts[i], contexts, size) for i in idx]
                short = sum(
                    short_bytes(contexts[i], p, len(contexts))
                    for i, p in zip(idx, plans, strict=True)
                )
                slowest_ms = max(p.notes["added_ms"] for p in plans)
                score = search_score(groups, size, short, slowest_ms)
                if best is None or score < best[0]:
                    best = (score, plans)
            assert best is not None
            out.update(zip(idx, best[1], strict=True))
        return [out[i] for i in range(len(contexts))]

    def _try(self, ctx: StageContext, contexts, chunk: int) -> StagePlan:
        """The plan with chunks of ``chunk`` elements (refused if a group does not fit)."""
        act = base_plan(ctx, self.recompute)
        label = f"chunks of {chunk // MIB}M" + (", full recompute" if self.recompute else "")
        label += ", memory-saving communication" if self.msc else ""
        label += ", v0.4.5 memory tracer" if self.v045 else ""
        try:
            plan, added, notes = chunk_states(
                ctx, act, chunk, len(contexts), self.msc, self.recompute, self.v045
            )
        except ValueError as exc:  # PatrickStar refuses the model at this chunk size
            return refused(ctx, act, label, str(exc))
        sharers = pool_sharers(contexts, ctx)
        plan = replace(plan, host_optimizer_thread_share=1.0 / sharers)
        added += own_threads_wait_s(plan.host_optimizer_s, sharers)
        added += ctx.microbatches * plan.recompute_s
        plan = with_overhead(ctx, plan)
        runtime = plan.reserve_bytes + plan.allocator_bytes
        plan = replace(plan, framework_bytes=gpu_framework_bytes(ctx.capacity_bytes, runtime))
        plan = describe(ctx, with_overhead(ctx, plan), label, added, **notes)
        if "warning" in notes:  # over PatrickStar's host share: it would not place the chunks
            plan = replace(plan, notes={**plan.notes, "fits": False})
        return plan

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]


def short_bytes(ctx: StageContext, plan: StagePlan, ranks: int) -> float:
    """Bytes ``plan`` lacks: its estimated GPU peak over the GPU's capacity plus its host chunks
    over PatrickStar's host share (0: it runs)."""
    gpu = max(0.0, planned_peak_bytes(plan, ctx) - ctx.capacity_bytes)
    cap = host_chunk_cap_bytes(ctx.topology.host_dram_bytes, ranks)
    return gpu + max(0.0, plan.host_bytes - cap)


def refused(ctx: StageContext, act: StagePlan, label: str, why: str) -> StagePlan:
    """A plan that cannot run: PatrickStar raises while building its chunks. The whole GPU is
    charged to the framework, so the engine's verdict is "does not fit", and the notes say why."""
    plan = with_overhead(ctx, replace(act, framework_bytes=ctx.capacity_bytes))
    return describe(ctx, plan, label, 0.0, warning=f"PatrickStar refuses it: {why}")

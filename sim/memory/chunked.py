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
  16-bit gradients, 26 bytes per element against DeepSpeed's 28,
  :func:`~sim.memory.chunk_step.host_adam_s`), with their
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
  path is :func:`~sim.memory.chunk_step.own_threads_wait_s`. (Before: one FIFO pool at the server's whole rate, which
  updated one rank's chunk while the others copied.)
* The ``0.2`` of the GPU and of the host that the tracer keeps from chunks is charged to the
  framework (``framework_bytes``, ``host_framework_bytes``), so the engine's ledger overflows
  where PatrickStar would not place its chunks.

Modules: the layout of a replica's chunks (packing, residency, optimizer chunks on the GPU, host
bytes) is :mod:`sim.memory.chunk_layout`; the step's host and HBM time
:mod:`sim.memory.chunk_step`; the stage plan built from them :mod:`sim.memory.chunk_plan`
(:func:`~sim.memory.chunk_plan.chunk_states`); the chunks' collectives
:mod:`sim.memory.chunk_comm`; this module the policy (chunk size search, refusals).
"""

from __future__ import annotations

from dataclasses import replace

from sim.memory.base import MemoryPolicy
from sim.memory.chunk_layout import MIB
from sim.memory.chunk_plan import chunk_states
from sim.memory.chunk_step import own_threads_wait_s
from sim.memory.compose import describe
from sim.memory.context import StageContext
from sim.memory.estimate import planned_peak_bytes
from sim.memory.host_adam import pool_sharers
from sim.memory.memtracer import (
    chunk_candidates,
    gpu_framework_bytes,
    host_chunk_cap_bytes,
    search_score,
)
from sim.memory.plan import StagePlan
from sim.memory.tensors import stage_groups
from sim.memory.zero_offload import RECOMPUTE, base_plan, parse_options, with_overhead

MSC = "msc"
V045 = "v045"
"""PatrickStar's memory tracer as released up to v0.4.5 (2021-12-13), the code of both published
throughput figures (module doc, "``v045``")."""


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

"""A PatrickStar stage replica's model states in chunks as a :class:`~sim.memory.plan.StagePlan`
(:mod:`sim.memory.chunked`, its module doc): the layout (:mod:`sim.memory.chunk_layout`), the
chunks' traffic (:mod:`sim.memory.chunk_comm`) and the step's time
(:mod:`sim.memory.chunk_step`) as the plan's bytes, transfers and seconds.
"""

from __future__ import annotations

from dataclasses import replace

from sim.memory.chunk_comm import chunk_traffic
from sim.memory.chunk_layout import (
    MIB,
    STAGING,
    chunk_layout,
    gathered_live_bytes,
    gpu_optimizer_chunks,
    host_chunk_bytes,
)
from sim.memory.chunk_step import GPU_ADAM_BYTES, UPLOAD_BYTES, grad_hooks_s, host_adam_s
from sim.memory.compose import gib, resident_plan
from sim.memory.context import StageContext
from sim.memory.estimate import copy_s
from sim.memory.host_adam import adam_pool, adam_rate
from sim.memory.memtracer import host_chunk_cap_bytes, host_framework_bytes
from sim.memory.plan import StagePlan, Transfer


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
    ``msc``: memory-saving communication (:mod:`sim.memory.chunked`); ``recompute``: full
    checkpointing, whose recomputed forwards fetch some chunks again
    (:mod:`sim.memory.chunk_comm`); ``v045``: the memory tracer of PatrickStar up to v0.4.5
    (:mod:`sim.memory.chunked`).

    Raises:
        ValueError: a parameter group larger than a chunk.
    """
    # Long by StagePlan's 23 fields and 11 notes; the arithmetic fits.
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


def _copy(src: str, dst: str, nbytes: float, what: str) -> tuple[Transfer, ...]:
    return (Transfer(src, dst, nbytes, f"{what} {src}->{dst}"),) if nbytes > 0 else ()

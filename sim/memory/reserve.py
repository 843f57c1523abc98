"""The bytes of a stage's GPU that are not its model states or activation stash.

Charged in the engine's ledger at t = 0 (so the ledger's peak, the one source of truth for peak
memory, includes them) and counted by the planning estimate (:mod:`sim.memory.estimate`):

* ``reserve``: the process's runtime reserve, :meth:`RuntimeReserve.runtime_bytes`: CUDA
  context, one cuBLAS workspace (the compute stream) and NCCL buffers for every peer of every
  communicator the stage uses (:func:`nccl_peers`);
* ``allocator``: the allocator margin, :meth:`RuntimeReserve.allocator_bytes` of the plan's
  activation memory;
* ``working``: what is live only around a backward or held by the pipeline runtime, charged
  for the whole run because the peak of every schedule falls at a backward
  (:func:`working_bytes`).
"""

from __future__ import annotations

from sim.memory.context import StageContext


def nccl_peers(stage: int, stages: int, dp_width: int) -> int:
    """(communicator, peer) pairs of a stage replica: its pipeline neighbours (previous and
    next stage) and its ring neighbours in the data-parallel group (``min(2, w - 1)``)."""
    pipeline = (stage > 0) + (stage < stages - 1)
    return pipeline + min(2, dp_width - 1)


def backward_working_bytes(ctx: StageContext) -> float:
    """Working memory of the stage's largest backward: the largest layer's stash.

    Autograd runs one layer's backward at a time; the gradients it creates for that layer's
    saved tensors are at most as large as the tensors themselves, and they are freed before the
    next layer's backward. For the output layer this is the gradient of the logits and the loss
    (the head's stash is the fp32 logits and cross-entropy, memory.md §2). An upper bound
    (assumption), not a measurement: a trace's layers do not carry the widths that
    :func:`sim.memory.transients.mlp_backward_working_bytes` needs, and for the head it equals
    :func:`~sim.memory.transients.logits_grad_bytes` plus the final norm's ``4sbh``.
    """
    return max((layer.act_bytes for layer in ctx.layers), default=0.0)


def output_cache_bytes(ctx: StageContext) -> float:
    """The stage output of every in-flight micro-batch: torch.distributed.pipelining keeps
    ``fwd_cache[mb] = (outputs, inputs)`` from a micro-batch's forward until its backward
    (``_PipelineStageBase.forward_one_chunk``), and no layer of the stage saves its own
    output. ``in_flight x out_bytes`` (0 on the last stage)."""
    return ctx.in_flight * ctx.out_bytes


def ddp_bucket_bytes(ctx: StageContext, gpu_grad_bytes: float) -> float:
    """DistributedDataParallel's gradient buckets: with the default
    ``gradient_as_bucket_view=False`` it copies the gradients it reduces into flat bucket
    buffers, one more copy of the GPU-resident gradients ``gpu_grad_bytes`` (torch docs,
    ``DistributedDataParallel``); 0 without data parallelism."""
    return gpu_grad_bytes if ctx.dp_width > 1 else 0.0


def working_bytes(ctx: StageContext, gpu_grad_bytes: float) -> float:
    """Backward working memory + pipeline output cache + DDP buckets, in bytes."""
    return (
        backward_working_bytes(ctx)
        + output_cache_bytes(ctx)
        + ddp_bucket_bytes(ctx, gpu_grad_bytes)
    )


def overhead(
    ctx: StageContext, activation_bytes: float | None = None, gpu_grad_bytes: float | None = None
) -> dict[str, float]:
    """``{"reserve_bytes", "allocator_bytes", "working_bytes"}`` of ``ctx``'s stage on its
    GPU (module doc), for a plan whose activation memory (stash, buffers, transients) peaks at
    ``activation_bytes`` and which keeps ``gpu_grad_bytes`` of gradients on the GPU (defaults:
    everything resident, ``in_flight`` stashes)."""
    rv = ctx.topology.gpu(ctx.gpu_index).reserve
    if activation_bytes is None:
        activation_bytes = ctx.in_flight * ctx.act_bytes
    if gpu_grad_bytes is None:
        gpu_grad_bytes = ctx.params * ctx.state.grad
    return {
        "reserve_bytes": rv.runtime_bytes(nccl_peers(ctx.stage, ctx.stages, ctx.dp_width)),
        "allocator_bytes": rv.allocator_bytes(activation_bytes),
        "working_bytes": working_bytes(ctx, gpu_grad_bytes) if rv.working else 0.0,
    }


def tensor_capacity_bytes(gpu) -> float:
    """Bytes a GPU (:class:`~sim.hardware.topology.GPU`) offers tensors before any stage is
    placed: usable capacity minus the context and one cuBLAS workspace (NCCL buffers, the
    allocator margin and working memory depend on the stage)."""
    return gpu.memory_bytes - gpu.reserve.runtime_bytes(peers=0)

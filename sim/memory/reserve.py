"""The bytes of a stage's GPU that are not its model states or activation stash.

Charged in the engine's ledger at t = 0 (so the ledger's peak, the one source of truth for peak
memory, includes them) and counted by the planning estimate (:mod:`sim.memory.estimate`) and
the rank model (:mod:`sim.memory.rank_memory`):

* ``reserve``: the process's runtime reserve outside PyTorch's allocator,
  :func:`runtime_reserve_bytes`: the CUDA context and NCCL's buffers for every peer of every
  communicator the stage uses (:func:`nccl_peers`);
* ``allocator``: what the caching allocator reserves beyond the allocated bytes; planning uses
  :meth:`RuntimeReserve.allocator_bytes` of the activation memory, the finalized plan the
  allocator replay (:func:`sim.memory.tensor_program.allocator_margin_bytes`);
* ``working``: what is live only while an action runs (its layers' transients,
  :func:`sim.memory.activation_peak.stage_transients`) and the stage outputs a framework keeps
  until their backward (:func:`sim.memory.activation_peak.output_cache`), charged for the whole
  run because the peak of every schedule falls in an action;
* ``framework buffers``: the framework's persistent buffers
  (:func:`sim.memory.rank_memory.framework_buffer_bytes`).
"""

from __future__ import annotations

from sim.memory.activation_peak import output_cache
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan
from sim.memory.rank_memory import framework_buffer_bytes


def nccl_peers(
    stage: int, stages: int, dp_width: int, tp: int = 1, cp: int = 1, ep: int = 1
) -> int:
    """(communicator, peer) pairs of a stage replica's NCCL connections: its pipeline
    neighbours (previous and next stage); its ring neighbours in the data-parallel group
    (``min(2, w - 1)``) and in the tensor-parallel group (``min(2, tp - 1)``); every other
    member of the context- and expert-parallel groups (all-to-all and ring exchanges connect
    to each: ``cp - 1``, ``ep - 1``)."""
    pipeline = (stage > 0) + (stage < stages - 1)
    return pipeline + min(2, dp_width - 1) + min(2, tp - 1) + (cp - 1) + (ep - 1)


def runtime_reserve_bytes(ctx: StageContext) -> float:
    """CUDA context + NCCL buffers of ``ctx``'s stage (:func:`nccl_peers`), outside PyTorch's
    allocator (:class:`~sim.hardware.capacity.RuntimeReserve`)."""
    rv = ctx.topology.gpu(ctx.gpu_index).reserve
    peers = nccl_peers(
        ctx.stage,
        ctx.stages,
        ctx.dp_width,
        ctx.tensor_parallel,
        ctx.context_parallel,
        ctx.expert_parallel,
    )
    return rv.runtime_bytes(peers, gemm_streams=0)


def backward_working_bytes(ctx: StageContext) -> float:
    """Working memory of the stage's largest action whatever the policy keeps: the largest
    transient of its layers (:class:`~sim.memory.layer_work.LayerWork`), an upper bound of
    :func:`~sim.memory.activation_peak.stage_transients`, which subtracts the stash the layers
    behind a layer have freed (as much as the policy keeps: nothing when it recomputes)."""
    return max((max(w.fwd_bytes, w.bwd_bytes) for w in ctx.layer_work), default=0.0)


def output_cache_bytes(ctx: StageContext) -> float:
    """The stage outputs its framework keeps until their backward
    (:func:`~sim.memory.activation_peak.output_cache`)."""
    return output_cache(ctx)


def working_bytes(ctx: StageContext) -> float:
    """Backward working memory + pipeline output cache, in bytes."""
    return backward_working_bytes(ctx) + output_cache_bytes(ctx)


def overhead(
    ctx: StageContext, activation_bytes: float | None = None, gpu_grad_bytes: float | None = None
) -> dict[str, float]:
    """``{"reserve_bytes", "allocator_bytes", "working_bytes", "framework_buffer_bytes"}`` of
    ``ctx``'s stage on its GPU (module doc), for a plan whose activation memory (stash,
    buffers, transients) peaks at ``activation_bytes`` and which keeps ``gpu_grad_bytes`` of
    gradients on the GPU (defaults: everything resident, ``in_flight`` stashes)."""
    rv = ctx.topology.gpu(ctx.gpu_index).reserve
    if activation_bytes is None:
        activation_bytes = ctx.in_flight * ctx.act_bytes
    if gpu_grad_bytes is None:
        gpu_grad_bytes = ctx.params * ctx.state.grad
    plan = StagePlan(act_bytes=ctx.act_bytes, resident_act_bytes=ctx.act_bytes)
    plan = StagePlan(plan.act_bytes, plan.resident_act_bytes, grad_bytes=gpu_grad_bytes)
    return {
        "reserve_bytes": runtime_reserve_bytes(ctx),
        "allocator_bytes": rv.allocator_bytes(activation_bytes),
        "working_bytes": working_bytes(ctx) if rv.working else 0.0,
        "framework_buffer_bytes": framework_buffer_bytes([(ctx, plan)]),
    }


def tensor_capacity_bytes(gpu) -> float:
    """Bytes a GPU (:class:`~sim.hardware.parts.GPU`) offers tensors before any stage is
    placed: usable capacity minus the context and one cuBLAS workspace (NCCL buffers, the
    allocator margin and working memory depend on the stage)."""
    return gpu.memory_bytes - gpu.reserve.runtime_bytes(peers=0)

"""A GPU's peak memory by category, without simulating time: the one memory model.

``sim memory``, the planner's memory bound and the charges the engine's ledger makes at t = 0
(:func:`sim.memory.compose.finalize_plans`) all come from here, so they agree. A GPU runs one
or several stage chunks of one pipeline rank (``pairs``: each chunk's
:class:`~sim.memory.context.StageContext` and finalized :class:`~sim.memory.plan.StagePlan`).
Its peak is

``model states + framework buffers + max over the rank's actions of (stashes in flight + the
running action's transient + pipeline buffers) + reserved-but-unallocated + runtime reserve``

* **model states** (``weights``, ``gradients``, ``optimizer``): the plans' GPU bytes, allocated
  once before the first iteration and kept;
* **framework buffers** (``framework``): :func:`framework_buffer_bytes`;
* **activations**: walking the rank's actions over an iteration in program order
  (``StageContext.ops``), each forward adds its stage's kept stash and each backward (``B``,
  or ``W`` of a split backward) frees the oldest one of its stage:
  :func:`~sim.memory.activation_peak.activation_peak`;
* **working**: while an action runs, its layers' transients beyond the stash
  (:func:`~sim.memory.activation_peak.stage_transients`), and the pipeline output cache of a
  framework that keeps stage outputs (:func:`~sim.memory.activation_peak.output_cache`);
  the rebuilt bytes of recomputed layers (``StagePlan.rebuild_bytes``) count as activations;
* **the reduction's bucket**: where the framework flattens its gradients one bucket at a time
  after the last backward (DeepSpeed's pipeline engine, :mod:`sim.memory.flat_reduce`), that
  moment holds the model states and one bucket, counted as ``working``; it is the peak where
  it exceeds the activation moment's activations, working memory and buffers;
* **the step's transient**: where the optimizer step allocates fp32 copies of the gradients
  while it runs (DeepSpeed's ``FP16_Optimizer``, :mod:`sim.memory.step_moment`), that moment,
  after the backward and the reduction, holds the model states and the transient, counted as
  ``working``; the peak where it exceeds both moments above (ties: the earlier moment).
  Both moments also count the working memory the engine's ledger charges at t = 0 and keeps
  (``StagePlan.working_bytes``: the largest action's transient and output cache), so that
  ``sim memory`` and ``sim run`` agree (assumption: an upper bound, as PyTorch has freed the
  last backward's transients by then);
* **buffers**: the stage input received for a forward and the output gradient for a backward,
  and the input gradient held until it is sent;
* **FSDP's unsharded bytes** (a plan with FSDP units): the running action's unsharded
  parameters (``weights``), all-gather outputs (``buffers``), gradients and reduce-scatter
  inputs (``gradients``) at its largest moment, and what each stage keeps between actions
  (:mod:`sim.memory.fsdp_inflight`);
* **allocator**: what PyTorch's caching allocator reserves beyond the allocated bytes
  (:func:`sim.memory.tensor_program.allocator_margin_bytes`, a replay of the rank's tensors
  through :mod:`sim.memory.allocator`);
* **reserve**: the CUDA context and NCCL's buffers, outside PyTorch's allocator
  (:func:`sim.memory.reserve.runtime_reserve_bytes`).

``allocated`` (what ``torch.cuda.max_memory_allocated`` reports) is every category but the last
two; ``reserved`` (``max_memory_reserved``) adds ``allocator``; ``device`` adds ``reserve``; the
fit verdict compares ``device`` with the GPU's usable capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sim.memory.activation_peak import (
    BACKWARD_OPS,
    DONE_OPS,
    Pair,
    activation_peak,
    kept_peak,
    output_cache,
    stage_transients,
)
from sim.memory.context import StageContext
from sim.memory.cublas_workspace import torch_cublas_bytes
from sim.memory.flat_reduce import flat_reduced, reduce_bucket_bytes
from sim.memory.framework_memory import dummy_wgrad_bytes
from sim.memory.step_moment import step_moment_bytes

ALLOCATED = (
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "working",
    "buffers",
    "framework",
)
"""Categories PyTorch's allocator hands out (``max_memory_allocated`` counts them)."""
CATEGORIES = (*ALLOCATED, "allocator", "reserve")
"""Every category of a GPU's peak: the allocated ones, the allocator's unallocated reserved
bytes, the runtime reserve outside the allocator."""


@dataclass(frozen=True)
class RankMemory:
    """One GPU's peak (module doc).

    Attributes:
        gpu: its node name.
        stages: the stage chunks it runs.
        by_category: bytes of each of :data:`CATEGORIES` at the peak.
        capacity_bytes: its usable capacity.
        peak_at: the action the peak falls in (``"3B"``: the backward of stage 3).
        floor_bytes: what the engine's ledger surely reaches on this GPU: its charges at
            t = 0 (model states, framework buffers, working memory, allocator margin, runtime
            reserve) and the largest kept stash (:func:`kept_peak`) or, where more, the
            optimizer step's transient (:func:`~sim.memory.step_moment.step_moment_bytes`);
            the planner's memory bound (:mod:`sim.plan.bounds`).
    """

    gpu: str
    stages: tuple[int, ...]
    by_category: dict[str, float] = field(default_factory=dict)
    capacity_bytes: float = 0.0
    peak_at: str = ""
    floor_bytes: float = 0.0

    @property
    def allocated_bytes(self) -> float:
        """What ``torch.cuda.max_memory_allocated`` reports."""
        return sum(self.by_category.get(c, 0.0) for c in ALLOCATED)

    @property
    def reserved_bytes(self) -> float:
        """What ``torch.cuda.max_memory_reserved`` reports."""
        return self.allocated_bytes + self.by_category.get("allocator", 0.0)

    @property
    def device_bytes(self) -> float:
        """Everything the process holds on the GPU (``reserved`` + runtime reserve)."""
        return self.reserved_bytes + self.by_category.get("reserve", 0.0)

    @property
    def headroom_bytes(self) -> float:
        """``capacity - device`` (negative: it does not fit)."""
        return self.capacity_bytes - self.device_bytes

    @property
    def fits(self) -> bool:
        return self.headroom_bytes >= 0


BUFFERS_SOURCE = (
    "framework buffers: the framework profile's GEMM workspaces (Transformer Engine's "
    "get_cublas_workspace, transformer_engine/pytorch/cpp_extensions/gemm.py; PyTorch's two "
    "CUBLAS_WORKSPACE_CONFIG-sized cuBLAS workspaces), TE's dummy weight gradients "
    "(get_dummy_wgrad), deferred output-layer weight gradients and gradient buckets (DDP's "
    "bucket copy, ZeRO's reduce bucket) (sim.memory.rank_memory.framework_buffer_bytes; "
    "sim.memory.framework_memory); with a chunked (PatrickStar) policy also the GPU share "
    "its memory tracer keeps out of reach, 1 - overall_gpu_mem_ratio (sim.memory.memtracer)"
)
"""Where :func:`framework_buffer_bytes` (the ``framework`` category of a GPU's peak) comes
from, for ``results.csv``'s ``peak_reserve_source`` (:func:`sim.plan.point_row.peak_reserve_source`)."""


def framework_buffer_bytes(pairs: Sequence[Pair]) -> float:
    """Bytes of the framework's own persistent buffers on the GPU: Transformer Engine's dummy
    weight gradients (one per weight shape over every chunk, :func:`~sim.memory.
    framework_memory.dummy_wgrad_bytes`), GEMM workspaces allocated through PyTorch (TE's,
    and PyTorch's cuBLAS workspaces of the forward's and autograd's threads, each
    ``CUBLAS_WORKSPACE_CONFIG``'s size or ``RuntimeReserve.cublas_workspace_bytes``:
    :func:`~sim.memory.cublas_workspace.torch_cublas_bytes`), the output layer's deferred
    weight-gradient buffers (:func:`deferred_wgrad_bytes`), and the gradient-reduction
    buffers: DDP's bucket copy of the
    GPU gradients with data parallelism, or a plan's own bucket (ZeRO's
    ``grad_bucket_bytes``); none where the framework flattens one bucket at a time after the
    backward (DeepSpeed's, :func:`~sim.memory.flat_reduce.flat_reduced`: a moment of its own,
    :func:`rank_memory`). None on a rank that counts tensors only (a CPU rank)."""
    ctx0 = pairs[0][0]
    rv = ctx0.topology.gpu(ctx0.gpu_index).reserve
    if not rv.working:
        return 0.0
    fw = ctx0.framework
    out = fw.workspace_bytes + torch_cublas_bytes(
        rv.cublas_workspace_bytes, fw.cublas_workspace_config
    )
    if fw.dummy_wgrads:
        out += dummy_wgrad_bytes((w for c, _ in pairs for w in c.layer_work), ctx0.dtype_bytes)
    out += sum(deferred_wgrad_bytes(ctx) for ctx, _ in pairs)
    for ctx, plan in pairs:
        if plan.grad_bucket_bytes is not None:
            out += plan.grad_bucket_bytes
        elif fw.bucket_copy and ctx.dp_width > 1 and not flat_reduced(ctx, plan):
            out += plan.grad_bytes
    return out


def deferred_wgrad_bytes(ctx: StageContext) -> float:
    """Bytes the output layer of ``ctx``'s stage holds for its deferred weight gradient when
    the stage's forwards peak (:mod:`sim.memory.layer_work`, "deferred embedding weight
    gradient"): ``n = min(limit, m)`` micro-batches' inputs (``n = m`` with no limit) and the
    output gradients of ``min(n, m - 1)`` (the last micro-batch's backward comes after its
    forward); 0 without deferral or without the output layer.

    Example:
        limit 2, m = 4, inputs 1 and gradients 10 bytes per micro-batch: 2 + 2 x 10 = 22.
    """
    limit = ctx.framework.work.wgrad_deferral
    inputs = sum(w.deferred[0] for w in ctx.layer_work)
    grads = sum(w.deferred[1] for w in ctx.layer_work)
    if limit is None or inputs + grads <= 0:
        return 0.0
    m = ctx.microbatches
    n = m if limit == 0 else min(limit, m)
    return n * inputs + min(n, m - 1) * grads


REDUCE_MOMENT = "reduce"
"""``peak_at`` of a peak at the gradient reduction after the last backward (a flat bucket
larger than the busiest action's stashes, transients and buffers: :mod:`sim.memory.flat_reduce`)."""
STEP_MOMENT = "step"
"""``peak_at`` of a peak at the optimizer step (its transient larger than the activation
moment's stashes, transients and buffers and than the reduction's bucket:
:mod:`sim.memory.step_moment`)."""


def rank_memory(pairs: Sequence[Pair]) -> RankMemory:
    """The peak of the GPU running ``pairs`` (its stage chunks, finalized plans), by category
    (module doc), or, where the framework flattens its gradients one bucket at a time after
    the last backward and that bucket exceeds the activation moment's activations, working
    memory and buffers, that moment (:data:`REDUCE_MOMENT`: the bucket as working memory,
    no activations or buffers; :func:`~sim.memory.flat_reduce.reduce_bucket_bytes`), or,
    where the optimizer step's transient exceeds both, the step moment (:data:`STEP_MOMENT`:
    the transient as working memory, :func:`~sim.memory.step_moment.step_moment_bytes`);
    either with the plans' ``working_bytes`` the engine keeps from t = 0 (module doc)."""
    act = activation_peak(pairs)
    cats = {c: 0.0 for c in CATEGORIES}
    for _, plan in pairs:
        cats["weights"] += plan.weight_bytes
        cats["gradients"] += plan.grad_bytes
        cats["optimizer"] += plan.optimizer_bytes
        cats["framework"] += plan.framework_bytes + plan.framework_buffer_bytes
        cats["allocator"] += plan.allocator_bytes
        cats["reserve"] += plan.reserve_bytes
    cats["activations"] = act.activations
    cats["working"] = act.working
    cats["buffers"] = act.buffers + act.fsdp.buffers
    cats["weights"] += act.fsdp.weights
    cats["gradients"] += act.fsdp.gradients
    at = act.at
    # after the last backward, nothing in flight: the reduction's bucket, then the step's
    ctx0 = pairs[0][0]
    step = step_moment_bytes(ctx0.framework.step_transient, (p for _, p in pairs))
    working0 = sum(p.working_bytes for _, p in pairs)  # the ledger's working charge, from t = 0
    later = ((REDUCE_MOMENT, reduce_bucket_bytes(pairs)), (STEP_MOMENT, step))
    for moment, held in later:
        if held > 0 and working0 + held > cats["activations"] + cats["working"] + cats["buffers"]:
            cats.update(activations=0.0, working=working0 + held, buffers=0.0)
            at = moment
    charged = sum(p.static_gpu_bytes + p.overhead_bytes for _, p in pairs)
    ops = ((s, op) for s, op, _ in ctx0.ops)
    kept = kept_peak(ops, {c.stage: p for c, p in pairs}, ctx0.overlapped)
    return RankMemory(
        gpu=ctx0.gpu,
        stages=tuple(c.stage for c, _ in pairs),
        by_category=cats,
        capacity_bytes=ctx0.capacity_bytes,
        peak_at=at,
        floor_bytes=charged + max(kept, step),
    )


__all__ = [
    "ALLOCATED",
    "BACKWARD_OPS",  # re-exported: sim.memory.activation_peak
    "DONE_OPS",  # re-exported: sim.memory.activation_peak
    "Pair",  # re-exported: sim.memory.activation_peak
    "BUFFERS_SOURCE",
    "CATEGORIES",
    "REDUCE_MOMENT",
    "STEP_MOMENT",
    "RankMemory",
    "deferred_wgrad_bytes",
    "framework_buffer_bytes",
    "kept_peak",  # re-exported: sim.memory.activation_peak
    "output_cache",  # re-exported: sim.memory.activation_peak
    "rank_memory",
    "stage_transients",  # re-exported: sim.memory.activation_peak
]

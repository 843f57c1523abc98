"""A gradient reduction that flattens the gradients one bucket at a time: DeepSpeed's.

DeepSpeed's pipeline engine reduces the data-parallel gradients after the last backward of an
iteration (microsoft/DeepSpeed@f5dde36 ``deepspeed/runtime/pipe/engine.py`` l.241-251:
``_exec_reduce_grads`` -> ``allreduce_gradients(bucket_size=MEMORY_OPT_ALLREDUCE_SIZE)``, 5e8
elements, ``runtime/engine.py`` l.100; ``pipeline_enable_backward_allreduce = True`` at any
width, ``pipe/engine.py`` l.67). Without ZeRO that is ``buffered_allreduce_fallback``
(``runtime/engine.py`` l.1794-1811, l.2314-2323): the ``.grad`` of every parameter in
``named_parameters`` order (l.2258-2284), split by dtype (``split_half_float_double_sparse``,
l.115-131; one fp16 group in an fp16 model), then ``allreduce_no_retain`` (l.2245-2256)
appends tensors to a bucket until its element count *exceeds* the limit and reduces it with
``allreduce_and_copy`` (l.2240-2243) before it fills the next: ``allreduce_bucket``
(l.2215-2238) flattens the bucket into a new tensor (``self.flatten``:
``torch::utils::flatten_dense_tensors``, ``csrc/utils/flatten_unflatten.cpp``: ``at::cat``),
all-reduces and scales it in place (no cast: ``communication_data_type`` is the gradients'
dtype with fp16, l.783-794), then copies it back into the gradients through views
(``unflatten``) and drops it. So one flat bucket at a time is allocated beside the gradients,
and none persists (DDP's bucket copy of the whole gradient, :attr:`~sim.memory.
framework_memory.FrameworkMemory.bucket_copy`, is not made).

That happens after the last backward: every micro-batch's stash, transient and exchange
buffer of the rank has been freed, so the bucket is the rank's peak only where it exceeds
them (:func:`sim.memory.rank_memory.rank_memory`, its ``"reduce"`` moment).

The parameter tensors are the ones the allocator replay uses (:func:`param_shares`: each
layer's GEMM weights, then the rest of the layer as one tensor; an assumption: the rest's
biases and norms, a few ``h`` elements each, are not split, and the layer's GEMM weights come
in its code's order).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.context import StageContext
from sim.memory.plan import StagePlan


def flat_buckets(sizes: Sequence[float], limit: float) -> tuple[float, ...]:
    """Sizes of the buckets of tensors of ``sizes`` (in order) as ``allreduce_no_retain``
    fills them (module doc): a bucket is reduced as soon as its total exceeds ``limit``
    (so it holds the tensor that crossed it), the rest last. Same unit for both (elements
    or bytes of one dtype). Empty ``sizes``: ``()``.

    Example (three gradients of 4e8 elements, a 5e8 limit: 4e8 does not exceed it, 8e8
    does; then 4e8 left):
        >>> flat_buckets([4e8, 4e8, 4e8], 5e8)
        (800000000.0, 400000000.0)
    """
    out: list[float] = []
    total = 0.0
    for size in sizes:
        total += size
        if total > limit:
            out.append(total)
            total = 0.0
    if total > 0:
        out.append(total)
    return tuple(out)


def param_shares(ctx: StageContext) -> list[float]:
    """Share of ``ctx``'s stage parameters in each parameter tensor, in layer order: the
    layers' GEMM weights (:class:`~sim.memory.layer_work.LayerWork` ``weights``) and one
    tensor for the rest of each layer (a layer whose GEMM weights exceed its parameters:
    one tensor). Empty when the stage has no parameters."""
    total = sum(x.param_bytes for x in ctx.layers)
    if total <= 0:
        return []
    out: list[float] = []
    for layer, work in zip(ctx.layers, ctx.layer_work, strict=True):
        weights = [r * c * ctx.dtype_bytes for r, c in work.weights]
        if sum(weights) > layer.param_bytes:
            weights = []
        rest = layer.param_bytes - sum(weights)
        out.extend(w / total for w in weights if w > 0)
        if rest > 0:
            out.append(rest / total)
    return out


def flat_reduced(ctx: StageContext, plan: StagePlan) -> bool:
    """Whether ``plan``'s gradients are reduced through flat buckets one at a time (module
    doc): its framework's ``reduce_bucket_bytes`` is set, its optimizer state is not sharded
    and it has no reduce bucket of its own (ZeRO's ``grad_bucket_bytes``) or FSDP units."""
    return (
        ctx.framework.reduce_bucket_bytes > 0
        and not plan.dp_sharded
        and plan.grad_bucket_bytes is None
        and plan.fsdp is None
        and plan.scatter_bytes <= 0
    )


def reduce_bucket_bytes(pairs: Sequence[tuple[StageContext, StagePlan]]) -> float:
    """Bytes of the largest flat bucket the rank running ``pairs`` (its stage chunks and
    plans) allocates while it reduces its gradients (module doc): its GPU gradients
    (``grad_bytes``) split into tensors by :func:`param_shares`, chunk after chunk, and
    filled into buckets of ``reduce_bucket_bytes`` by :func:`flat_buckets`; 0 where the
    framework does not reduce that way (:func:`flat_reduced`).

    Example: gradients of 2.4e9 bytes in three equal fp16 tensors, a 5e8-element (1e9-byte)
    limit: buckets of 1.6e9 and 8e8 bytes, so 1.6e9.
    """
    sizes = [
        share * plan.grad_bytes
        for ctx, plan in pairs
        if flat_reduced(ctx, plan)
        for share in param_shares(ctx)
    ]
    if not sizes:
        return 0.0
    return max(flat_buckets(sizes, pairs[0][0].framework.reduce_bucket_bytes))

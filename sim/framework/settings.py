"""What a framework profile declares: :class:`Setting` (a value and the source that says so)
and :class:`FrameworkSettings`, every setting a profile may override with its default, the
behaviour of ``pipesim``'s own torch runtime (what ``sim validate`` replays). The behaviour
built on them is :class:`sim.framework.base.Framework`'s (that module's doc)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sim.engine.inputs import DDP_BUCKET_BYTES
from sim.memory.fsdp import FsdpSpec


@dataclass(frozen=True)
class Setting:
    """One thing a framework does around the model.

    Attributes:
        value: the setting (bytes, a flag, a mode).
        source: where the framework's code says so (repository, file, function), or
            ``"assumption: ..."``.
    """

    value: Any
    source: str


PIPESIM = "pipesim's torch runtime (backends/torch, torch.distributed.pipelining), as sim validate replays it"


class FrameworkSettings:
    """What a training framework declares it does around the model, each a :class:`Setting`:
    its value and the source that says so; :class:`~sim.framework.base.Framework` holds the
    behaviour that reads them, and each profile overrides what differs from these defaults
    (``pipesim``'s torch runtime).

    Class attributes (each a :class:`Setting`):
        dp_bucket_bytes: data-parallel gradient buckets reduced while the last backward runs
            (bytes); 0: all gradients reduced after the backward, exposed.
        tied_embedding: the word embedding is kept on the first and the last stage and its
            gradient all-reduced between those two stages at every step.
        tied_after_dp: that all-reduce runs after the data-parallel reduction (else before).
        tp_grad_allreduce: after the data-parallel reduction, the gradients of parameters
            every tensor rank keeps whole but computes from its own tokens or heads (norms with
            sequence parallelism, QK-norms) are all-reduced over the tensor group, in the
            gradient buffer's dtype (:mod:`sim.parallel.finalize_grads`).
        placement: how ``partition: uniform`` places layers on stages
            (:data:`sim.framework.placement.PLACEMENTS`: ``layers``, ``megatron``,
            ``parameters``): embedding and head placement.
        fewer_microbatches: 1F1B runs with fewer micro-batches than stages.
        blocking_p2p: stage-boundary sends are exchanged at action boundaries and waited on.
        sync_after_p2p: a host/device sync after every exchange.
        sync_before_forward: a host/device sync before every forward.
        step_barrier: where the stages wait for each other at the optimizer step.
        distributed_optimizer: optimizer state sharded over the data-parallel replicas
            (gradients reduce-scattered, parameters all-gathered after the step).
        step_extra_bytes: HBM bytes per parameter its mixed-precision optimizer step moves
            besides the optimizer kernel's own (overflow check, fp32 gradient copies, norm,
            unscale, copy back to the 16-bit weights); 0: a fused step only
            (:func:`sim.memory.states.optimizer_step_s`).
        reduce_extra_bytes: ``(always, more with w > 1)``: HBM bytes per parameter its
            gradient reduction moves on the GPU around the collective (flattening into a
            buffer, averaging, copying back), at any data-parallel width and on top with
            ``w > 1``; sequential with the exposed reduction, so charged at the step.
        main_grad_step_bytes: as ``step_extra_bytes`` where 16-bit weights accumulate their
            gradients in fp32 ``main_grad`` buffers (None: ``step_extra_bytes``); with it or
            ``grad_buffer_passes`` the step's passes also run under a sharded optimizer,
            on its shard (:mod:`sim.framework.step_work`).
        grad_buffer_passes: ``(always, more with w > 1)``: passes over the whole local
            gradient buffer per iteration (zeroing, checking, scaling it).
        sp_input_regather: with sequence parallelism its column-parallel layers keep their
            input's ``1/t`` shard and gather it again in the backward
            (:mod:`sim.parallel.megatron`).
        step_transient: GPU bytes its mixed-precision step allocates per gradient byte
            while it runs (fp32 gradient copies), for 16-bit weights.
        overflow_check_ops: ops its 16-bit step issues per parameter tensor before reading
            one value of it back, tensor after tensor (a serial overflow check); 0: none.
        microbatch_load: ``(ops, first_ops, last_ops, copies, broadcasts, broadcast_bytes)``:
            the host's blocking work loading each micro-batch on the first and the last stage
            (:class:`~sim.engine.inputs.MicrobatchLoad`); all 0: none.
        schedules: the pipeline schedules it runs (None: every one pipesim has).
        main_grads_fp32: bf16 parameters accumulate their gradients in an fp32 buffer.
        bucket_copy: data-parallel gradients are copied into flat bucket buffers.
        deallocate_outputs: a stage's output is freed once it is sent.
        wgrad_fusion: weight gradients accumulate into the gradient buffer inside the GEMM
            (Transformer Engine's dummy weight gradients, one per weight shape).
        te_workspace: Transformer Engine's cuBLAS workspace, allocated through PyTorch.
        fsdp: how it runs FSDP when a point shards over ``dp_shard > 1`` ranks
            (:class:`~sim.memory.fsdp.FsdpSpec`: mixed precision, resharding, with pipeline
            parallelism); None: it has no FSDP.
        low_precision_library: whose recipes run its low-precision linear layers
            (:mod:`sim.compute.precision`: ``transformer_engine`` or ``torchao``).
    """

    schedules: ClassVar[Setting] = Setting(None, PIPESIM)
    dp_bucket_bytes: ClassVar[Setting] = Setting(DDP_BUCKET_BYTES, PIPESIM)
    tied_embedding: ClassVar[Setting] = Setting(False, PIPESIM)
    tied_after_dp: ClassVar[Setting] = Setting(False, PIPESIM)
    tp_grad_allreduce: ClassVar[Setting] = Setting(False, PIPESIM)
    placement: ClassVar[Setting] = Setting("layers", PIPESIM)
    fewer_microbatches: ClassVar[Setting] = Setting(False, PIPESIM)
    blocking_p2p: ClassVar[Setting] = Setting(False, PIPESIM)
    sync_after_p2p: ClassVar[Setting] = Setting(False, PIPESIM)
    sync_before_forward: ClassVar[Setting] = Setting(False, PIPESIM)
    step_barrier: ClassVar[Setting] = Setting("none", PIPESIM)
    distributed_optimizer: ClassVar[Setting] = Setting(False, PIPESIM)
    step_extra_bytes: ClassVar[Setting] = Setting(0.0, PIPESIM)
    reduce_extra_bytes: ClassVar[Setting] = Setting((0.0, 0.0), PIPESIM)
    main_grad_step_bytes: ClassVar[Setting] = Setting(None, PIPESIM)
    grad_buffer_passes: ClassVar[Setting] = Setting((0.0, 0.0), PIPESIM)
    sp_input_regather: ClassVar[Setting] = Setting(False, PIPESIM)
    step_transient: ClassVar[Setting] = Setting(0.0, PIPESIM)
    overflow_check_ops: ClassVar[Setting] = Setting(0, PIPESIM)
    microbatch_load: ClassVar[Setting] = Setting((0, 0, 0, 0, 0, 0.0), PIPESIM)
    main_grads_fp32: ClassVar[Setting] = Setting(False, PIPESIM)
    bucket_copy: ClassVar[Setting] = Setting(
        True,
        f"{PIPESIM}: torch/nn/parallel/distributed.py DistributedDataParallel "
        "(gradient_as_bucket_view=False copies gradients into its flat buckets)",
    )
    deallocate_outputs: ClassVar[Setting] = Setting(
        False,
        f"{PIPESIM}: torch/distributed/pipelining/stage.py forward_one_chunk keeps "
        "fwd_cache[mb] = (outputs, inputs) until the backward",
    )
    wgrad_fusion: ClassVar[Setting] = Setting(False, PIPESIM)
    te_workspace: ClassVar[Setting] = Setting(False, PIPESIM)
    fsdp: ClassVar[Setting] = Setting(
        FsdpSpec(accumulate_with_pp=True),
        "torch 2.13 fully_shard defaults (torch/distributed/fsdp/_fully_shard/_fully_shard.py: "
        "reshard_after_forward True for non-root modules, MixedPrecisionPolicy() keeps the "
        "training dtype); torch pipelining accumulates unsharded gradients across micro-batches "
        "(torch/distributed/pipelining/stage.py::backward_maybe_with_nosync)",
    )
    low_precision_library: ClassVar[Setting] = Setting(
        "transformer_engine",
        "assumption: FP8/FP4 linear layers as Transformer Engine runs them (pipesim's torch "
        "replay runs none)",
    )

    SETTINGS: ClassVar[tuple[str, ...]] = (
        "schedules",
        "dp_bucket_bytes",
        "tied_embedding",
        "tied_after_dp",
        "tp_grad_allreduce",
        "placement",
        "fewer_microbatches",
        "blocking_p2p",
        "sync_after_p2p",
        "sync_before_forward",
        "step_barrier",
        "distributed_optimizer",
        "step_extra_bytes",
        "reduce_extra_bytes",
        "main_grad_step_bytes",
        "grad_buffer_passes",
        "sp_input_regather",
        "step_transient",
        "overflow_check_ops",
        "microbatch_load",
        "main_grads_fp32",
        "bucket_copy",
        "deallocate_outputs",
        "wgrad_fusion",
        "te_workspace",
        "fsdp",
        "low_precision_library",
    )

    def settings(self) -> dict[str, Setting]:
        """Every setting by name, in :data:`SETTINGS` order."""
        return {k: getattr(self, k) for k in self.SETTINGS}

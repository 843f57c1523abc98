"""Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed): Megatron's GPT on DeepSpeed's pipeline engine.

With pipeline parallelism on (the default: ``--no-pipeline-parallel`` unset),
``megatron/training.py::train_step`` hands the step to DeepSpeed's ``PipelineEngine``
(:mod:`sim.framework.deepspeed`: TrainSchedule 1F1B for any ``m``, blocking paired sends, at
``t > 1`` partitioned exchanges that block the host, the last stage's read of the loss before
each backward, the data-parallel all-reduce after the backward, a loss broadcast after the step). ``GPTModelPipe`` splits the transformer layers evenly
(``type:transformer``), keeps the word embedding on the first and the last stage
(``TiedLayerSpec('embed')``), and all-reduces its gradient between the two before the
data-parallel reduction (``ReduceTiedGrads`` before ``ReduceGrads``).

vTrain's measured iterations (``measurements/vtrain/``) were all collected this way.
"""

from __future__ import annotations

from typing import ClassVar

from sim.framework.base import Setting
from sim.framework.deepspeed import (
    BLOCKING_P2P,
    DP_AFTER_BACKWARD,
    FEWER_MICROBATCHES,
    NO_ZERO,
    OVERFLOW_CHECK_OPS,
    PIPE,
    REDUCE_EXTRA_BYTES,
    STEP_BARRIER,
    STEP_EXTRA_BYTES,
    STEP_TRANSIENT,
    SYNC_AFTER_P2P,
    SYNC_BEFORE_FORWARD,
    PipelineEngine,
)

GPT_PIPE = "Megatron-DeepSpeed megatron/model/gpt_model.py::GPTModelPipe"
MICROBATCH_LOAD = Setting(
    (34, 6, 2, 3, 1, 40.0),
    f"{PIPE}/schedule.py::TrainSchedule.steps (LoadMicroBatch before each ForwardPass on the "
    f"first and the last stage) -> {PIPE}/engine.py::_exec_load_micro_batch -> _next_batch -> "
    "batch_fn = Megatron-DeepSpeed pretrain_gpt.py::get_batch_pipe, per micro-batch: "
    "megatron/core/tensor_parallel/data.py::broadcast_data (megatron/mpu/data.py before 2023): "
    "torch.cuda.LongTensor(sizes) (a blocking copy), broadcast of the 5 int64 sizes over the "
    "tensor-parallel group, sizes_cuda.cpu() (a blocking copy that waits for it), 10 CPU tensor "
    "ops unpacking a 2-D size (while sizes_cpu[offset + i] > 0), contiguous, view, torch.cat, "
    ".cuda() (a blocking copy from pageable memory: CUDA runtime API docs, 'API "
    "synchronization behavior'), broadcast of the tokens, narrow, view: 20 ops, 3 copies; "
    "then .long(), two slices and two .contiguous() (5), megatron/utils.py::"
    "get_ltor_masks_and_position_ids: ones, tril, view, ones, arange, unsqueeze, expand_as, "
    "< 0.5 (8), fp32_to_fp16 of the loss mask (1): 34 ops; _exec_load_micro_batch: clone and "
    "detach of the 3 inputs on the first stage (6), detach of the 2 labels on the last (2). "
    "Assumption: the DataLoader's next() (worker-prefetched) costs the host nothing",
)


class MegatronDeepSpeed(PipelineEngine):
    """Megatron-DeepSpeed's GPT on DeepSpeed's pipeline engine (module doc): ``GPTModelPipe``
    runs on a grid whose model-parallel size is Megatron's tensor-parallel size
    (``PipeModelDataParallelTopology(num_pp, num_mp=tensor_model_parallel_world_size,
    num_dp)``, Megatron-DeepSpeed ``megatron/model/gpt_model.py``), so the engine's exchanges
    are partitioned over it (:class:`~sim.framework.deepspeed.PipelineEngine`)."""

    name: ClassVar[str] = "megatron-deepspeed"
    description: ClassVar[str] = (
        "Megatron-DeepSpeed: GPTModelPipe on DeepSpeed's PipelineEngine (1F1B any m, blocking "
        "p2p, host syncs at each exchange with t > 1 and at the loss read before each last-stage "
        "backward, tied embedding all-reduce, DP all-reduce after backward)"
    )
    schedules = Setting(
        frozenset({"1f1b"}),
        "Megatron-DeepSpeed megatron/training.py::train_step (args.deepspeed and "
        f"ds_pipeline_enabled -> model[0].train_batch) -> {PIPE}/engine.py TrainSchedule",
    )
    dp_bucket_bytes = DP_AFTER_BACKWARD
    fsdp = Setting(
        None,
        "DeepSpeed shards states by ZeRO-3 over the data-parallel group (memory_policy zero3)",
    )
    tied_embedding = Setting(
        True,
        f"{GPT_PIPE} (TiedLayerSpec('embed', EmbeddingPipe, tied_weight_attr="
        f"'word_embeddings_weight') first and last) -> {PIPE}/engine.py::_exec_reduce_tied_grads",
    )
    tied_after_dp = Setting(
        False, f"{PIPE}/schedule.py::TrainSchedule.steps: ReduceTiedGrads before ReduceGrads"
    )
    placement = Setting(
        "megatron",
        f"{GPT_PIPE} (partition_method='type:transformer' unless --pp-partition-method) -> "
        f"{PIPE}/module.py::_partition_layers",
    )
    fewer_microbatches = FEWER_MICROBATCHES
    blocking_p2p = BLOCKING_P2P
    sync_before_forward = SYNC_BEFORE_FORWARD
    step_barrier = STEP_BARRIER
    distributed_optimizer = NO_ZERO
    step_extra_bytes = STEP_EXTRA_BYTES
    reduce_extra_bytes = REDUCE_EXTRA_BYTES
    step_transient = STEP_TRANSIENT
    overflow_check_ops = OVERFLOW_CHECK_OPS
    microbatch_load = MICROBATCH_LOAD
    sync_after_p2p = SYNC_AFTER_P2P

"""Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed): Megatron's GPT on DeepSpeed's pipeline engine.

With pipeline parallelism on (the default: ``--no-pipeline-parallel`` unset),
``megatron/training.py::train_step`` hands the step to DeepSpeed's ``PipelineEngine``
(:mod:`sim.framework.deepspeed`: TrainSchedule 1F1B for any ``m``, blocking paired sends, at
``t > 1`` partitioned exchanges that block the host, the last stage's read of the loss before
each backward, the data-parallel all-reduce after the backward, a loss broadcast after the step). ``GPTModelPipe`` splits the transformer layers evenly
(``type:transformer``), keeps the word embedding on the first and the last stage
(``TiedLayerSpec('embed')``), and all-reduces its gradient between the two before the
data-parallel reduction (``ReduceTiedGrads`` before ``ReduceGrads``). With ``p > 1`` the last
stage's copy is a whole ``EmbeddingPipe``, whose unused position embedding is in its memory and
its data-parallel all-reduce (:data:`TIED_POSITIONS`, :mod:`sim.framework.tied_positions`).

Each transformer layer's forward, first or recomputed, makes the host wait for the device once
before its MLP: two scalars built on the GPU with blocking copies (:data:`LAYER_SYNC`,
:func:`with_layer_syncs`), each a round trip the host and the drained device wait out
(:data:`LAYER_SYNC_READS`).

Where the tied word embedding's two ends sit on one stage (``p = 1``), autograd sums its two
gradients (the lookup's and the output projection's) every micro-batch before accumulating them
(:data:`TIED_GRAD_SUM`, :func:`with_tied_grad_sum`).

vTrain's measured iterations (``measurements/vtrain/``) were all collected this way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from sim.compute.decoder_shape import base_kind
from sim.compute.kernels import mem, phase_time
from sim.compute.megatron_ops import BLOCK_FWD, param_tensors
from sim.engine.stage_cost import StageCost
from sim.framework.base import Setting
from sim.framework.deepspeed import (
    PIPE,
    PipelineEngine,
)
from sim.framework.deepspeed_bf16 import with_hp_grad_update
from sim.framework.tied_embedding import tied_embedding_bytes
from sim.framework.tied_positions import with_tied_positions
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.shard import model_shape
from sim.schedules.base import Schedule
from sim.trace.schema import LayerProfile, Trace

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


SCALARS = "torch.tensor(0.0) for moe_loss and mlp_bias on the GPU (two ops each)"
""":data:`~sim.compute.megatron_ops.BLOCK_FWD`'s entry for the two scalars of
:data:`LAYER_SYNC`."""


def _ops_before(entry: str) -> float:
    """Share of a block's counted forward ops (:data:`~sim.compute.megatron_ops.BLOCK_FWD`, in
    issue order) issued before ``entry``.

    Example:
        >>> round(_ops_before(SCALARS), 4)  # 44 of 63
        0.6984
    """
    names = [name for name, _ in BLOCK_FWD]
    before = sum(n for _, n in BLOCK_FWD[: names.index(entry)])
    return before / sum(n for _, n in BLOCK_FWD)


LAYER_SYNC = Setting(
    _ops_before(SCALARS),
    "Megatron-DeepSpeed megatron/model/transformer.py::ParallelTransformerLayer.forward "
    "(l.1319-1320 @4822c87e, 2023-09-25; there since 50b32515, 2022-06-07, and at f4157bea, "
    "2024-12-24), before the MLP: moe_loss = torch.tensor(0.0, device=layernorm_output.device, "
    "dtype=...) and mlp_bias = torch.tensor(0.0, ...), on dense layers too. "
    "torch/csrc/utils/tensor_new.cpp::internal_new_from_data builds the scalar on the CPU and "
    "moves it with tensor.to(device, non_blocking=False); aten/src/ATen/native/cuda/Copy.cu::"
    "copy_kernel_cuda runs a blocking host-to-device copy as at::cuda::memcpy_and_sync "
    "(cudaMemcpyAsync, then cudaStreamSynchronize). So the host waits for the device in every "
    "forward of a block, first or recomputed (the second copy finds it idle). The value is the "
    "share of the block's forward before the wait: 44 of its 63 counted ops "
    "(sim.compute.megatron_ops.BLOCK_FWD, in issue order), which the engine also applies to the "
    "layer's device seconds (an assumption: the attention half holds 0.5-0.6 of them; 0.55 "
    "moves vTrain's MAPE by 0.01 point). The copies' own latency is LAYER_SYNC_READS. The "
    "wait also drains the attention's tensor-parallel collective (ATTENTION_DRAIN)",
)

LAYER_SYNC_READS = Setting(
    2,
    "Megatron-DeepSpeed megatron/model/transformer.py::ParallelTransformerLayer.forward "
    "(l.1319-1320 @4822c87e): moe_loss and mlp_bias are two torch.tensor(0.0, device=...) "
    "calls, each one blocking host-to-device copy (tensor_new.cpp::internal_new_from_data -> "
    ".to(device, non_blocking=False) -> Copy.cu::copy_kernel_cuda -> at::cuda::"
    "memcpy_and_sync: cudaMemcpyAsync, then cudaStreamSynchronize). The first waits for the "
    "device (LAYER_SYNC); then each copy runs on the drained stream and the host waits for "
    "it, so both the host and the device spend a copy's round trip on it, twice per block "
    "forward, first or recomputed. Each is charged as every blocking copy of a few bytes in "
    "this model (MICROBATCH_LOAD's, the loss read's): the preset's host_overhead.read. "
    "Published figure for one copy's cost: 'a cudaMemcpy can incur in a 6-7us overhead' "
    "(NVIDIA/gdrcopy@9347e62 README.md, 'What is inside'); dgx-a100-40gb's read is 10 us",
)

ATTENTION_DRAIN = Setting(
    0.5,
    "Megatron-DeepSpeed@4822c87e megatron/model/transformer.py::ParallelTransformerLayer."
    "forward: self.self_attention (l.1242-1243) ends with ParallelAttention.forward's "
    "self.dense (l.851), a RowParallelLinear whose forward all-reduces its output "
    "(megatron/core/tensor_parallel/layers.py l.786 reduce_from_tensor_model_parallel_region "
    "-> mappings.py::_reduce l.22 torch.distributed.all_reduce, blocking: ProcessGroupNCCL "
    "makes the current stream wait for NCCL's); the bias-dropout-add (l.1270-1274) consumes "
    "it, and only then the scalars' blocking copies (l.1319-1320, LAYER_SYNC) synchronize the "
    "stream. So the host's wait there includes the attention's all-reduce (a reduce-scatter "
    "with sequence parallelism, after its all-gather). The value is the share of a block's "
    "forward collectives issued before the MLP: the attention's half "
    "(sim.parallel.megatron.block_comm: the attention's, then the MLP's, as many each)",
)


def with_layer_syncs(
    cost: StageCost, kinds: list[str], share: float, drain: float = 0.0, reads: float = 0.0
) -> StageCost:
    """``cost`` (a stage of layers of ``kinds``, in order) with a host sync at ``share`` of
    each block's forward (:data:`LAYER_SYNC`), kept with any the layer already has
    (:attr:`StageCost.fwd_syncs`, sorted), which waits for the first ``drain`` share of the
    block's forward collectives (:data:`ATTENTION_DRAIN`, :attr:`StageCost.fwd_sync_drains`;
    a block with another sync before this one: none) and makes ``reads`` blocking copies
    (:data:`LAYER_SYNC_READS`, :attr:`StageCost.fwd_sync_reads`; the layer's other syncs
    keep none); other kinds unchanged. Unchanged without per-layer forwards
    (:attr:`StageCost.fwd_layers` empty: no layer to cut).

    Example:
        >>> ar = (("allreduce", 8.0),) * 2
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 10.0, 1.0, 0.0, 0.0),) * 3,
        ...               tp_fwd_layers=((ar[0],), ar, ()), fwd_syncs=((), (0.25,), ()))
        >>> d = with_layer_syncs(c, ["embedding", "block", "head"], 0.5, 0.5, 2)
        >>> d.fwd_syncs, d.fwd_sync_drains, d.fwd_sync_reads
        (((), (0.25, 0.5), ()), (0, 0, 0), ((), (0.0, 2.0), ()))
    """
    if not cost.fwd_layers:
        return cost
    blocks = [base_kind(k) == "block" for k in kinds[: len(cost.fwd_layers)]]
    syncs = tuple(
        tuple(sorted({*cost.sync_share(i), share})) if b else cost.sync_share(i)
        for i, b in enumerate(blocks)
    )
    drains = tuple(
        int(drain * len(cost.tp_fwd_layers[i]))
        if b and i < len(cost.tp_fwd_layers) and syncs[i][0] == share
        else 0
        for i, b in enumerate(blocks)
    )
    copies = tuple(
        tuple(float(reads) if x == share else 0.0 for x in syncs[i]) if b else ()
        for i, b in enumerate(blocks)
    )
    return replace(cost, fwd_syncs=syncs, fwd_sync_drains=drains, fwd_sync_reads=copies)


TIED_GRAD_SUM = Setting(
    3.0,
    "Megatron-DeepSpeed megatron/model/gpt_model.py::GPTModelPipe (@4822c87e): at p = 1 the "
    "TiedLayerSpec('embed') is one EmbeddingPipe whose word_embeddings.weight both the lookup "
    "(the first layer) and the head (_logits_helper -> language_model.py::parallel_lm_logits l.36-42 -> "
    "linear_with_grad_accumulation_and_async_allreduce) use, in "
    "one autograd graph per micro-batch (neither is checkpointed: PipelineModule."
    "_is_checkpointable keeps only ParallelTransformerLayerPipe). The weight's AccumulateGrad "
    "node has two incoming gradients, the output projection's weight gradient (its wgrad GEMM "
    "returns a fresh tensor: megatron/core/tensor_parallel/layers.py l.352-361, "
    "gradient_accumulation_fusion commented out) and the embedding's dense backward, and "
    "PyTorch's autograd engine sums them in the node's InputBuffer before calling it "
    "(torch/csrc/autograd/input_buffer.cpp::accumulate, torch 2.0.1: old_var.add_(var) or "
    "old_var + var with grad mode off): reads two [V/t, h] gradients and writes one, 3 bytes "
    "per byte of the weight, every micro-batch, at the end of the backward (after the "
    "lookup's gradient). With p > 1 each stage's copy has one gradient (ReduceTiedGrads "
    "all-reduces them after the backward). The accumulation into .grad after the first "
    "micro-batch (AccumulateGrad's in-place add, every parameter) is not modelled",
)


def with_tied_grad_sum(cost: StageCost, kinds: list[str], add_s: float) -> StageCost:
    """``cost`` (a stage of layers of ``kinds``, in order) with ``add_s`` seconds of device work
    in the backward of its ``embedding`` layer when the stage also holds the ``head``: the sum
    of the tied word embedding's two gradients (:data:`TIED_GRAD_SUM`); unchanged otherwise.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, bwd_layers=((0.5, 8.0, 0.0), (1.5, 20.0, 0.0)))
        >>> d = with_tied_grad_sum(c, ["embedding", "head"], 0.25)
        >>> d.bwd_s, d.bwd_layers[0][0]
        (2.25, 0.75)
        >>> with_tied_grad_sum(c, ["embedding", "block"], 0.25) is c
        True
    """
    bases = [base_kind(k) for k in kinds]
    if "embedding" not in bases or "head" not in bases:
        return cost
    i = bases.index("embedding")
    layers = list(cost.bwd_layers)
    if i < len(layers):
        sec, ops, nodes = layers[i]
        layers[i] = (sec + add_s, ops, nodes)
    return replace(
        cost,
        bwd_s=cost.bwd_s + add_s,
        bwd_weight_s=None if cost.bwd_weight_s is None else cost.bwd_weight_s + add_s,
        bwd_layers=tuple(layers),
    )


def tied_grad_sum_s(trace: Trace, t: int, spec: ComputeSpec, bytes_per_byte: float) -> float:
    """Seconds on ``spec`` of the sum of the tied embedding's two gradients: one memory-bound
    kernel of ``bytes_per_byte x`` one of ``t`` ranks' ``V/t x h`` weight
    (:func:`~sim.framework.tied_embedding.tied_embedding_bytes`: the padding of the vocabulary to a
    multiple of ``128 t`` is not modelled); 0 without a model shape."""
    if model_shape(trace) is None:
        return 0.0
    nbytes = bytes_per_byte * tied_embedding_bytes(trace, t)
    return phase_time([mem("tied_grad_sum", nbytes)], spec, trace.dtype).total_s


ACCUMULATE_GRAD = Setting(
    3.0,
    "deepspeed/runtime/fp16/fused_optimizer.py::FP16_Optimizer.step (v0.9.3 l.260-266, v0.10.3 "
    "l.245-251, v0.13.2 l.244-250) flattens each fp16 gradient to fp32 and sets p.grad = None, "
    "so after a step every parameter's .grad is None: the iteration's first micro-batch's "
    "AccumulateGrad takes the new gradient as .grad, and each later one adds into it in place "
    "(torch 2.0.1 torch/csrc/autograd/functions/accumulate_grad.h::accumulateGrad, grad mode "
    "off: variable_grad += new_grad, one add_ kernel per parameter tensor reading both 16-bit "
    "gradients and writing one: 3 bytes per parameter byte). Megatron-DeepSpeed's weight "
    "gradients are fresh tensors (megatron/core/tensor_parallel/layers.py l.352-361 "
    "@4822c87e: gradient_accumulation_fusion commented out), so nothing fuses the add. "
    "Charged per layer on every backward after an iteration's first (StageCost.bwd_accumulate), "
    "one kernel per parameter tensor (sim.compute.megatron_ops.PARAM_TENSORS); the tied "
    "embedding counted once on a stage holding both its ends",
)


def accumulate_seconds(
    layers: tuple[LayerProfile, ...], kinds: list[str], spec: ComputeSpec, dtype: str,
    bytes_per_byte: float, shared_bytes: float = 0.0,
) -> tuple[float, ...]:  # fmt: skip
    """Per layer of a stage (``layers`` of ``kinds``, one tensor rank's), the seconds on ``spec``
    of adding its new weight gradients into ``.grad`` (:data:`ACCUMULATE_GRAD`): one
    memory-bound kernel per parameter tensor, ``bytes_per_byte x`` the layer's parameter bytes
    in all, less ``shared_bytes`` for a ``head`` whose output weight is the embedding's
    (counted there). A layer without parameters: 0. The layers are the sharded trace's,
    before :meth:`MegatronDeepSpeed.tie`: without the last stage's position embedding, whose
    gradient no backward accumulates.

    Example (a block of 12 tensors, 1 MB of parameters, on a GPU of 10 us per kernel and
    1 GB/s: 12 x 10 us + 3 MB / 1 GB/s = 3.12 ms):
        >>> from sim.hardware.gpu_compute import ComputeSpec
        >>> g = ComputeSpec("x", 1e12, 1e12, 1e9, 100, 0.8, 0.6, hbm_efficiency=1.0,
        ...                 kernel_overhead_s=1e-5)
        >>> x = LayerProfile("block.0", 1.0, 2.0, 1e6, 0.0, 0.0)
        >>> round(accumulate_seconds((x,), ["block"], g, "fp16", 3.0)[0], 6)
        0.00312
    """
    out = []
    for layer, kind in zip(layers, kinds, strict=False):
        base = base_kind(kind)
        nbytes = layer.param_bytes - (shared_bytes if base == "head" else 0.0)
        if nbytes <= 0:
            out.append(0.0)
            continue
        vectors, matrices = param_tensors(base, holds_output_weight=shared_bytes == 0.0)
        n = max(1, vectors + matrices)
        kernels = [mem("grad_accumulate", bytes_per_byte * nbytes)]
        kernels += [mem("grad_accumulate", 0.0)] * (n - 1)
        out.append(phase_time(kernels, spec, dtype).total_s)
    return tuple(out)


TIED_POSITIONS = Setting(
    True,
    f"{GPT_PIPE}: the last stage's TiedLayerSpec('embed', EmbeddingPipe, ...) is a whole "
    f"EmbeddingPipe (DeepSpeed {PIPE}/module.py::_build: layer.build()), whose position "
    "embedding no backward reaches; runtime/engine.py::_get_gradients_for_reduction "
    "zero-fills its .grad and all-reduces it (sim.framework.tied_positions)",
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
        "p2p, host syncs at each exchange with t > 1, at the loss read before each last-stage "
        "backward and before each layer's MLP, tied embedding all-reduce, DP all-reduce after "
        "backward)"
    )
    schedules = Setting(
        frozenset({"1f1b"}),
        "Megatron-DeepSpeed megatron/training.py::train_step (args.deepspeed and "
        f"ds_pipeline_enabled -> model[0].train_batch) -> {PIPE}/engine.py TrainSchedule",
    )
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
    microbatch_load = MICROBATCH_LOAD
    layer_sync = LAYER_SYNC
    layer_sync_reads = LAYER_SYNC_READS
    attention_drain = ATTENTION_DRAIN
    tied_grad_sum = TIED_GRAD_SUM
    accumulate_grad = ACCUMULATE_GRAD
    tied_positions = TIED_POSITIONS
    SETTINGS: ClassVar[tuple[str, ...]] = (
        *PipelineEngine.SETTINGS, "layer_sync", "layer_sync_reads", "attention_drain",
        "tied_grad_sum", "accumulate_grad", "tied_positions",
    )  # fmt: skip

    def stage_device_work(
        self, cost: StageCost, kinds: list[str], layers: tuple[LayerProfile, ...],
        trace: Trace, tensor_parallel: int, spec: ComputeSpec,
    ) -> StageCost:  # fmt: skip
        """``cost`` with the sum of the tied embedding's two gradients where the stage holds
        both its ends (:func:`with_tied_grad_sum`, :func:`tied_grad_sum_s`) and, with fp16,
        each layer's accumulation into ``.grad`` after an iteration's first micro-batch
        (:func:`accumulate_seconds`); with bf16 the ``BF16_Optimizer`` clears ``.grad``
        before every backward and accumulates in fp32 after it instead
        (:func:`~sim.framework.deepspeed_bf16.with_hp_grad_update`, the tied embedding's
        weight once)."""
        tied = tied_grad_sum_s(trace, tensor_parallel, spec, self.tied_grad_sum.value)
        cost = with_tied_grad_sum(cost, kinds, tied)
        both = {"embedding", "head"} <= {base_kind(k) for k in kinds}
        shared = tied_embedding_bytes(trace, tensor_parallel) if both else 0.0
        if trace.dtype == "bf16":
            params = sum(x.param_bytes for x in layers) - shared
            return with_hp_grad_update(cost, params, spec)
        return replace(
            cost,
            bwd_accumulate=accumulate_seconds(
                layers, kinds, spec, trace.dtype, self.accumulate_grad.value, shared
            ),
        )

    def tie(self, trace: Trace, schedule: Schedule, tensor_parallel: int = 1) -> Trace:
        """``trace`` (one tensor rank's) with the word embedding stored once where both its
        ends sit on one rank (:meth:`Framework.tie`), else with the last stage's second
        ``EmbeddingPipe``'s position embedding in its head (:data:`TIED_POSITIONS`)."""
        last = schedule.num_stages - 1
        if not self.ties(trace) or schedule.stage_rank(0) == schedule.stage_rank(last):
            return super().tie(trace, schedule, tensor_parallel)
        return with_tied_positions(trace) if self.tied_positions.value else trace

    def host_captured(self, cost: StageCost, kinds: list[str]) -> StageCost:
        """``cost`` with each transformer layer's host sync before its MLP
        (:data:`LAYER_SYNC`, :func:`with_layer_syncs`) and its two blocking copies
        (:data:`LAYER_SYNC_READS`); nothing is captured (eager)."""
        return with_layer_syncs(
            cost, kinds, self.layer_sync.value, self.attention_drain.value,
            self.layer_sync_reads.value,
        )  # fmt: skip

"""DeepSpeed's pipeline engine (microsoft/DeepSpeed ``deepspeed/runtime/pipe/``).

``PipelineEngine.train_batch`` runs :class:`TrainSchedule` (1F1B, any number of micro-batches):
blocking NCCL sends and receives paired in the schedule's order, the data-parallel all-reduce
after the last backward (``ReduceGrads``), the optimizer step, then a loss broadcast over the
pipeline. A ``PipelineModule`` is split by parameter counts unless told otherwise, and ties only
the layers declared as ``TiedLayerSpec``.

No device synchronize before a forward: the throughput timer's ``start()`` synchronizes only
once its ``global_step_count`` has reached ``start_step`` (2), and only ``DeepSpeedEngine.step``
calls its ``stop()``, which counts the steps; the pipeline engine steps through
``_take_model_step`` instead, so the count stays 0 (:data:`SYNC_BEFORE_FORWARD`).

With tensor parallelism (``grid.model_parallel_size > 1``) the engine partitions what it sends
between stages over the tensor-parallel group, and each exchange blocks the host
(:data:`PARTITIONED_EXCHANGES`, :func:`with_partitioned_exchanges`).

On the last stage every micro-batch's backward starts with ``DeepSpeedEngine.backward``, which
reads the loss back to the host (``loss.mean().item()``), so the host waits for the forward and
its loss before it issues the backward (:data:`LOSS_READ`).

With bf16 weights the engine runs the ``BF16_Optimizer`` (:mod:`sim.framework.deepspeed_bf16`):
fp32 gradients beside the bf16 ones, an fp32 accumulation after every backward, the
data-parallel all-reduce cast to bf16, optimizer state and update partitioned over the
replicas and the parameters all-gathered after the step; fp16 runs ``FP16_Optimizer`` (the
settings below).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from sim.config import MemoryConfig
from sim.engine.inputs import PipelineRuntime
from sim.engine.stage_cost import StageCost
from sim.framework.base import Framework, Setting
from sim.framework.deepspeed_bf16 import (
    HP_GRAD_BYTES,
    NORM_OPS,
    OWN_BUCKET,
    bf16_plan,
    with_hp_grad_update,
)
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.topology import Topology
from sim.memory.framework_memory import FrameworkMemory
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes
from sim.parallel.finalize_grads import main_grad_bytes
from sim.trace.schema import LayerProfile, Trace, dtype_bytes

PIPE = "deepspeed/runtime/pipe"
SCHEDULES = Setting(
    frozenset({"1f1b"}),
    f"{PIPE}/engine.py::train_batch runs schedule.TrainSchedule (1F1B) only",
)
DP_AFTER_BACKWARD = Setting(
    0.0,
    f"{PIPE}/schedule.py::TrainSchedule.steps (ReduceGrads at the last step) and "
    f"{PIPE}/engine.py::_exec_reduce_grads -> runtime/engine.py::allreduce_gradients"
    "(bucket_size=MEMORY_OPT_ALLREDUCE_SIZE, 5e8 elements: SERIAL_BUCKET), after the "
    "backward; PipelineEngine.__init__ sets enable_backward_allreduce = False",
)
SERIAL_BUCKET = Setting(
    5e8,
    "elements per bucket of the all-reduce after the backward: microsoft/DeepSpeed@f5dde36 "
    "deepspeed/runtime/engine.py l.100 MEMORY_OPT_ALLREDUCE_SIZE = 500000000; "
    f"{PIPE}/engine.py::_exec_reduce_grads (l.251) -> allreduce_gradients(bucket_size="
    "MEMORY_OPT_ALLREDUCE_SIZE) (l.1794) -> buffered_allreduce_fallback(elements_per_buffer) "
    "(l.2314) -> _reduce_non_expert_gradients (l.2286) -> allreduce_no_retain (l.2245-2256): "
    "gradient tensors appended in named_parameters order until numel > numel_per_bucket, then "
    "allreduce_and_copy (flatten, dist.all_reduce, copy back) before the next bucket is "
    "filled: buckets one after another. Assumption: tensor boundaries ignored "
    "(sim.engine.buckets.serial_bucket_bytes)",
)
FLAT_BUCKETS = Setting(
    True,
    "memory of the all-reduce after the backward (fp16 and fp32; microsoft/DeepSpeed@f5dde36): "
    "runtime/engine.py::allreduce_bucket (l.2215-2238) flattens each bucket of "
    "allreduce_no_retain (l.2245-2256: tensors until numel > numel_per_bucket) into a new "
    "tensor (self.flatten = csrc/utils/flatten_unflatten.cpp::flatten -> torch::utils::"
    "flatten_dense_tensors, a cat), all-reduces and scales it in place (no cast: "
    "communication_data_type is fp16 with fp16, l.783-794), and allreduce_and_copy "
    "(l.2240-2243) copies it back through unflatten's views and drops it before the next "
    "bucket: one bucket at a time, none kept, at any width (pipeline_enable_backward_allreduce "
    f"= True, {PIPE}/engine.py l.67); no copy of the whole gradient "
    "(FrameworkMemory.reduce_bucket_bytes, sim.memory.flat_reduce)",
)
FEWER_MICROBATCHES = Setting(
    True,
    f"{PIPE}/schedule.py::TrainSchedule.steps: 2(m + p - 1) steps, ids outside 0..m-1 skipped "
    "(_valid_micro_batch), so any m runs",
)
BLOCKING_P2P = Setting(
    True,
    f"{PIPE}/p2p.py::send/recv (dist.send/dist.recv, 'blocking and must be paired': "
    f"{PIPE}/schedule.py SendActivation/RecvGrad docstrings), issued at each step in "
    "TrainSchedule's order",
)
SYNC_BEFORE_FORWARD = Setting(
    False,
    f"{PIPE}/engine.py::_exec_forward_pass calls self.tput_timer.start(); "
    "deepspeed/utils/timer.py::ThroughputTimer.start synchronizes only when "
    "global_step_count >= start_step (2), and global_step_count is counted by "
    "ThroughputTimer.stop, which only runtime/engine.py::DeepSpeedEngine.step calls: "
    f"{PIPE}/engine.py::_exec_optimizer_step steps through _take_model_step and never calls "
    "stop(), so the count stays 0 and no forward synchronizes (microsoft/DeepSpeed@f5dde36, "
    "2023-06-02; the same at its 2022-06 and 2024-06 commits)",
)
STEP_BARRIER = Setting(
    "after_update",
    f"{PIPE}/engine.py::train_batch -> _aggregate_total_loss: dist.broadcast of the loss from "
    "the last stage over the pipe-parallel group after the schedule's OptimizerStep",
)
STEP_EXTRA_BYTES = Setting(
    42.0,
    "deepspeed/runtime/fp16/fused_optimizer.py::FP16_Optimizer.step, per parameter: "
    "has_overflow (runtime/utils.py::CheckOverflow._has_inf_or_nan, x.float().sum(): 2+4+4 B), "
    "fp32 gradients (p.grad.to(fp32), _flatten_dense_tensors: 2+4+4+4 B), get_grad_norm (4 B), "
    "unscale_and_clip_grads mul_ (4+4 B), FusedAdam reading 4-byte gradients (+2 B), "
    "p.data.copy_ of the fp32 master to fp16 (4+2 B, 2 already in the fused step): "
    "10 + 14 + 4 + 8 + 2 + 4 = 42 B",
)
REDUCE_EXTRA_BYTES = Setting(
    (8.0, 4.0),
    "deepspeed/runtime/engine.py::allreduce_bucket / allreduce_and_copy (from "
    f"{PIPE}/engine.py::_exec_reduce_grads at every width), per 2-byte gradient: "
    "self.flatten(bucket) (2+2 B) and buf.copy_(synced) back (2+2 B) always; "
    "tensor.mul_(1 / dp_world_size) after the all-reduce (2+2 B) when w > 1",
)
STEP_TRANSIENT = Setting(
    4.0,
    "deepspeed/runtime/fp16/fused_optimizer.py::FP16_Optimizer.step: "
    "_flatten_dense_tensors([p.grad.to(fp32) ...]) holds the per-parameter fp32 copies and "
    "the flat fp32 buffer at once (4 + 4 B per 2-byte gradient); the flat one lives until "
    "after optimizer.step()",
)
OVERFLOW_CHECK_OPS = Setting(
    2,
    "deepspeed/runtime/fp16/fused_optimizer.py::FP16_Optimizer.step -> overflow_checker."
    "has_overflow(fp16_params) -> runtime/utils.py::CheckOverflow.has_overflow_serial: for each "
    "parameter's gradient, _has_inf_or_nan: cpu_sum = float(x.float().sum()), two ops and a "
    "blocking read per tensor, tensor after tensor",
)
PARTITIONED_EXCHANGES = Setting(
    True,
    f"{PIPE}/engine.py (microsoft/DeepSpeed@f5dde36): is_pipe_partitioned = "
    "is_grad_partitioned = grid.model_parallel_size > 1. _exec_forward_pass on a stage "
    "after the first rebuilds its input with runtime/utils.py::PartitionedTensor.from_meta, "
    "whose meta.tolist() reads the received meta tensor back to the host (a blocking copy "
    "that waits for the receive); on a stage before the last it partitions its output, and "
    "PartitionedTensor.to_meta builds torch.LongTensor(meta).to(device), a blocking copy "
    "from pageable memory that first synchronizes the stream (waits for the forward). "
    "_exec_backward_pass reads the stored output meta and the received gradient meta with "
    "from_meta (.tolist()) before the backward; _exec_send_grads partitions the input "
    "gradient with to_meta after it. So the host waits for the device at every exchange, "
    "before the action that consumes a receive and after the one that produces a send",
)


def with_partitioned_exchanges(rt: PipelineRuntime, tensor_parallel: int) -> PipelineRuntime:
    """``rt`` as DeepSpeed's pipeline engine runs it over ``tensor_parallel`` ranks: with
    ``t > 1`` its partitioned exchanges block the host at every exchange
    (:data:`PARTITIONED_EXCHANGES`), which is the engine's ``sync_after_p2p``: before an
    action the host waits until the device has run the previous one, its sends are done
    and the action's input has arrived (:mod:`sim.engine.exchanges`); ``t = 1``: unchanged.

    Example:
        >>> with_partitioned_exchanges(PipelineRuntime(), 2).sync_after_p2p
        True
        >>> with_partitioned_exchanges(PipelineRuntime(), 1).sync_after_p2p
        False
    """
    if tensor_parallel < 2 or not PARTITIONED_EXCHANGES.value:
        return rt
    return replace(rt, sync_after_p2p=True)


LOSS_READ = Setting(
    1,
    f"{PIPE}/engine.py::_exec_backward_pass on the last stage calls "
    "runtime/engine.py::DeepSpeedEngine.backward(self.loss) for every micro-batch, which "
    "(microsoft/DeepSpeed@f5dde36, l.1845-1848) runs self.losses.append(loss.mean().item()) "
    "unless is_gradient_accumulation_boundary(); the pipeline engine's override returns "
    "_force_grad_boundary, True only inside _exec_reduce_grads and _exec_optimizer_step "
    f"({PIPE}/engine.py l.560-569, 1111-1113), so every backward reads it. In the releases "
    "v0.9.3 (2023-06-02, #3428) to v0.13.2 (2024-02-10): from v0.10.1 (#4030) as "
    "self.losses += loss.mean().item() at every backward, until v0.13.3 (#5135: 'item() "
    "causes device/host synchronization') keeps the mean on the device; v0.9.2 reads it only "
    "with a monitor on. vTrain's runs fall in that window (its docker/Dockerfile pins torch "
    "2.0.1, released 2023-05-24; arXiv 2312.12391 submitted 2023-11-27). One read: the host "
    "waits for the device (the forward and its loss), then the .item() op and its copy "
    "(PipelineRuntime.loss_reads; the mean's op is issued before the wait)",
)


def with_loss_read(rt: PipelineRuntime) -> PipelineRuntime:
    """``rt`` with DeepSpeed's read of the loss before each backward of the last stage
    (:data:`LOSS_READ`): the engine's ``loss_reads``, which blocks the host after each
    forward of the last stage (:meth:`sim.engine.actions.ActionRuns._read_loss`); the same point in
    1F1B, where a last stage's backward follows its forward.

    Example:
        >>> with_loss_read(PipelineRuntime()).loss_reads
        1
    """
    return replace(rt, loss_reads=LOSS_READ.value)


SYNC_AFTER_P2P = Setting(
    False,
    "with t = 1 none; with t > 1 after every exchange, set by runtime(): "
    + PARTITIONED_EXCHANGES.source,
)
NO_ZERO = Setting(
    False,
    "deepspeed/runtime/zero/config.py: zero_optimization.stage defaults to 0 (set stage 1 in "
    "ds_config to shard optimizer state)",
)


class PipelineEngine(Framework):
    """What every profile on DeepSpeed's ``PipelineEngine`` shares: its runtime, with the
    partitioned exchanges at ``t > 1`` (:func:`with_partitioned_exchanges`) and the loss read
    before each backward of the last stage (:func:`with_loss_read`), and the settings of the
    engine itself (its schedule's exchanges, syncs and step, the DP all-reduce after the
    backward, no ZeRO unless configured), each with its source above."""

    dp_bucket_bytes = DP_AFTER_BACKWARD
    fewer_microbatches = FEWER_MICROBATCHES
    blocking_p2p = BLOCKING_P2P
    sync_before_forward = SYNC_BEFORE_FORWARD
    step_barrier = STEP_BARRIER
    distributed_optimizer = NO_ZERO
    step_extra_bytes = STEP_EXTRA_BYTES
    reduce_extra_bytes = REDUCE_EXTRA_BYTES
    step_transient = STEP_TRANSIENT
    overflow_check_ops = OVERFLOW_CHECK_OPS
    sync_after_p2p = SYNC_AFTER_P2P
    serial_bucket = SERIAL_BUCKET
    flat_buckets = FLAT_BUCKETS
    SETTINGS: ClassVar[tuple[str, ...]] = (*Framework.SETTINGS, "serial_bucket", "flat_buckets")

    def runtime(
        self,
        topo: Topology,
        trace: Trace,
        tensor_parallel: int = 1,
        virtual_stages: int = 1,
        memory: FrameworkMemory | None = None,
    ) -> PipelineRuntime:
        """The pipeline engine (:meth:`Framework.runtime`), with its partitioned exchanges at
        ``t > 1`` (:func:`with_partitioned_exchanges`), its loss read
        (:func:`with_loss_read`) and its all-reduce after the backward in buckets of
        :data:`SERIAL_BUCKET` gradient elements (``dp_serial_bucket_bytes``: 2 bytes each for
        16-bit gradients, 4 for fp32 ones)."""
        rt = super().runtime(topo, trace, tensor_parallel, virtual_stages, memory)
        fp32 = memory is not None and memory.main_grads_fp32
        grad = main_grad_bytes(trace.dtype, fp32)  # bytes per gradient element
        rt = replace(rt, dp_serial_bucket_bytes=self.serial_bucket.value * grad)
        if memory is not None and memory.hp_grad_bytes > 0:  # BF16_Optimizer
            rt = replace(rt, dp_serial_bucket_bytes=0.0, overflow_check_ops=NORM_OPS.value)
        return with_loss_read(with_partitioned_exchanges(rt, tensor_parallel))

    def memory(
        self, dtype: str, gpu_model: str, options: MemoryConfig | None = None, fsdp: bool = False
    ) -> FrameworkMemory:
        """Its memory layout (:meth:`Framework.memory`; ``fsdp`` as there), with bf16 weights the
        ``BF16_Optimizer``'s fp32 gradient buffer beside the bf16 gradients
        (:data:`~sim.framework.deepspeed_bf16.HP_GRAD_BYTES`: 2 + 4 bytes of gradients per
        parameter), which is its own reduction bucket (no copy of the gradients into buckets:
        :data:`~sim.framework.deepspeed_bf16.OWN_BUCKET`); else the all-reduce's flat buckets
        of :data:`SERIAL_BUCKET` gradient elements, one at a time, freed after the copy back,
        instead of DDP's copy of the whole gradient (:data:`FLAT_BUCKETS`,
        :mod:`sim.memory.flat_reduce`).

        Example:
            >>> [DeepSpeed().memory(d, "A100").state(d, "adam").grad for d in ("bf16", "fp16")]
            [6, 2]
            >>> [DeepSpeed().memory(d, "A100").reduce_bucket_bytes for d in ("bf16", "fp16")]
            [0.0, 1000000000.0]
        """
        out = super().memory(dtype, gpu_model, options, fsdp)
        if dtype != "bf16" or out.main_grads_fp32:
            grad = main_grad_bytes(dtype, out.main_grads_fp32)  # bytes per gradient element
            bucket = self.serial_bucket.value * grad if self.flat_buckets.value else 0.0
            return replace(out, reduce_bucket_bytes=bucket)
        out = replace(out, hp_grad_bytes=HP_GRAD_BYTES.value, bucket_copy=not OWN_BUCKET.value)
        return replace(out, step_transient=self.step_transient_per_byte(dtype, out))

    def step_transient_per_byte(self, dtype: str, memory: FrameworkMemory | None) -> float:
        """:data:`STEP_TRANSIENT` as :meth:`Framework.step_transient_per_byte` says, none
        through the ``BF16_Optimizer`` (``memory``'s ``hp_grad_bytes``: its fp32 gradient
        buffer is kept, a model state, :mod:`sim.framework.deepspeed_bf16`)."""
        if memory is not None and memory.hp_grad_bytes > 0:
            return 0.0
        return super().step_transient_per_byte(dtype, memory)

    def plans(
        self, plans: list[StagePlan], dp_width: int, state: StateBytes,
        memory: FrameworkMemory | None = None,
    ) -> list[StagePlan]:  # fmt: skip
        """The memory plans as the engine's optimizer steps: with bf16 weights (``memory``'s
        ``hp_grad_bytes``) the ``BF16_Optimizer``'s (:func:`~sim.framework.deepspeed_bf16.
        bf16_plan`), else ``FP16_Optimizer``'s (:meth:`Framework.plans`)."""
        if memory is None or memory.hp_grad_bytes <= 0:
            return super().plans(plans, dp_width, state, memory)
        done: dict[int, StagePlan] = {}  # a plan shared by many stage replicas, once
        for p in plans:
            if id(p) not in done:
                done[id(p)] = bf16_plan(p, dp_width, state)
        return [done[id(p)] for p in plans]

    def stage_device_work(
        self, cost: StageCost, kinds: list[str], layers: tuple[LayerProfile, ...],
        trace: Trace, tensor_parallel: int, spec: ComputeSpec,
    ) -> StageCost:  # fmt: skip
        """``cost`` with, for bf16 weights, the ``BF16_Optimizer``'s fp32 accumulation after
        every backward over the stage's parameters (:func:`~sim.framework.deepspeed_bf16.
        with_hp_grad_update`); unchanged for fp16."""
        if trace.dtype != "bf16":
            return cost
        return with_hp_grad_update(cost, sum(x.param_bytes for x in layers), spec)

    def tied_grad_scale(self, trace: Trace, memory: FrameworkMemory | None) -> float:
        """Gradient bytes its tied all-reduce moves per byte of a tied parameter of ``trace``
        (:meth:`Framework.tied_grad_scale`): ``_exec_reduce_tied_grads`` all-reduces
        ``weight._hp_grad`` with bf16, else ``weight.grad`` (microsoft/DeepSpeed@f5dde36
        ``deepspeed/runtime/pipe/engine.py`` l.237-240). bf16 weights without ZeRO run the
        ``BF16_Optimizer`` (``runtime/engine.py`` l.839-843: fp32 gradient accumulation,
        l.1144-1145), whose ``_hp_grad`` is the fp32 gradient (``runtime/bf16_optimizer.py``
        l.124, l.280-285; the only writer of ``_hp_grad`` at that commit): 2 for bf16, 1 for
        fp16 and fp32 (the parameters' own ``.grad``).

        Example:
            >>> [DeepSpeed().tied_grad_scale(Trace("t", (), 1, d, "x"), None) for d in ("bf16", "fp16")]
            [2.0, 1.0]
        """
        return main_grad_bytes(trace.dtype, trace.dtype == "bf16") / dtype_bytes(trace.dtype)


class DeepSpeed(PipelineEngine):
    """DeepSpeed ``PipelineEngine`` around a generic ``PipelineModule`` (module doc)."""

    name: ClassVar[str] = "deepspeed"
    description: ClassVar[str] = (
        "DeepSpeed PipelineEngine: TrainSchedule 1F1B, blocking p2p, host syncs at each exchange "
        "with t > 1 and at the loss read before each last-stage backward, DP all-reduce after the "
        "backward, layers split by parameter count"
    )
    schedules = SCHEDULES
    fsdp = Setting(
        None,
        "deepspeed/runtime/zero/stage3.py: DeepSpeed shards states by ZeRO-3 over the "
        "data-parallel group (memory_policy zero3), not by a dp_shard dimension",
    )
    tied_embedding = Setting(
        False,
        f"{PIPE}/module.py::PipelineModule: only TiedLayerSpec layers are tied "
        "(_exec_reduce_tied_grads all-reduces them); a module of LayerSpecs ties none",
    )
    placement = Setting(
        "parameters",
        f"{PIPE}/module.py::PipelineModule(partition_method='parameters') default -> "
        "_partition_layers -> runtime/utils.py::partition_balanced over parameter counts",
    )

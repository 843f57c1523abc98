"""The :class:`Framework` interface: what a training framework does around the model.

A framework profile is one class per framework (``sim/framework/<name>.py``) registered in
:mod:`sim.framework.registry`; the experiment names one with ``framework:``. Each setting is a
:class:`Setting`: its value and the SOURCE that says so (file and function in the framework's
repository). The core asks the profile, never its name:

* :meth:`Framework.schedule_reason`: which pipeline schedules it runs, and with ``m < p``;
* :meth:`Framework.boundaries`: how ``options.partition: uniform`` places layers (embedding and
  head placement, :mod:`sim.framework.placement`);
* :meth:`Framework.runtime`: its pipeline engine around the actions
  (:class:`~sim.engine.inputs.PipelineRuntime`: blocking exchanges, host sync points, the tied
  embedding all-reduce, the step barrier) and :attr:`Framework.dp_bucket_bytes` (gradient
  bucketing and overlap);
* :meth:`Framework.plans`: the distributed optimizer (sharded optimizer state,
  reduce-scatter / all-gather instead of an all-reduce);
* :meth:`Framework.memory`: how it lays out a rank's memory around the model
  (:class:`~sim.memory.framework_memory.FrameworkMemory`: gradient-buffer dtype, DDP's bucket
  copy, stage outputs, Transformer Engine's weight-gradient buffers and workspace, the loss).

The default profile, ``pipesim``, is what ``sim validate`` replays (torch pipelining, DDP-style
25 MiB buckets overlapped with the backward), so results without ``framework:`` do not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from sim.config import MemoryConfig
from sim.engine.inputs import MicrobatchLoad, PipelineRuntime
from sim.engine.stage_cost import StageCost
from sim.framework.options import Option, resolve_options, spec
from sim.framework.placement import PLACEMENTS
from sim.framework.settings import FrameworkSettings, Setting
from sim.framework.step_work import StepWork, shard_optimizer, step_time_s, with_step_work
from sim.framework.tied_embedding import share_head_weight, tied_embedding_bytes
from sim.hardware.capacity import is_sm90_or_later
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.topology import Topology
from sim.memory.allocator import AllocatorConfig
from sim.memory.framework_memory import (
    TE_GROUPED_GEMM_STREAMS,
    TE_WORKSPACE_BYTES,
    FrameworkMemory,
)
from sim.memory.fsdp import FsdpSpec
from sim.memory.layer_work import WorkOptions
from sim.memory.plan import StagePlan
from sim.memory.precision_aware import adam_state_bytes
from sim.memory.states import StateBytes
from sim.parallel.finalize_grads import main_grad_bytes
from sim.parallel.layout import ParallelLayout
from sim.parallel.tp_overlap import Implementation
from sim.schedules.base import Schedule
from sim.trace.schema import LayerProfile, Trace, dtype_bytes


class Framework(FrameworkSettings):
    """A training framework's behaviour around the model (module doc), built on its settings
    (:class:`~sim.framework.settings.FrameworkSettings`: each a :class:`Setting` with its
    source)."""

    name: ClassVar[str]
    description: ClassVar[str]

    OPTIONS: ClassVar[tuple[Option, ...]] = ()
    """What the framework's users choose (:mod:`sim.framework.options`), each with its source;
    the profile's behaviour reads them with :meth:`opt`."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        """The profile with ``options`` (names to values or their text) over the defaults.

        Raises:
            ValueError: an unknown option, a bad value, or options that do not go together
                (:meth:`check_options`).
        """
        self.values = resolve_options(self.name, self.OPTIONS, options or {})
        self.check_options()

    def check_options(self) -> None:
        """Raise :class:`ValueError` when the options do not go together (the framework
        refuses them); nothing by default."""

    def opt(self, name: str) -> Any:
        """The value of option ``name``."""
        return self.values[name]

    @property
    def spec(self) -> str:
        """The profile's canonical spec string: its name, then its options that differ from
        their defaults (:func:`sim.framework.options.spec`)."""
        return spec(self.name, self.OPTIONS, self.values)

    def schedule_reason(self, cls: type[Schedule]) -> str:
        """Why this framework does not run schedule ``cls``, or ``""``."""
        allowed = self.schedules.value
        if allowed is not None and cls.name not in allowed:
            return f"framework {self.name} runs only {', '.join(sorted(allowed))}, not {cls.name}"
        return ""

    def runs_fewer_microbatches(self, cls: type[Schedule]) -> bool:
        """Whether it runs ``cls`` with fewer micro-batches than stages (``m < p``)."""
        return cls.accepts_fewer_microbatches(self.fewer_microbatches.value)

    def make_schedule(
        self, cls: type[Schedule], stages: int, microbatches: int, v: int | None = None
    ) -> Schedule:
        """``cls(stages, microbatches, v)`` as this framework runs it (``m < p`` where it does).

        Raises:
            ScheduleError: the combination is not accepted.
        """
        if microbatches < stages and self.runs_fewer_microbatches(cls) and cls.needs_m_ge_p:
            return cls(stages, microbatches, v, fewer_microbatches=True)
        return cls(stages, microbatches, v)

    def boundaries(self, trace: Trace, stages: int) -> tuple[int, ...]:
        """Stage start-layer indices of ``partition: uniform`` over ``stages`` stages.

        Raises:
            InputError: more stages than layers (than transformer blocks for ``megatron``).
        """
        return PLACEMENTS[self.placement.value](trace, stages)

    def bucket_bytes(self, trace: Trace, replicas: int = 1) -> float:
        """Data-parallel gradient bucket bytes for ``trace`` (as one tensor rank runs it) over
        ``replicas`` data- and context-parallel ranks: :attr:`dp_bucket_bytes`, or a size that
        depends on the model or the width where a profile says so."""
        return float(self.dp_bucket_bytes.value)

    def tp_overlap(self, tensor_parallel: int, sequence_parallel: bool) -> Implementation | None:
        """How it overlaps tensor-parallel collectives with their GEMMs
        (:mod:`sim.parallel.tp_overlap`), or None: after the compute, exposed (the default).

        Raises:
            ValueError: an option asks for an overlap this layout cannot run."""
        return None

    def host_captured(self, cost: StageCost, kinds: list[str]) -> StageCost:
        """A stage's ``cost`` (its layers of ``kinds``) with the framework's per-layer host work
        as it runs: what its CUDA graphs capture removed (:mod:`sim.framework.cuda_graphs`), and
        what a profile adds per layer (Megatron-LM's Python and deterministic fills,
        Megatron-DeepSpeed's sync before each MLP); unchanged by default (eager)."""
        return cost

    def stage_device_work(
        self, cost: StageCost, kinds: list[str], layers: tuple[LayerProfile, ...],
        trace: Trace, tensor_parallel: int, spec: ComputeSpec,
    ) -> StageCost:  # fmt: skip
        """A stage's ``cost`` (its ``layers`` of ``kinds``, from the ``trace`` one of
        ``tensor_parallel`` ranks runs) with the device work a profile adds on ``spec``
        beyond the layers' kernels (Megatron-DeepSpeed: the sum of the tied embedding's two
        gradients, the accumulation into ``.grad``); unchanged by default."""
        return cost

    def combines_pairs(self) -> bool:
        """Whether it runs a backward and the next forward as one overlapped pair (Megatron's
        combined 1F1B, :mod:`sim.schedules.combined`); False by default."""
        return False

    def tie(self, trace: Trace, schedule: Schedule, tensor_parallel: int = 1) -> Trace:
        """``trace`` (as one tensor rank runs it) with the word embedding stored once where
        both its ends sit on one rank (``p = 1``, or a V-shaped schedule): the head's output
        projection then uses the embedding's own weight (Megatron-LM
        ``LanguageModule.shared_embedding_or_output_weight``; DeepSpeed builds a
        ``TiedLayerSpec`` once per stage), so the head's copy
        (:func:`~sim.framework.tied_embedding.tied_embedding_bytes`) is not in its parameters.
        Unchanged without a tied embedding."""
        last = schedule.num_stages - 1
        if not self.ties(trace) or schedule.stage_rank(0) != schedule.stage_rank(last):
            return trace
        return share_head_weight(trace, tensor_parallel)

    def memory(
        self, dtype: str, gpu_model: str, options: MemoryConfig | None = None, fsdp: bool = False
    ) -> FrameworkMemory:
        """How it lays out memory for ``dtype`` training on ``gpu_model``, with the
        experiment's ``memory:`` overrides (:class:`~sim.config.MemoryConfig`): fp32 main
        gradients for bf16 parameters unless ``grad_reduce_in_bf16`` (Megatron's
        ``validate_args`` sets ``accumulate_allreduce_grads_in_fp32`` for ``--bf16`` only),
        gradient-accumulation fusion as the profile or the experiment says, the loss, the
        allocator's options, and the precision-aware optimizer's dtypes
        (:mod:`sim.memory.precision_aware`: bf16 ``main_grads_dtype`` keeps 16-bit gradients),
        and its step's transient per gradient byte (:meth:`step_transient_per_byte`).
        ``fsdp``: the point runs FSDP (:meth:`runs_fsdp`), whose gradient dtype its FSDP
        says (:meth:`fsdp_main_grads_fp32`)."""
        opts = options or MemoryConfig()
        fp32_grads = (
            self.main_grads_fp32.value and dtype == "bf16" and not opts.grad_reduce_in_bf16
            and opts.main_grads_dtype == "fp32"
        )  # fmt: skip
        fp32_grads = self.fsdp_main_grads_fp32(dtype, fp32_grads) if fsdp else fp32_grads
        aware = opts.precision_aware_optimizer
        fusion = opts.gradient_accumulation_fusion
        fusion = self.wgrad_fusion.value if fusion is None else fusion
        workspace = 0.0
        if self.te_workspace.value:
            workspace = TE_WORKSPACE_BYTES[
                "hopper+" if is_sm90_or_later(gpu_model) else "pre-hopper"
            ]
            if opts.te_grouped_gemm:
                workspace *= 1 + TE_GROUPED_GEMM_STREAMS
        out = FrameworkMemory(
            main_grads_fp32=fp32_grads,
            bucket_copy=self.bucket_copy.value,
            deallocate_outputs=self.deallocate_outputs.value,
            dummy_wgrads=fusion and self.te_workspace.value,
            workspace_bytes=workspace,
            cublas_workspace_config=opts.cublas_workspace_config,
            work=WorkOptions(fusion, opts.defer_embedding_wgrad),
            allocator=AllocatorConfig(expandable_segments=opts.expandable_segments),
            adam_state_bytes=adam_state_bytes(
                dtype, opts.main_params_dtype, opts.exp_avg_dtype, opts.exp_avg_sq_dtype
            ) if aware else None,
            decoupled_grad=aware,
        )  # fmt: skip
        return replace(out, step_transient=self.step_transient_per_byte(dtype, out))

    def fsdp_main_grads_fp32(self, dtype: str, ddp: bool) -> bool:
        """Whether its FSDP keeps fp32 gradients of ``dtype`` parameters; by default as its
        data-parallel buffer does (``ddp``)."""
        return ddp

    def step_transient_per_byte(self, dtype: str, memory: FrameworkMemory | None) -> float:
        """GPU bytes its optimizer step allocates per gradient byte while it runs
        (:attr:`step_transient`, fp32 copies of 16-bit gradients), for ``dtype`` weights laid
        out as ``memory``: 0 with fp32 weights, with fp32 main gradients (the ``.float()``
        of a gradient is the gradient itself) and with the precision-aware optimizer's
        ``decoupled_grad`` (no copy). The one rule for the engine's runtime
        (:meth:`runtime`) and the memory model (``FrameworkMemory.step_transient``,
        :mod:`sim.memory.step_moment`)."""
        copies = _sixteen_bit_grads(dtype, memory)
        copies = copies and not (memory is not None and memory.decoupled_grad)
        return self.step_transient.value if copies else 0.0

    def ties(self, trace: Trace) -> bool:
        """Whether the framework keeps a copy of the word embedding in ``trace``'s head and
        all-reduces it (:attr:`tied_embedding`). A decoder model (``model_shape.kind ==
        "decoder"``) says itself whether it ties its embeddings: its trace declares the tie as a
        shared group (:mod:`sim.trace.shared`, placed and all-reduced like any other), and an
        untied one (Llama, DeepSeek, Mixtral: Megatron ``--untie-embeddings-and-output-weights``)
        has no all-reduce and keeps its output layer."""
        shape = (trace.provenance or {}).get("model_shape")
        decoder = isinstance(shape, dict) and shape.get("kind") == "decoder"
        return bool(self.tied_embedding.value) and not decoder

    def runtime(
        self,
        topo: Topology,
        trace: Trace,
        tensor_parallel: int = 1,
        virtual_stages: int = 1,
        memory: FrameworkMemory | None = None,
    ) -> PipelineRuntime:
        """Its pipeline engine as the engine runs it (:class:`PipelineRuntime`).

        ``trace`` is the trace as one of ``tensor_parallel`` ranks runs it (its model shape
        gives the tied embedding's gradient bytes,
        :func:`~sim.framework.tied_embedding.tied_embedding_bytes`); ``topo``
        is the server it runs on; ``virtual_stages``: stage chunks per rank (what an option
        may depend on); ``memory`` its memory layout: with fp32 main gradients the step's
        ``.float()`` of a gradient is the gradient itself, and the precision-aware optimizer's
        ``decoupled_grad`` makes no copy (no ``step_transient`` either way)."""
        tied, sixteen = self.ties(trace), _sixteen_bit_grads(trace.dtype, memory)
        return PipelineRuntime(
            blocking_p2p=self.blocking_p2p.value,
            sync_after_p2p=self.sync_after_p2p.value,
            sync_before_forward=self.sync_before_forward.value,
            tied_grad_bytes=(
                tied_embedding_bytes(trace, tensor_parallel) * self.tied_grad_scale(trace, memory)
                if tied
                else 0.0
            ),
            tied_after_dp=self.tied_after_dp.value,
            tp_grad_elem_bytes=self._tp_grad_elem_bytes(trace, tensor_parallel, memory),
            step_barrier=self.step_barrier.value,
            step_transient=self.step_transient_per_byte(trace.dtype, memory),
            overflow_check_ops=self.overflow_check_ops.value if sixteen else 0,
            microbatch_load=MicrobatchLoad(*self.microbatch_load.value),
        )

    def _tp_grad_elem_bytes(
        self, trace: Trace, tensor_parallel: int, memory: FrameworkMemory | None
    ) -> float:
        """Bytes per gradient element of the tensor-group all-reduce after the data-parallel
        reduction (``tp_grad_allreduce``, :mod:`sim.parallel.finalize_grads`): the gradient
        buffer's dtype, 4 with fp32 main gradients; 0 without it or with one tensor rank."""
        if not self.tp_grad_allreduce.value or tensor_parallel < 2:
            return 0.0
        return main_grad_bytes(trace.dtype, memory is not None and memory.main_grads_fp32)

    def tied_grad_scale(self, trace: Trace, memory: FrameworkMemory | None) -> float:
        """Gradient bytes all-reduced between stages per byte of a tied or shared parameter of
        ``trace`` (the word embedding kept on the first and the last or MTP stage:
        :func:`~sim.framework.tied_embedding.tied_embedding_bytes`,
        :func:`sim.trace.shared.place_shared`, both in the
        trace's dtype): the gradient's dtype over the parameter's, by the rule of the
        tensor-group all-reduce (:func:`sim.parallel.finalize_grads.main_grad_bytes`; 2 with
        fp32 main gradients of bf16 weights: Megatron-Core's ``_allreduce_embedding_grad``
        all-reduces the ``main_grad``, NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/
        distributed/finalize_model_grads.py`` l.250-258); 1 otherwise (DeepSpeed's pipeline
        engine says its own: :meth:`sim.framework.deepspeed.PipelineEngine.tied_grad_scale`)."""
        fp32 = memory is not None and memory.main_grads_fp32
        return main_grad_bytes(trace.dtype, fp32) / dtype_bytes(trace.dtype)

    def tied_grad_groups(
        self, groups: tuple[tuple[tuple[int, ...], float], ...], trace: Trace,
        memory: FrameworkMemory | None,
    ) -> tuple[tuple[tuple[int, ...], float], ...]:  # fmt: skip
        """``groups`` (``(stages, bytes)`` of :func:`sim.trace.shared.place_shared`, in the
        trace's dtype) with their all-reduces' bytes in the gradient's dtype
        (:meth:`tied_grad_scale`)."""
        scale = self.tied_grad_scale(trace, memory)
        return tuple((stages, nbytes * scale) for stages, nbytes in groups)

    def regathers_sp_input(self) -> bool:
        """Whether the backward gathers the column-parallel layers' saved inputs again
        (``sp_input_regather``; a profile may hide it behind an overlap option)."""
        return bool(self.sp_input_regather.value)

    def fsdp_spec(self, dtype: str) -> FsdpSpec | None:
        """How it runs FSDP for ``dtype`` training with its options (:attr:`fsdp`; a profile
        may adjust it)."""
        return self.fsdp.value

    def runs_fsdp(self, lay: ParallelLayout) -> bool:
        """Whether a point laid out as ``lay`` runs its data parallelism as FSDP
        (:mod:`sim.memory.fsdp`: per-unit collectives, the states as :attr:`fsdp` says)
        rather than as replicas that all-reduce gradient buckets: where it shards
        (``dp_shard > 1``); a profile may run FSDP's machinery without sharding too
        (torchtitan: :meth:`sim.framework.torchtitan.Torchtitan.runs_fsdp`)."""
        return lay.dp_shard > 1

    def step_work(self) -> StepWork:
        """What its step moves besides the fused update (:mod:`sim.framework.step_work`)."""
        return StepWork(
            self.step_extra_bytes.value,
            self.main_grad_step_bytes.value,
            self.reduce_extra_bytes.value,
            self.grad_buffer_passes.value,
        )

    def plans(
        self, plans: list[StagePlan], dp_width: int, state: StateBytes,
        memory: FrameworkMemory | None = None,
    ) -> list[StagePlan]:  # fmt: skip
        """The memory plans as the framework runs the step: its distributed optimizer (when
        it shards and a plan does not already: optimizer state and step ``1/w``, gradients
        reduce-scattered, parameters all-gathered, :attr:`StagePlan.dp_sharded`), and, for
        16-bit weights (``state``: bytes per parameter), its step's and its gradient
        reduction's extra memory passes on the GPU (:mod:`sim.framework.step_work`: on the
        shard of a sharded step too where the profile says how its code runs them).
        ``memory``: the layout ``state`` comes from (a profile may step its own way with it:
        :meth:`sim.framework.deepspeed.PipelineEngine.plans`); unused here."""
        work = self.step_work()
        whole = work.main_grad_extra_bytes is not None or any(work.grad_passes)
        always, with_dp = work.reduce_bytes
        extra = work.extra_bytes + always + (with_dp if dp_width > 1 else 0.0)
        shard = self.distributed_optimizer.value and dp_width >= 2
        done: dict[int, StagePlan] = {}  # a plan shared by many stage replicas, once

        def one(p: StagePlan) -> StagePlan:
            out = done.get(id(p))
            if out is None:
                out = p if whole else step_time_s(p, state, extra)
                if shard and not (out.dp_sharded or out.scatter_bytes or out.gather_bytes):
                    out = shard_optimizer(out, dp_width)
                if whole:
                    out = with_step_work(out, state, work, dp_width)
                done[id(p)] = out
            return out

        return [one(p) for p in plans]


def _sixteen_bit_grads(dtype: str, memory: FrameworkMemory | None) -> bool:
    """Whether ``dtype`` weights laid out as ``memory`` keep 16-bit gradients (not fp32
    weights, not fp32 main gradients): what the step's overflow check and its fp32 copies
    (:meth:`Framework.step_transient_per_byte`) act on."""
    return dtype_bytes(dtype) < 4 and not (memory is not None and memory.main_grads_fp32)


def describe(framework: Framework) -> list[tuple[str, str, str]]:
    """``(setting, value, source)`` rows for display: the settings, then the options (marked
    ``option``) with their values."""
    out = []
    for name, s in framework.settings().items():
        value = s.value
        if isinstance(value, frozenset):
            value = ", ".join(sorted(value))
        out.append((name, "all" if value is None else str(value), s.source))
    for o in framework.OPTIONS:
        out.append((f"option {o.name}", str(framework.opt(o.name)), f"{o.help} ({o.source})"))
    return out


__all__ = [
    "Framework",
    "Setting",
    "describe",
    "shard_optimizer",
]

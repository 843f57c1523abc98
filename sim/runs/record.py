"""A measured training run: the configuration it ran and what was measured on it.

:class:`MeasuredRun` is what every reader of :mod:`sim.runs` returns, whatever the input was
(a launch command, a config file, a training log, a functional-test JSON, a row of a measured
table): the model shape (:class:`ModelShape`), the parallel layout
(:class:`~sim.parallel.layout.ParallelLayout`), batch sizes, precision, recompute, schedule,
framework and GPU, the measured figures (:class:`Measured`, seconds and bytes), where each came
from, and how every input argument was read (:class:`ArgNote`). Whether pipesim can simulate
the run is decided later, by :func:`sim.runs.express.express`, from these fields.

Units: seconds and bytes, as everywhere inside pipesim; readers convert what the frameworks
print (milliseconds, MB = MiB, GiB) on the way in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from sim.parallel.layout import ParallelLayout

Status = Literal["mapped", "ignored", "approximated", "unmapped"]
"""How an input argument was read:

* ``mapped``: it sets a field of the run (the layout, the model, the batch...);
* ``ignored``: it does not change iteration time or memory (logging, checkpointing, data
  paths, learning-rate schedule, numerics), the reason says which;
* ``approximated``: it changes them a little and pipesim runs without it, the reason says how
  much;
* ``unmapped``: it changes them and pipesim cannot express it (yet): the run is not simulated,
  and ``sim import`` refuses it unless told to ``--ignore`` it.
"""


@dataclass(frozen=True)
class ArgNote:
    """How one input argument was read.

    Attributes:
        name: the argument as written (``--tensor-model-parallel-size``,
            ``parallelism.tensor_parallel_degree``, ``zero_optimization.stage``).
        value: its value as text.
        status: :data:`Status`.
        reason: what it maps to, or why it is ignored, approximated or not expressible.
    """

    name: str
    value: str
    status: Status
    reason: str


@dataclass(frozen=True)
class ModelShape:
    """The model a run trained, as the sizes its framework was given.

    Attributes:
        arch: ``decoder`` (Llama-like: rotary positions, gated MLP, RMSNorm, no biases),
            ``gpt`` (GPT-2/3-like: learned positions, GeLU MLP, LayerNorm, biases), ``bert``,
            ``t5``, ``hybrid`` (Mamba layers) or ``unknown``.
        layers, hidden, heads: sizes (None: not given).
        kv_heads: key/value heads (grouped-query attention; None: ``heads``).
        ffn_hidden: MLP width (None: the framework's default for the architecture).
        vocab: vocabulary as the model allocates it (after the framework's padding).
        head_dim: attention head width when it is not ``hidden / heads`` (None: it is).
        gated_mlp: SwiGLU-style MLP (three matrices) rather than GeLU (two).
        tied_embeddings: the output layer shares the input embedding's weights.
        moe_experts, moe_topk, moe_ffn_hidden, moe_shared_ffn: routed experts, experts per
            token, expert width and shared-expert width (None: a dense model).
        moe_dense_layers: leading dense layers of a MoE model; moe_every: every how many
            layers is MoE (1: all).
        moe_capacity_factor: tokens each expert keeps over its balanced share (token
            dropping; None: dropless); moe_pad_to_capacity: experts padded to it.
        mla: multi-head latent attention ranks (``q_lora_rank``, ``kv_lora_rank``,
            ``qk_head_dim``, ``qk_pos_emb_head_dim``, ``v_head_dim``), None without MLA.
        features: further architecture features named by the input that the trace generators
            may not have (``qk_norm``, ``mtp``, ``sliding_window``...), each ``name=value``.
        source: where the sizes came from (a flag list, a preset name, a config file).
    """

    arch: str = "unknown"
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    vocab: int | None = None
    head_dim: int | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = True
    moe_experts: int | None = None
    moe_topk: int | None = None
    moe_ffn_hidden: int | None = None
    moe_shared_ffn: int = 0
    moe_dense_layers: int = 0
    moe_every: int = 1
    moe_capacity_factor: float | None = None
    moe_pad_to_capacity: bool = False
    mla: tuple[tuple[str, int], ...] | None = None
    features: tuple[str, ...] = ()
    source: str = ""

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts."""
        return bool(self.moe_experts)


@dataclass(frozen=True)
class Measured:
    """What was measured on a run (None: not measured).

    Attributes:
        iteration_time_s: one optimizer step's wall time, after the warm-up rule
            (:mod:`sim.runs.warmup`), seconds.
        iteration_times_s: the logged series it came from (every logged step, warm-up
            included), seconds.
        time_rule: how ``iteration_time_s`` was taken from the series or the source.
        peak_allocated_bytes: the largest ``torch.cuda.max_memory_allocated`` (or the
            framework's equivalent) reported, bytes.
        peak_reserved_bytes: the largest reserved memory reported (caching allocator), bytes.
        memory_kind: what the peak is (which rank, which counter).
        tokens_per_s_per_gpu, tflops_per_gpu: throughput as the source reports it.
        mfu: model FLOPs utilisation as the source reports it (a fraction of 1).
        categories: per-category seconds where the log breaks the iteration down (Megatron's
            timers: ``forward-backward``, ``optimizer``...), as logged.
    """

    iteration_time_s: float | None = None
    iteration_times_s: tuple[float, ...] = ()
    time_rule: str = ""
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    memory_kind: str = ""
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    categories: tuple[tuple[str, float], ...] = ()

    @property
    def peak_rank(self) -> str:
        """Which GPU's peak was measured: ``last`` where the source says it is the logging
        rank's (Megatron-LM's ``training_log`` writes ``mem-max-allocated-bytes`` from the
        rank that owns the TensorBoard writer, the last one: ``megatron/training/
        global_vars.py`` ``_set_tensorboard_writer`` on ``rank == world_size - 1``,
        NVIDIA/Megatron-LM@d98e8a64dd), else ``max`` (the largest over the ranks)."""
        return "last" if "rank logging it" in self.memory_kind else "max"

    @property
    def peak_bytes(self) -> float | None:
        """The peak to compare with a prediction: allocated when measured, else reserved."""
        if self.peak_allocated_bytes is not None:
            return self.peak_allocated_bytes
        return self.peak_reserved_bytes


@dataclass(frozen=True)
class MeasuredRun:
    """One training run: its configuration and measurements (module doc).

    Attributes:
        name: a short name (file stem, case or row name).
        source: where it was read (``path``, ``path:line`` or ``path row N``).
        framework: ``megatron-lm``, ``megatron-bridge``, ``torchtitan``, ``deepspeed``,
            ``megatron-deepspeed`` or ``unknown``.
        gpu: the GPU as the source names it (``A100-SXM-80GB``, ``GB200``); num_gpus: the
            job's GPUs (None: not given, then ``layout.gpus``).
        layout: the parallel layout.
        microbatch_size, global_batch: samples per micro-batch and per optimizer step.
        seq_len: tokens per sample.
        precision: ``bf16``, ``fp16``, ``fp32``, or a low-precision recipe (``fp8-delayed``,
            ``fp8-current``, ``fp8-blockwise``, ``mxfp8``, ``nvfp4``...).
        param_gather: Megatron's ``--fp8-param-gather`` with a low-precision recipe
            (parameters kept and all-gathered quantized: ``training.precision_options``).
        precision_options: ``(field, value)`` of ``training.precision_options`` besides
            ``param_gather`` (:class:`~sim.config.PrecisionOptions`: the layers and linear
            layers a low-precision recipe keeps in 16 bits; :mod:`sim.runs.precision_flags`).
        recompute: ``none``, ``full`` (every layer), ``full:block:N`` (N layers per stage),
            ``selective`` (attention core) or ``selective:<modules>``.
        schedule: pipeline schedule (``1f1b``, ``interleaved_1f1b``, torchtitan's names).
        attention: the attention core: ``flash`` (a fused kernel) or ``math`` (unfused: the
            ``s x s`` scores in memory).
        distributed_optimizer: optimizer state sharded over the data-parallel ranks (ZeRO-1).
        zero_stage: DeepSpeed ZeRO stage (0 none; 3 also shards weights; FSDP2 is 3).
        offload: what ZeRO keeps in host memory (``optimizer``, ``optimizer+param``; "").
        task: ``pretrain``, ``sft``, ``lora``...
        shape: the model.
        measured: the measurements.
        args: how each input argument was read.
        notes: assumptions the reader made (a default it filled in, a vocabulary it assumed).
        framework_options: ``(option, value)`` of the framework profile the run's flags set
            (overlap, CUDA graphs, dispatcher: :mod:`sim.runs.megatron_overlap`).
        memory_options: ``(field, value)`` of the experiment's ``memory:`` section the run's
            flags set (:class:`~sim.config.MemoryConfig`: the precision-aware optimizer).
        pipeline_layout: Megatron's ``--pipeline-model-parallel-layout`` ("": none), the
            layers of every virtual stage (:mod:`sim.runs.pipeline_layout`).
        optimizer_instances: Megatron's ``--num-distributed-optimizer-instances`` (the
            distributed optimizer's state sharded inside each of them:
            :mod:`sim.memory.dist_opt`).
        activation_offload: share of the transformer layers' stash Megatron's
            ``--cpu-offloading`` keeps on the host (``N / L``; memory policy
            ``act_offload``, :mod:`sim.memory.act_offload`); 0: none.
        token_dispatcher: how routed tokens reach their experts: ``alltoall`` or
            ``allgather`` (Megatron's ``--moe-token-dispatcher-type allgather``; the point's
            routing ``+allgather``, :mod:`sim.parallel.expert`).
        optimizer: ``training.optimizer`` (``adam``, ``sgd``, ``sgd_momentum``): the state
            the optimizer keeps per parameter (:mod:`sim.memory.states`).
        hardware_overlay: a shipped hardware overlay of the machine the run was measured on
            (:func:`sim.hardware.overlay.bundled_overlay`: ``simumax-b200``), set over its
            GPU's preset; "": the preset alone.
    """

    name: str
    source: str
    framework: str = "unknown"
    gpu: str = ""
    num_gpus: int | None = None
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    microbatch_size: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    precision: str = "bf16"
    param_gather: bool = False
    precision_options: tuple[tuple[str, Any], ...] = ()
    recompute: str = "none"
    schedule: str = "1f1b"
    attention: str = "flash"
    distributed_optimizer: bool = False
    zero_stage: int = 0
    offload: str = ""
    task: str = "pretrain"
    shape: ModelShape = field(default_factory=ModelShape)
    measured: Measured = field(default_factory=Measured)
    args: tuple[ArgNote, ...] = ()
    notes: tuple[str, ...] = ()
    framework_options: tuple[tuple[str, str], ...] = ()
    memory_options: tuple[tuple[str, Any], ...] = ()
    pipeline_layout: str = ""
    optimizer_instances: int = 1
    activation_offload: float = 0.0
    token_dispatcher: str = "alltoall"
    optimizer: str = "adam"
    hardware_overlay: str = ""

    def with_measured(self, measured: Measured) -> MeasuredRun:
        """This run with other measurements (a log's figures on an argument list's run)."""
        return replace(self, measured=measured)

    @property
    def microbatches(self) -> int | None:
        """Micro-batches per step per pipeline, ``B / (b x dp)`` (None when not whole)."""
        b, g, dp = self.microbatch_size, self.global_batch, self.layout.dp
        if not b or not g or g % (b * dp):
            return None
        return g // (b * dp)

    def unmapped(self) -> list[ArgNote]:
        """The arguments that change the answer and could not be expressed."""
        return [a for a in self.args if a.status == "unmapped"]

    def row(self) -> dict[str, Any]:
        """A flat record (one row of ``sim compare``'s and ``sim import``'s CSV): the
        configuration in the column names of ``../shared/data/measured/`` (``tp``, ``pp``,
        ``gbs``...) and the measurements in seconds and bytes."""
        lay, m, s = self.layout, self.measured, self.shape
        out: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "framework": self.framework,
            "gpu": self.gpu,
            "num_gpus": self.num_gpus or lay.gpus,
            "tp": lay.tp,
            "pp": lay.pp,
            "vp": lay.vp,
            "cp": lay.cp,
            "ep": lay.ep,
            "etp": lay.etp,
            "dp": lay.dp,
            "sp": lay.sp,
            "mbs": self.microbatch_size,
            "gbs": self.global_batch,
            "seq_len": self.seq_len,
            "precision": self.precision,
            "recompute": self.recompute,
            "schedule": self.schedule,
            "distributed_optimizer": self.distributed_optimizer,
            "zero_stage": self.zero_stage,
        }
        out |= {f"model_{f.name}": getattr(s, f.name) for f in fields(s) if f.name != "source"}
        out |= {k: v for k, v in asdict(m).items() if k not in ("iteration_times_s", "categories")}
        out["categories"] = ";".join(f"{k}={v:.6g}" for k, v in m.categories)
        return out


def feature(s: ModelShape, name: str) -> str | None:
    """The value of a ``name=value`` entry of ``s.features`` (None: absent)."""
    return next((f.split("=", 1)[1] for f in s.features if f.startswith(name + "=")), None)


def finite_positive(x: float | None) -> bool:
    """Whether ``x`` is a finite number above 0."""
    return x is not None and math.isfinite(x) and x > 0

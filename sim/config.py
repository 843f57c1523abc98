"""Experiment configuration: pydantic models of an experiment YAML (unknown keys are errors).

An experiment names the hardware (a preset or an inline description), one or more models (each
a trace), the training settings, and a sweep grid. Every axis of the grid may be a single value
or a list; a point of the grid is one :class:`PointConfig`, which is what the engine simulates and
what ``winner.yaml`` stores.

Example (``experiments/dgx1.yaml``)::

    name: dgx1
    hardware: dgx1-v100-16gb
    models:
      - {name: gnmt16, trace: gnmt16, global_batch: 256, microbatch_size: [16, 32, 64]}
    training: {dtype: fp16, optimizer: adam}
    sweep: {schedule: [gpipe, 1f1b], stages: [2, 4, 8], dp_width: [1, 2], microbatch_size: [1, 2]}
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticCustomError

from sim.errors import InputError
from sim.textio import read_yaml_file

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$"
"""Experiment and model names become folder names under results/: letters, digits and
``. _ + -``, not starting with a dot (so never ``..`` or a path)."""
_NAME_HELP = " Letters, digits and . _ + - only (it names a folder), not starting with a dot."

# Limits on what one run asks for. Each bounds a cost the code pays, as measured on the shared
# 2-core development machine (figures vary with its load; they set orders of magnitude).

MAX_MICROBATCHES = 4096
"""Most micro-batches per iteration simulated. An assumption bounding one point's run time: the
schedule's program and the engine's events grow linearly in ``m`` (GNMT-16 under 1F1B, p = 8,
w = 1, on DGX-1: 15,400 spans and 29,700 memory events at m = 256 simulated in 0.4 CPU
seconds, 61,500 and 119,000 at m = 1024 in 1.5 s; measured for issue 17), so a point at this
limit takes about 6 s and a grid of them minutes."""
MAX_GPUS = 16_384
"""Most GPUs a hardware description may have (``servers x num_gpus``). It bounds the cost of
holding the cluster, not of simulating it: a configuration's run grows with ``p x m x v`` once
its replicas are simulated once (:mod:`sim.engine.symmetry`), but loading builds a Python
object per GPU, host and link (2,048 DGX H100 servers: about 16k GPUs, 4k sockets, 100k
directed links) and checks in ``O(links)`` that every GPU reaches every other
(:func:`sim.hardware.build.topology_from_spec`); ``benchmarks/speed/bench_scale.py`` measures load
and simulation from 8 to 16,384 GPUs. 16,384 covers the largest published pipeline-parallel
runs the simulator is compared with (Llama 3 405B on 16,384 H100s, Dubey et al. 2024
arXiv:2407.21783 §3.3) and peers' scale (SimAI 9,216; Charon over 10,000)."""
MIRROR_ABOVE_GPUS = 64
"""Above this many GPUs in a job, ``options.simulation: auto`` simulates one data-parallel
replica's tensor rank 0 (:mod:`sim.engine.symmetry`); up to it, every GPU (the full
simulation the shipped experiments, the golden engine logs and the measured validations were
made with: 64 GPUs is the largest of them, ``8x-dgx-h100``). Not lowered for speed: of the 329
16-GPU points ``benchmarks/speed/bench_planner.py`` simulates, 56 can be mirrored, 13 of them with
another iteration time or peak (12 under ``zero3``, by up to 3.4 %), and mirroring saves 7 %
of their simulation time (measured for issue 17)."""
MAX_GRID = 100_000
"""Most grid combinations (all models, before invalid ones are skipped) expanded. An assumption
bounding a sweep's set-up: expanding costs a few microseconds per combination and bounding
about 0.1 ms per valid point (``benchmarks/speed/bench_planner.py``: 11,520 combinations expanded to
3,696 points in 0.04 CPU seconds, bounded in 0.3 s; measured for issue 17), and each valid
point may be simulated; the shipped experiments have 2 to 1,134 (``dgx1.yaml``: 270)."""
MAX_ITERATIONS = 100
"""Most optimizer steps a user may ask for (``training.iterations``; ``sim schedule`` and
``sim validate``'s iterations and warm-up). Left at 0, the engine simulates what its steady
state needs (:func:`sim.metrics.iterations_needed`: 2 for a flushed schedule, ``2 ceil(f/m) + 2``
for an asynchronous one, ``f`` the forwards before stage 0's first backward), which this limit
does not cap."""

IntList = int | list[int]
StrList = str | list[str]


def as_list(value: Any) -> list:
    """``3`` -> ``[3]``; lists unchanged."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


class _Strict(BaseModel):
    """What a user writes: unknown keys are errors, and values are not coerced (``true`` is
    not the number 1, ``"4"`` not 4, ``2.5`` not 2: pydantic's strict mode)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _no_empty_list(value: Any) -> Any:
    """A sweep axis or a model's own axis given as ``[]`` is an error naming the key (an empty
    axis would leave the grid without a configuration, and the message without its cause)."""
    if isinstance(value, list) and not value:
        raise PydanticCustomError(
            "empty_list", "an empty list: give at least one value (or leave the key out)"
        )
    return value


class ModelConfig(_Strict):
    """One model to train: a trace and optional per-model overrides of the sweep."""

    _axes_not_empty = field_validator("*", mode="before")(_no_empty_list)

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Model name used in results (e.g. 'gpt2-1.5b')." + _NAME_HELP,
    )
    trace: str = Field(
        description="Trace reference: a name in traces/ (e.g. 'gnmt16'), a path to a native "
        "trace (.csv/.yaml) or a PipeDream graph.txt, relative to the experiment file."
    )
    global_batch: int | None = Field(
        None, gt=0, description="Samples per optimizer step for this model (overrides training)."
    )
    microbatch_size: IntList | None = Field(
        None, description="Samples per micro-batch for this model (overrides sweep)."
    )
    stages: IntList | None = Field(
        None, description="Pipeline depth(s) p for this model (overrides sweep.stages)."
    )
    tensor_parallel: IntList | None = Field(
        None,
        description="Tensor-parallel size(s) t for this model (overrides sweep.tensor_parallel).",
    )
    dp_width: IntList | None = Field(
        None,
        description="Data-parallel width(s) w for this model (overrides sweep.dp_width and "
        "sweep.gpus): with stages and tensor_parallel it pins the GPU count a model runs on, "
        "e.g. one published configuration per model (experiments/megatron-scaling.yaml).",
    )
    schedule: StrList | None = Field(
        None,
        description="Schedule name(s) for this model (overrides sweep.schedule), e.g. the "
        "schedule a published run of this model used.",
    )
    virtual_stages: IntList | None = Field(
        None,
        description="Stage chunks per rank v for this model (overrides sweep.virtual_stages; "
        "same rules).",
    )

    @field_validator("microbatch_size", "stages", "tensor_parallel", "dp_width", "virtual_stages")
    @classmethod
    def _positive(cls, v: IntList | None) -> IntList | None:
        for x in as_list(v) if v is not None else []:
            if x < 1:
                raise ValueError(f"must be >= 1, got {x}")
        return v

    routing: str = Field(
        "balanced",
        description="How a MoE model's router spreads tokens over experts "
        "(sim.compute.routing): 'balanced', 'imbalance:A' (the busiest expert gets A times "
        "its share) or 'histogram:N0,N1,...' (tokens per expert, e.g. measured).",
    )


class PrecisionOptions(_Strict):
    """How a low-precision recipe is run (Megatron-LM's options; sim.compute.precision)."""

    first_last_layers_bf16: bool = Field(
        False,
        description="Megatron's --first-last-layers-bf16: keep the first and last transformer "
        "blocks in 16 bits (not with fp8-delayed).",
    )
    num_layers_at_start_in_bf16: int = Field(
        1, ge=0, description="Megatron's --num-layers-at-start-in-bf16 (with the option above)."
    )
    num_layers_at_end_in_bf16: int = Field(
        1, ge=0, description="Megatron's --num-layers-at-end-in-bf16 (with the option above)."
    )
    mtp_bf16: bool = Field(
        False,
        description="Megatron-Bridge's keep_mtp_spec_in_bf16: the MTP depths' linear layers in "
        "16 bits.",
    )
    bf16_linears: list[str] = Field(
        default_factory=list,
        description="Linear layers kept in 16 bits in every layer, by pipesim's GEMM names "
        "(qkv, proj, in_proj, out_proj, shared_up, latent_down, ...), as a Transformer Engine "
        "quantization-recipe config's matchers keep modules in bf16.",
    )
    fp8_attention: bool = Field(
        False,
        description="Megatron's --fp8-dot-product-attention (Transformer Engine's fp8_dpa): the "
        "attention core in FP8 too (MXFP8 with the MXFP8 and NVFP4 recipes); its kernels run at "
        "their measured FP8 speed where pipesim has one (sim.compute.swa_speed), else as 16-bit.",
    )
    fp8_output_proj: bool = Field(
        False,
        description="Megatron-Core's fp8_output_proj (from megatron-core at NVIDIA/Megatron-LM"
        "@d0b3b775, Megatron-Bridge v0.5.0): the output layer's GEMMs in MXFP8 too (TE's "
        "TELMHeadColumnParallelLinear under the MXFP8 autocast); only with the mxfp8 recipe.",
    )
    param_gather: bool = Field(
        False,
        description="Megatron's --fp8-param-gather: parameters kept quantized and all-gathered "
        "by the distributed optimizer in their format (1 byte per FP8 parameter instead of 2); "
        "needs the distributed optimizer (memory_policy dist_opt or a framework that shards).",
    )


class TrainingConfig(_Strict):
    """Training settings shared by every grid point."""

    global_batch: int = Field(64, gt=0, description="Samples per optimizer step (all replicas).")
    dtype: Literal["fp16", "bf16", "fp32"] | None = Field(
        None,
        description="Training dtype of weights, gradients and activations; default: each "
        "trace's own dtype. A different dtype rescales the trace's bytes (not its times).",
    )
    precision: str | None = Field(
        None,
        description="Precision of the linear layers' GEMMs (sim.compute.precision): bf16, fp16 "
        "or fp32 (the training dtype: no low precision), or a recipe: fp8-delayed, "
        "fp8-tensorwise, fp8-blockwise, mxfp8, nvfp4 (Transformer Engine, as Megatron-LM runs "
        "them), fp8-rowwise, fp8-rowwise-gw-hp, mxfp8 (torchao, framework torchtitan). "
        "Parameters and activations stay in training.dtype. Default: the training dtype; "
        "sweep.precision sweeps it. Generated decoder traces only.",
    )
    precision_options: PrecisionOptions | None = Field(
        None,
        description="How the low-precision recipe runs (first/last blocks in 16 bits, FP8 "
        "parameter all-gather); default: Megatron-LM's defaults (none of them).",
    )
    optimizer: Literal["adam", "sgd", "sgd_momentum"] = Field(
        "adam",
        description="Optimizer; sets the bytes of optimizer state per parameter (memory.md §1: "
        "mixed-precision Adam 16 B/param in total).",
    )
    iterations: int = Field(
        0,
        ge=0,
        le=MAX_ITERATIONS,
        description="Optimizer steps to simulate; 0 chooses enough "
        "for steady state (at most 100: the steady state is reached within a few).",
    )
    optimizer_step: bool = Field(
        True, description="Simulate the optimizer step's time (memory-bound update on HBM)."
    )


class SweepConfig(_Strict):
    """The grid: every combination of the listed values is one configuration."""

    _axes_not_empty = field_validator("*", mode="before")(_no_empty_list)

    schedule: StrList = Field(
        "1f1b",
        description="Schedule name(s): gpipe, 1f1b, pipedream_2bw, pipedream, pipemare, "
        "interleaved_1f1b, looped_bfs, interleaved_zero_bubble, zbv_zero_bubble, dualpipe_v.",
    )
    stages: IntList = Field(2, description="Pipeline depth(s) p (ranks, one GPU each).")
    virtual_stages: IntList = Field(
        1,
        description="Stage chunks per rank v (virtual stages): p*v stages, stage s on rank "
        "s mod p (V shape for zbv_zero_bubble and dualpipe_v). 1 for the one-stage-per-rank "
        "schedules; >= 2 for interleaved_1f1b, looped_bfs and interleaved_zero_bubble; exactly 2 "
        "for zbv_zero_bubble and dualpipe_v. Left unset, each schedule takes its smallest v "
        "(1 or 2); when set, combinations a schedule rejects are skipped with the reason.",
    )
    dp_width: IntList = Field(
        1,
        description="Data-parallel width(s) w: every data-parallel rank of a stage (with "
        "dp_shard, the FSDP shard groups times their replicas).",
    )
    gpus: int | None = Field(
        None,
        gt=0,
        le=MAX_GPUS,
        description="Plan for exactly this many GPUs (a cluster): each combination of stages, "
        "tensor_parallel and context_parallel gets dp_width = gpus / (stages x t x cp), and "
        "combinations that do not divide it are skipped; dp_width must then be left unset.",
    )
    tensor_parallel: IntList = Field(
        1,
        description="Megatron tensor-parallel size(s) t: each stage replica runs on t GPUs of "
        "one server (sim.parallel); t must divide each server's GPUs and the model's heads, and "
        "the trace must record its model shape. A point uses stages x dp_width x t GPUs.",
    )
    sequence_parallel: bool | list[bool] = Field(
        False,
        description="Megatron sequence parallelism with tensor parallelism (reduce-scatter / "
        "all-gather instead of all-reduce; activations split t ways: Korthikanti et al. 2022).",
    )
    expert_parallel: IntList = Field(
        1,
        description="Expert-parallel size(s) ep of a MoE model (sim.parallel.expert): ep "
        "consecutive data x context-parallel ranks split the experts (Megatron's tp-cp-ep-dp-pp "
        "order) and exchange routed tokens by all-to-all; ep divides dp_width x "
        "context_parallel and the experts; with expert_tensor_parallel, ep x etp ranks of the "
        "folded expert mesh over tensor x context x data ranks (sim.parallel.folding). Each "
        "stage's EP groups are placed inside one NVLink domain (server, NVL72 rack) where they "
        "fit (sim.parallel.domains).",
    )
    expert_tensor_parallel: IntList | None = Field(
        None,
        description="Expert tensor-parallel size(s) etp (MoE parallel folding, "
        "sim.parallel.folding: the experts' GEMMs split etp ways, expert parallelism over "
        "tensor x context x data ranks, ep x etp dividing tensor_parallel x context_parallel x "
        "dp_width); unset: tensor_parallel (Megatron-Core's default).",
    )
    dp_shard: IntList = Field(
        1,
        description="FSDP shard degree(s) (sim.memory.fsdp): dp_shard of the dp_width "
        "data-parallel ranks (times context_parallel) shard parameters, gradients and optimizer "
        "state per fully_shard unit, dp_width / dp_shard replicate them (HSDP); -1: all of "
        "dp_width (torchtitan's data_parallel_shard_degree = -1); 1: no FSDP.",
    )
    context_parallel: IntList = Field(
        1,
        description="Context-parallel size(s) cp (sim.parallel.context): each of cp ranks holds "
        "seq_len/cp tokens; a point uses stages x dp_width x tensor_parallel x "
        "context_parallel GPUs. Decoder traces (sim.trace.decoder) only.",
    )
    context_parallel_comm: StrList = Field(
        "p2p",
        description="How context-parallel attention gets the other ranks' keys and values: "
        "p2p (ring attention), all_gather, a2a (Ulysses).",
    )
    ep_overlap: bool | list[bool] = Field(
        False,
        description="Run the OVERLAP_F_B pairs of dualpipe_v as DualPipe does, one chunk's "
        "expert/context-parallel exchanges under the other's compute (sim.engine.overlap); "
        "false: the two one after the other (torch's default runtime).",
    )
    microbatch_size: IntList = Field(1, description="Samples per micro-batch b.")
    precision: StrList | None = Field(
        None,
        description="Precision(s) of the linear layers' GEMMs to sweep (as training.precision, "
        "which it replaces), e.g. [bf16, fp8-delayed, mxfp8].",
    )
    memory_policy: StrList = Field(
        "none",
        description="Memory-saving policy spec(s): none, recompute (recompute:full, "
        "recompute:full:N layers per stage, recompute:selective, Megatron's module-level "
        "recompute:selective:core_attn,layernorm,mlp,moe_act,moe,mla_up_proj, torchtitan's "
        "per-op recompute:sac), dist_opt (dist_opt:recompute[:<a recompute choice>]), zero3, "
        "cpu_swap (cpu_swap:FRACTION), "
        "d2d_swap (d2d_swap:weights, d2d_swap+recompute), chunked (chunked:M elements per chunk, in millions), "
        "zero_offload, auto; or one spec per stage joined by '|'.",
    )
    prune: bool = Field(
        True,
        description="Skip, without simulating, points whose memory lower bound exceeds the GPU "
        "capacity and points whose throughput upper bound is below the best found so far "
        "(sim.plan.planner; the winner is unchanged). false: simulate every point (sim run "
        "--exhaustive does the same).",
    )
    synchronous_only: bool = Field(
        False,
        description="Keep only schedules that update with fresh weights (staleness 0: "
        "gpipe, 1f1b); skip pipedream, pipedream_2bw and pipemare.",
    )

    @field_validator(
        "stages",
        "virtual_stages",
        "dp_width",
        "microbatch_size",
        "tensor_parallel",
        "expert_parallel",
        "context_parallel",
        "expert_tensor_parallel",
    )
    @classmethod
    def _positive(cls, v: IntList | None) -> IntList | None:
        for x in as_list(v) if v is not None else []:
            if x < 1:
                raise ValueError(f"must be >= 1, got {x}")
        return v

    @field_validator("dp_shard")
    @classmethod
    def _shard(cls, v: IntList) -> IntList:
        for x in as_list(v):
            if x < 1 and x != -1:
                raise ValueError(f"must be >= 1 or -1 (all of dp_width), got {x}")
        return v


class OptionsConfig(_Strict):
    """How configurations are built."""

    partition: Literal["optimal", "uniform"] = Field(
        "optimal", description="Layer partition: optimal (min bottleneck, memory aware) or uniform."
    )
    boundaries: list[int] | None = Field(
        None,
        description="Fixed stage start-layer indices (overrides the partitioner; "
        "written to winner.yaml).",
    )
    placement: list[list[int]] | list[list[list[int]]] | None = Field(
        None,
        description="Fixed GPUs (overrides automatic placement): per [replica][stage] a GPU "
        "index, or with tensor parallelism a list of t GPU indices; the replicas are the "
        "dp_width x context_parallel data- and context-parallel ranks (context rank "
        "innermost), whose consecutive runs form the expert-parallel groups "
        "(sim.parallel.domains). Every dimension honours it.",
    )
    simulation: Literal["auto", "full", "symmetric"] = Field(
        "auto",
        description="How many ranks the engine runs (sim.engine.symmetry): 'full' every GPU; "
        "'symmetric' one data-parallel replica's tensor rank 0 when every replica and tensor "
        "rank runs the same program on alike GPUs and links (collectives still timed over "
        "every member), else full; 'auto' symmetric above "
        f"{MIRROR_ABOVE_GPUS} GPUs, full up to it.",
    )
    stragglers: dict[NonNegativeInt, PositiveFloat] = Field(
        default_factory=dict,
        description="Slow GPUs: {GPU index: factor}; that GPU's compute takes factor times as "
        "long (e.g. {5: 1.3}). A straggler in the job makes the simulation full.",
    )
    fsdp_reshard_after_forward: bool | int | None = Field(
        None,
        description="FSDP's reshard_after_forward for every transformer block (with dp_shard > "
        "1, sim.memory.fsdp): true (free after forward, gather again for backward), false (keep "
        "from forward to backward), or a world size k (keep 1/k, gather over k ranks for "
        "backward); default: the framework's (torchtitan: true, false with pipeline "
        "parallelism).",
    )
    stage_policies: list[str] | None = Field(
        None,
        min_length=1,
        description="A memory policy spec per stage (stage 0 first), e.g. "
        "[recompute:full, cpu_swap, none, none]; replaces the sweep.memory_policy axis (which "
        "must then be left unset); grid points whose depth differs from its length are skipped.",
    )

    @field_validator("fsdp_reshard_after_forward")
    @classmethod
    def _world(cls, v: bool | int | None) -> bool | int | None:
        if v is not None and not isinstance(v, bool) and v < 2:
            raise ValueError(f"a world size to reshard to must be >= 2, got {v}")
        return v


class MemoryConfig(_Strict):
    """How the framework and PyTorch's allocator lay out memory (sim.memory.framework_memory);
    unset fields take the framework profile's defaults."""

    cross_entropy: Literal["unfused", "native", "te"] | None = Field(
        None,
        description="Loss implementation: Megatron's unfused vocab-parallel cross entropy "
        "(fp32 softmax kept), 'native' (--cross-entropy-loss-fusion: the same, and one more fp32 "
        "copy in its compiled backward) or 'te' "
        "(--cross-entropy-fusion-impl te: only the 16-bit logits kept). Default: unfused.",
    )
    gradient_accumulation_fusion: bool | None = Field(
        None,
        description="Weight gradients accumulate straight into the fp32 main_grad "
        "(Megatron-LM's default with Transformer Engine; false: --no-gradient-accumulation-"
        "fusion, a transient weight gradient per GEMM). Default: the framework's.",
    )
    grad_reduce_in_bf16: bool = Field(
        False,
        description="Megatron's --grad-reduce-in-bf16: 16-bit gradient buffers instead of fp32 "
        "main_grad (and an fp32 copy of the gradient shard at the step).",
    )
    expandable_segments: bool = Field(
        False,
        description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator "
        "maps pages into one growing segment per pool (less fragmentation).",
    )
    defer_embedding_wgrad: int | None = Field(
        None,
        ge=0,
        description="Megatron's --defer-embedding-wgrad-compute with --wgrad-deferral-limit N "
        "(0: every micro-batch): the output layer keeps the inputs and output gradients of up "
        "to N micro-batches to the pipeline flush (sim.memory.layer_work). Default: off.",
    )
    te_grouped_gemm: bool = Field(
        False,
        description="The MoE experts run Transformer Engine's grouped GEMM (Megatron's "
        "--moe-grouped-gemm): TE keeps one more cuBLAS workspace per compute stream, 4 "
        "(sim.memory.framework_memory.TE_GROUPED_GEMM_STREAMS).",
    )
    cublas_workspace_config: str | None = Field(
        None,
        pattern=r"^(:[0-9]+:[0-9]+)+$",
        description="CUBLAS_WORKSPACE_CONFIG of the run (':4096:8', which Megatron's "
        "--deterministic-mode sets): the size of each of PyTorch's cuBLAS workspaces, "
        "allocated through the caching allocator (sim.memory.cublas_workspace). Default: "
        "PyTorch's (8.125 MiB; 32 MiB on Hopper).",
    )
    precision_aware_optimizer: bool = Field(
        False,
        description="Megatron's --use-precision-aware-optimizer (Transformer Engine's FusedAdam "
        "with the dtypes below, the bf16 master stored as its 16-bit remainder, the gradient "
        "handed over without an fp32 copy: sim.memory.precision_aware).",
    )
    main_grads_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="--main-grads-dtype: the gradient buffer's dtype (bf16 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip
    main_params_dtype: Literal["fp32", "fp16"] = Field(
        "fp32", description="--main-params-dtype: the master weights' dtype (fp16 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip
    exp_avg_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field(
        "fp32", description="--exp-avg-dtype: Adam's first moment (other than fp32 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip
    exp_avg_sq_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field(
        "fp32", description="--exp-avg-sq-dtype: Adam's second moment (other than fp32 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip

    @field_validator("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
    @classmethod
    def _needs_precision_aware(cls, v: str, info: Any) -> str:
        """Megatron asserts fp32 for all four without the precision-aware optimizer
        (megatron/core/optimizer/optimizer_config.py ``OptimizerConfig.__post_init__``)."""
        if v != "fp32" and not info.data.get("precision_aware_optimizer"):
            raise PydanticCustomError(
                "needs_precision_aware",
                "{field} {value} needs precision_aware_optimizer: true (Megatron-Core asserts "
                "fp32 without --use-precision-aware-optimizer)",
                {"field": info.field_name, "value": v},
            )
        return v


class ExperimentConfig(_Strict):
    """A whole experiment file."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Experiment name; results go to results/<name>/ by default." + _NAME_HELP,
    )
    description: str = Field("", description="Free text.")
    hardware: str | dict[str, Any] = Field(
        description="Hardware preset name (see `sim hardware list`) or an inline description."
    )
    hardware_overlay: str | None = Field(
        None,
        description="A hardware overlay file (relative to this file) set over the hardware: "
        "figures of one's own cluster, e.g. written by `sim calibrate --from-runs` "
        "(sim.hardware.overlay); `sim run --hardware-overlay FILE` sets it.",
    )
    models: list[ModelConfig] = Field(min_length=1, description="Models to sweep.")
    framework: str = Field(
        "pipesim",
        description="Training framework profile: what it does around the model (gradient "
        "bucketing and overlap, distributed optimizer, embedding and head placement, pipeline "
        "engine exchanges and sync points, schedules it runs): pipesim (default, what `sim "
        "validate` replays), megatron-deepspeed, megatron-lm, megatron-lm-torch-ddp, deepspeed, "
        "torchtitan, pytorch-ddp (sim.framework: each setting with its source). With options "
        "(sim.framework.options), a mapping {name: megatron-lm, overlap_grad_reduce: true} or "
        "the string megatron-lm[overlap_grad_reduce]; `sim frameworks` lists each profile's.",
    )
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    options: OptionsConfig = Field(default_factory=OptionsConfig)
    prediction: dict[str, Any] | None = Field(
        None, description="Filled in winner.yaml: what the simulator predicted for it."
    )

    @field_validator("framework", mode="before")
    @classmethod
    def _framework_spec(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return framework_spec_of(value)
        return value

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelConfig]) -> list[ModelConfig]:
        seen: dict[str, int] = {}
        for i, m in enumerate(models):
            if m.name in seen:
                raise PydanticCustomError(
                    "duplicate_name",
                    "model name '{name}' is used by models.{first} too; "
                    "give every model its own name",
                    {"name": m.name, "first": seen[m.name], "index": i},
                )
            seen[m.name] = i
        return models


def framework_spec_of(value: dict[str, Any]) -> str:
    """The spec string ``name[option,option=value]`` of a ``framework:`` mapping
    (``{name: megatron-lm, overlap_grad_reduce: true}``), options in their written order; the
    profile checks the names and values (:mod:`sim.framework.options`).

    Raises:
        PydanticCustomError: no ``name``, or a value that is a list or a mapping.

    Example:
        >>> framework_spec_of({"name": "megatron-lm", "tp_comm_overlap": True, "cuda_graph": "full"})
        'megatron-lm[tp_comm_overlap=true,cuda_graph=full]'
    """
    opts = dict(value)
    name = opts.pop("name", None)
    if not isinstance(name, str) or not name.strip():
        raise PydanticCustomError(
            "framework_name", "a framework mapping needs name: (the profile, e.g. megatron-lm)"
        )
    parts = []
    for k, v in opts.items():
        if isinstance(v, list | dict) or not _SPEC_TEXT.match(_spec_value(v)):
            raise PydanticCustomError(
                "framework_option",
                "framework option {key}: {value!r} is not a plain value",
                {"key": k, "value": v},
            )
        parts.append(f"{k}={_spec_value(v)}")
    return f"{name.strip()}[{','.join(parts)}]" if parts else name.strip()


def _spec_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


_SPEC_TEXT = re.compile(r"^[A-Za-z0-9_.+-]+$")


def parse_framework_spec(text: str) -> tuple[str, dict[str, str]]:
    """``(profile name, {option: value text})`` of a spec string ``name[a,b=c]`` (an option
    without ``=`` is ``true``); a plain name has no options.

    Raises:
        ValueError: unbalanced brackets, an empty option, or text after ``]``.

    Example:
        >>> parse_framework_spec("megatron-lm[overlap_grad_reduce,cuda_graph=full_iteration]")
        ('megatron-lm', {'overlap_grad_reduce': 'true', 'cuda_graph': 'full_iteration'})
    """
    text = text.strip()
    if "[" not in text and "]" not in text:
        return text, {}
    name, sep, rest = text.partition("[")
    if not sep or not rest.endswith("]") or "[" in rest[:-1] or "]" in rest[:-1]:
        raise ValueError(f"{text!r}: write name[option,option=value]")
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest[:-1].split(","))):
        key, eq, val = part.partition("=")
        if not key.strip() or (eq and not val.strip()):
            raise ValueError(f"{text!r}: empty option in {part!r}")
        out[key.strip()] = val.strip() if eq else "true"
    return name.strip(), out


_UNION_TAGS = {
    "int",
    "str",
    "bool",
    "float",
    "list[int]",
    "list[str]",
    "list[bool]",
    "dict[str,any]",
}
"""The names pydantic adds to a location for the branch of a union it tried."""


def _field_path(loc: tuple) -> str:
    """``('sweep', 'stages', 'int')`` -> ``sweep.stages`` (union branch names dropped)."""
    return ".".join(str(p) for p in loc if str(p).replace(" ", "").lower() not in _UNION_TAGS)


def parse_experiment(data: Any, *, file: str = "<experiment>") -> ExperimentConfig:
    """Validate a parsed YAML mapping.

    Raises:
        InputError: naming the file and the first offending field.
    """
    if not isinstance(data, dict):
        raise InputError("the experiment must be a YAML mapping (key: value)", file=file)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"]
        loc = tuple(err["loc"])
        if err["type"] in ("int_type", "bool_type", "string_type", "float_type", "list_type"):
            want = err["type"].split("_")[0].replace("string", "text").replace("int", "integer")
            msg = f"{err['input']!r} is not {'an' if want == 'integer' else 'a'} {want}"
            if len(exc.errors()) > 1 and "list" in str(loc[-1:]) + err["type"]:
                msg += " or a list of them"
        elif err["type"] == "extra_forbidden":
            msg = "unknown key (remove it or check its spelling; see `sim run --help`)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "string_pattern_mismatch":
            msg = (
                f"{err['input']!r} is not a valid name: use letters, digits and . _ + - "
                "only, not starting with a dot (it names a folder under results/)"
            )
        elif err["type"] == "duplicate_name":
            loc = loc + (err["ctx"]["index"], "name")
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        raise InputError(msg + more, file=file, field=_field_path(loc)) from None


def load_experiment(path: str | Path) -> ExperimentConfig:
    """Read and validate an experiment YAML file.

    Raises:
        InputError: the file is missing, is not valid YAML, or fails validation.
    """
    data = read_yaml_file(path, what="experiment file")
    return parse_experiment(data, file=str(path))


def config_hash(obj: Any) -> str:
    """SHA-256 of a JSON-serialisable object with sorted keys (cache key)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()

"""The ``sweep:`` section: the grid of schedules, parallel sizes, micro-batch sizes, precisions and
memory policies, every combination of which is one configuration."""

from __future__ import annotations

from pydantic import Field, field_validator

from sim.config.fields import IntList, Strict, StrList, all_positive, as_list, no_empty_list
from sim.config.limits import MAX_GPUS


class SweepConfig(Strict):
    """The grid: every combination of the listed values is one configuration."""

    _axes_not_empty = field_validator("*", mode="before")(no_empty_list)

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
        return all_positive(v)

    @field_validator("dp_shard")
    @classmethod
    def _shard(cls, v: IntList) -> IntList:
        for x in as_list(v):
            if x < 1 and x != -1:
                raise ValueError(f"must be >= 1 or -1 (all of dp_width), got {x}")
        return v

"""The ``models:`` section: one model to train, its trace and its own overrides of the sweep."""

from __future__ import annotations

from pydantic import Field, field_validator

from sim.config.fields import (
    NAME_HELP,
    NAME_PATTERN,
    IntList,
    Strict,
    StrList,
    all_positive,
    no_empty_list,
)


class ModelConfig(Strict):
    """One model to train: a trace and optional per-model overrides of the sweep."""

    _axes_not_empty = field_validator("*", mode="before")(no_empty_list)

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Model name used in results (e.g. 'gpt2-1.5b')." + NAME_HELP,
    )
    trace: str = Field(
        description="Trace reference: a name in traces/ (e.g. 'gnmt16'), a path to a native "
        "trace (.csv/.yaml), a PipeDream graph.txt or a Hugging Face config.json (with "
        "seq_len), relative to the experiment file."
    )
    seq_len: int | None = Field(
        None,
        gt=0,
        description="Tokens per sample, required when trace is a Hugging Face config.json "
        "(read offline; its layers timed by the kernel model on the experiment's GPU).",
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
        return all_positive(v)

    routing: str = Field(
        "balanced",
        description="How a MoE model's router spreads tokens over experts "
        "(sim.compute.routing): 'balanced', 'imbalance:A' (the busiest expert gets A times "
        "its share) or 'histogram:N0,N1,...' (tokens per expert, e.g. measured).",
    )

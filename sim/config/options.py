"""The ``options:`` section: how configurations are built (partition, fixed boundaries and
placement, how many ranks are simulated, stragglers, FSDP resharding, per-stage policies)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, field_validator

from sim.config.fields import Strict
from sim.config.limits import MIRROR_ABOVE_GPUS


class OptionsConfig(Strict):
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

"""A whole experiment file: its hardware, models, framework and sections."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from sim.config.fields import NAME_HELP, NAME_PATTERN, Strict
from sim.config.framework_spec import framework_spec_of
from sim.config.memory import MemoryConfig
from sim.config.model import ModelConfig
from sim.config.options import OptionsConfig
from sim.config.sweep import SweepConfig
from sim.config.training import TrainingConfig


class ExperimentConfig(Strict):
    """A whole experiment file."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Experiment name; results go to results/<name>/ by default." + NAME_HELP,
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

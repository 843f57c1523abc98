"""Policy ``none``: every weight version, gradient, optimizer state and stash stays on the GPU."""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.base import MemoryPolicy, ReplayPlan
from sim.memory.compose import describe, resident_plan
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes, stage_state_bytes_per_param


class NoPolicy(MemoryPolicy):
    """Everything resident; the baseline all other policies are measured against."""

    name = "none"
    description = "everything resident on the GPU"
    replayable = True
    plans_to_capacity = False  # no plan reads ctx.capacity_bytes (only describe's notes)
    keeps_everything = True

    def plan(self, ctx: StageContext) -> StagePlan:
        return describe(ctx, resident_plan(ctx), "everything resident", 0.0)

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Every state of every weight version stays on the GPU."""
        return stage_state_bytes_per_param(states, versions, version_bytes)

    def keeps_every_stash(self) -> bool:
        return True

    def replay(self, is_block: Sequence[bool], where: str) -> ReplayPlan:
        """Every saved tensor stays on the device."""
        return ReplayPlan()

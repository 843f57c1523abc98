"""Policy ``none``: every weight version, gradient, optimizer state and stash stays on the GPU."""

from __future__ import annotations

from sim.memory.base import MemoryPolicy, StageContext
from sim.memory.compose import describe
from sim.memory.plan import StagePlan


class NoPolicy(MemoryPolicy):
    """Everything resident; the baseline all other policies are measured against."""

    name = "none"
    description = "everything resident on the GPU"

    def plan(self, ctx: StageContext) -> StagePlan:
        return describe(ctx, ctx.resident_plan(), "everything resident", 0.0)

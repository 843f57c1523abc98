"""A policy per stage: ``none|recompute:full|cpu_swap|none`` (``options.stage_policies``).

Stage ``s`` is planned by the ``s``-th policy. Policies that plan one stage at a time go first;
cross-stage ones (``d2d_swap``, ``auto``) then plan their stages knowing what the others hold
(their ``fixed`` argument), in list order. The planner's bounds take the weakest of the stages'
(their minimum); the replay runs each stage's own policy (:meth:`PerStagePolicy.for_stage`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.base import MemoryPolicy
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes

SEPARATOR = "|"


class PerStagePolicy(MemoryPolicy):
    """One policy per stage.

    Args:
        policies: the policy of stage 0, 1, ... (as many as stages).
    """

    name = "per_stage"
    description = "a memory policy per stage: 'none|recompute|...'"
    cross_stage = True

    def __init__(self, policies: list[MemoryPolicy]):
        self.policies = policies

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]

    def parts(self) -> tuple[MemoryPolicy, ...]:
        return tuple(self.policies)

    def for_stage(self, stage: int, stages: int) -> MemoryPolicy:
        """Stage ``stage``'s own policy.

        Raises:
            ValueError: the spec names another number of stages than ``stages``.
        """
        if len(self.policies) != stages:
            raise ValueError(
                f"memory policy {self.text!r} names {len(self.policies)} stages, not {stages}"
            )
        return self.policies[stage]

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """The least any stage's policy keeps (module doc)."""
        return min(
            p.min_state_bytes_per_param(states, dp_width, versions, version_bytes)
            for p in self.policies
        )

    def keeps_every_stash(self) -> bool:
        return all(p.keeps_every_stash() for p in self.policies)

    def plan_all(
        self, contexts: list[StageContext], fixed: Sequence[tuple[StageContext, StagePlan]] = ()
    ) -> list[StagePlan]:
        """Raises:
        ValueError: the number of policies differs from the number of stages.
        """
        stages = {c.stages for c in contexts}
        if stages != {len(self.policies)}:
            raise ValueError(f"{len(self.policies)} stage policies for {sorted(stages)} stages")
        plans: dict[int, StagePlan] = {}
        order = sorted(range(len(self.policies)), key=lambda k: self.policies[k].cross_stage)
        for k in order:
            idx = [i for i, c in enumerate(contexts) if c.stage == k]
            done = list(fixed) + [(contexts[i], plans[i]) for i in plans]
            for i, plan in zip(
                idx, self.policies[k].plan_all([contexts[i] for i in idx], done), strict=True
            ):
                plans[i] = plan
        return [plans[i] for i in range(len(contexts))]

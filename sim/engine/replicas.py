"""The (replica, stage, tensor rank) records the engine runs (:class:`StageReplica`), one per
simulated rank of a :class:`~sim.engine.inputs.SimInput`, so that processes pass one record
instead of ``(r, s, gpu, plan)``; a straggler GPU's record carries its slowed costs."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.engine.inputs import SimInput
from sim.engine.stage_cost import StageCost
from sim.memory.plan import StagePlan
from sim.schedules.action import Action


def stage_replicas(inp: SimInput) -> list[StageReplica]:
    """Every simulated (replica, stage, tensor rank) of ``inp``, replica-major, then stage."""
    return [
        StageReplica.of(inp, r, s, k)
        for r in range(inp.simulated_replicas)
        for s in range(inp.stages)
        for k in range(inp.simulated_tensor_ranks)
    ]


@dataclass(frozen=True, slots=True)
class StageReplica:
    """Stage ``stage`` of pipeline replica ``replica`` as the engine runs it.

    Attributes:
        replica: data-parallel replica index r.
        stage: pipeline stage s.
        gpu: node name of its GPU (``gpu3``).
        host: node name of that GPU's host socket (``cpu0``).
        plan: its memory plan.
        cost: its per-micro-batch compute and boundary sizes.
        order: its rank's action list (STEP included; other stages' actions too when the
            rank holds several).
        first: whether it is stage 0 (receives no activation).
        last: whether it is the last stage (receives no gradient).
        tp_rank: its rank in the stage replica's tensor-parallel group (0 without).
    """

    replica: int
    stage: int
    gpu: str
    host: str
    plan: StagePlan
    cost: StageCost
    order: tuple[Action, ...]
    first: bool
    last: bool
    tp_rank: int = 0

    @classmethod
    def of(cls, inp: SimInput, r: int, s: int, k: int = 0) -> StageReplica:
        g = inp.gpu_index(r, s, k)
        plan = inp.tensor_plans[r][s][k] if inp.tensor_plans else inp.plans[r][s]
        cost, factor = inp.costs[s], inp.slowdown(g)
        if factor != 1.0:
            cost, plan = _slowed(cost, factor), _slowed_plan(plan, factor)
        return cls(
            r,
            s,
            f"gpu{g}",
            inp.topology.gpu(g).host,
            plan,
            cost,
            tuple(inp.program[inp.stage_ranks[s]]),
            s == 0,
            s == inp.stages - 1,
            k,
        )

    @property
    def key(self) -> tuple[int, int, int]:
        """``(replica, stage, tp_rank)``: what identifies it among the run's processes."""
        return (self.replica, self.stage, self.tp_rank)

    def tags(self, microbatch: int | None, iteration: int | None) -> dict:
        """The keyword fields every :class:`~sim.events.Event` of this replica carries."""
        return dict(
            stage=self.stage, microbatch=microbatch, iteration=iteration, replica=self.replica
        )


def _slowed(cost: StageCost, factor: float) -> StageCost:
    """``cost`` on a GPU ``factor`` times slower: every compute time scaled."""

    def scale(x: float | None) -> float | None:
        return None if x is None else x * factor

    return replace(
        cost,
        fwd_s=cost.fwd_s * factor,
        bwd_s=cost.bwd_s * factor,
        bwd_input_s=scale(cost.bwd_input_s),
        bwd_weight_s=scale(cost.bwd_weight_s),
        fwd_layers=tuple((s * factor, o, m, f, te) for s, o, m, f, te in cost.fwd_layers),
        bwd_layers=tuple((s * factor, o, n) for s, o, n in cost.bwd_layers),
        recompute_skip_s=tuple(s * factor for s in cost.recompute_skip_s),
    )


def _slowed_plan(plan: StagePlan, factor: float) -> StagePlan:
    """``plan`` on a GPU ``factor`` times slower: its recompute and optimizer step scaled."""
    return replace(
        plan, recompute_s=plan.recompute_s * factor, optimizer_s=plan.optimizer_s * factor
    )

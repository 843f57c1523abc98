"""The memory-policy interface: one class per policy, which the simulator, the planner's bounds
and the hardware replay all ask (never the policy's name).

A policy

* parses its own parameters (:meth:`MemoryPolicy.from_args`, ``recompute:full:4`` ->
  ``["full", "4"]``); :mod:`sim.memory.registry` maps names to classes;
* may move layers between stages before planning them (:meth:`MemoryPolicy.repartition`,
  vPipe);
* plans every stage (:meth:`MemoryPolicy.plan_all`): some decisions are cross-stage (MPress
  places one GPU's activations in another GPU's spare memory). Most policies only override
  :meth:`MemoryPolicy.plan` for one stage. Cross-stage policies also receive the plans other
  policies already made for the remaining stages (``fixed``, when policies are chosen per
  stage), so they know what those GPUs hold;
* gives the planner its share of the memory lower bound (:meth:`~MemoryPolicy.min_state_bytes_per_param`,
  :meth:`~MemoryPolicy.keeps_every_stash`) and of the throughput bound
  (:meth:`~MemoryPolicy.bound_recompute_mode`), used by :mod:`sim.plan.bounds`;
* says how the torch replay runs it on a stage (:meth:`MemoryPolicy.replay`, a
  :class:`~sim.memory.replay.ReplayPlan`) or that it cannot (:class:`~sim.memory.replay.NotReplayable`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

from sim.memory.context import StageContext
from sim.memory.plan import StagePlan
from sim.memory.replay import NotReplayable, ReplayPlan
from sim.memory.states import StateBytes

__all__ = ["MemoryPolicy", "NotReplayable", "ReplayPlan", "StageContext"]


class MemoryPolicy(ABC):
    """A memory-saving policy. Subclasses live one per file and register by ``name``.

    Instances are immutable once built (the registry shares one per ``memory_policy`` string).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    cross_stage: ClassVar[bool] = False
    """True when a stage's plan depends on the other stages' (peers' spare memory)."""
    replayable: ClassVar[bool] = False
    """True when :meth:`replay` runs the policy on the torch replay."""
    keeps_everything: ClassVar[bool] = False
    """True when the policy keeps every tensor on the GPU and recomputes nothing (``none``):
    the only kind a replay that runs no memory policy (tensor-, expert- and context-parallel,
    stage chunks per rank) stands for (:func:`sim.memory.registry.keeps_everything`)."""
    shards_states: ClassVar[bool] = False
    """True when the policy partitions model states over the data-parallel replicas (ZeRO-3,
    ZeRO-Offload, PatrickStar's chunks): not combined with expert parallelism, whose routed
    experts' states would partition over the expert-data-parallel group instead
    (:mod:`sim.plan.parallel_axes`)."""
    shards_experts: ClassVar[bool] = False
    """True when a policy that shards states shards the routed experts' over their own
    expert-data-parallel group (ZeRO-3 with expert parallelism), so it runs with ``ep > 1``."""

    plans_to_capacity: ClassVar[bool] = True
    """False when the bytes of the policy's plans do not depend on the GPU's capacity (only
    their ``fits`` notes do: ``none``, ``recompute``, ``dist_opt``), so a refit
    (:func:`sim.memory.compose.plan_to_fit`) never changes them and ``sim memory``'s advice
    may rule a change out by a lower bound without the allocator replay
    (:func:`sim.point.memory.point_memory` with ``replay=False``). True (the safe default)
    for a policy that sizes its plan to the memory it has."""

    repartitions: ClassVar[bool] = False
    """True when the policy also moves layers between stages (:meth:`repartition`, vPipe)."""

    text: str = ""
    """The ``memory_policy`` string this instance was built from (set by the registry)."""

    @classmethod
    def from_args(cls, args: list[str]) -> MemoryPolicy:
        """An instance from the parameters after the name (``recompute:full:4`` -> ``["full",
        "4"]``).

        Raises:
            ValueError: a parameter is not understood (the message says what is expected).
        """
        if args:
            raise ValueError(f"policy {cls.name!r} takes no parameters, got {':'.join(args)!r}")
        return cls()

    def plan_all(
        self, contexts: list[StageContext], fixed: Sequence[tuple[StageContext, StagePlan]] = ()
    ) -> list[StagePlan]:
        """Plans for every stage replica, in the order of ``contexts``.

        Args:
            contexts: the stage replicas this policy plans.
            fixed: ``(context, plan)`` of stage replicas planned by other policies.
        """
        return [self.plan(ctx) for ctx in contexts]

    @abstractmethod
    def plan(self, ctx: StageContext) -> StagePlan:
        """The plan for one stage replica."""

    def repartition(
        self,
        boundaries: tuple[int, ...],
        n_layers: int,
        contexts: Callable[[tuple[int, ...]], Sequence[StageContext]],
    ) -> tuple[tuple[int, ...], dict]:
        """The stage boundaries the policy runs with, given the partitioner's ``boundaries``
        of ``n_layers`` layers; ``contexts(b)``: one stage context per stage for boundaries
        ``b`` (one data-parallel replica). Returns them and notes for the user. Default: the
        partitioner's, unchanged (only policies with :attr:`repartitions` are asked)."""
        return tuple(boundaries), {}

    # --- one policy per stage ----------------------------------------------------------------

    def parts(self) -> tuple[MemoryPolicy, ...]:
        """The policies this one runs: itself, or each stage's (``a|b|...``)."""
        return (self,)

    def for_stage(self, stage: int, stages: int) -> MemoryPolicy:
        """The policy stage ``stage`` of ``stages`` runs: this one (a per-stage policy: its
        entry for the stage).

        Raises:
            ValueError: a per-stage policy that names a different number of stages.
        """
        return self

    # --- the planner's bounds (sim.plan.bounds) ---------------------------------------------------

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Model-state bytes per parameter the policy keeps on the GPU at least, whatever it
        plans (:mod:`sim.plan.bounds`). Default 0: nothing is guaranteed to stay.

        Args:
            states: bytes per parameter of each state class.
            dp_width: data-parallel width (sharding policies divide by it).
            versions: the fewest weight versions any stage keeps.
            version_bytes: bytes per parameter of each extra version.
        """
        return 0.0

    def keeps_every_stash(self) -> bool:
        """True when every stash stays on the GPU from its forward to its backward (nothing
        dropped or moved), so the bound may count ``in_flight x act_bytes``."""
        return False

    def bound_recompute_mode(self) -> str | None:
        """The recompute every layer of every stage surely runs before its backward
        (``"full"`` or ``"selective"``), counted by the throughput bound; None: none counted."""
        return None

    # --- the hardware replay ------------------------------------------------------------------

    def replay(self, is_block: Sequence[bool], where: str) -> ReplayPlan:
        """How the torch replay runs this policy on one stage.

        Args:
            is_block: for each layer of the stage, whether it is a transformer block.
            where: names the stage and policy in notes and errors (``"stage 1: 'cpu_swap'"``).

        Raises:
            NotReplayable: the replay cannot run it (the default).
        """
        raise NotReplayable(f"{where}: the torch replay cannot run {self.name}")

    def unreplayable(self) -> list[str]:
        """Names of the policies among :meth:`parts` that the replay cannot run."""
        return sorted({p.name for p in self.parts() if not p.replayable})

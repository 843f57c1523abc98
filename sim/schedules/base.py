"""The :class:`Schedule` interface: a schedule is data, a per-rank list of actions.

Each concrete schedule lives in its own module and registers itself in
:mod:`sim.schedules.registry`. A pipeline of depth ``p`` has ``p`` ranks; each rank holds
``v`` stage chunks (virtual stages, ``v = 1`` for GPipe, 1F1B and the asynchronous schedules:
rank ``s`` runs stage ``s``), so there are ``p * v`` stages, numbered in model order and mapped
onto ranks by :meth:`Schedule.stage_rank` (torch ``generate_stage_to_rank_mapping``: "loop" or
"v" style). Data-parallel replicas of a pipeline run the same program.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import ClassVar

from sim.metrics import iterations_needed
from sim.schedules.action import STEP, Action, Program
from sim.schedules.analysis import delay_steps as program_delay_steps
from sim.schedules.errors import ScheduleError

__all__ = ["VERSION_RULES", "Schedule", "ScheduleError", "with_steps_every"]

VERSION_RULES = ("single", "stashed", "two_versions")
"""The values of :attr:`Schedule.version_rule`: how a replay keeps a stage's weights."""


class Schedule(ABC):
    """A pipeline schedule for ``stages`` stages and ``microbatches`` micro-batches per iteration.

    Args:
        stages: pipeline depth ``p`` (ranks).
        microbatches: micro-batches per iteration ``m``.
        virtual_stages: stage chunks per rank ``v``; None takes the class's
            ``min_virtual_stages``.
        fewer_microbatches: accept ``m < p`` where the class's order is defined for it
            (``defined_for_fewer_microbatches``), as Megatron and DeepSpeed run 1F1B; torch's
            rule (refuse) otherwise.

    Class attributes:
        name: registry name (``gpipe``, ``1f1b``, ``interleaved_1f1b``, ...).
        synchronous: True when the pipeline flushes at every optimizer step (the update equals
            minibatch SGD over ``microbatches`` micro-batches).
        needs_m_ge_p: True when the schedule requires ``microbatches >= stages``.
        defined_for_fewer_microbatches: True when its order is defined for ``m < p`` although
            torch's constructor refuses it (1F1B: Megatron's warm-up ``min(p - s - 1, m)``);
            a framework that runs it so passes ``fewer_microbatches=True``.
        min_virtual_stages, max_virtual_stages: the range of ``v`` it accepts (None: no upper
            bound).
        stage_style: ``"loop"`` (stage ``s`` on rank ``s mod p``) or ``"v"`` (rank ``r`` holds
            stages ``r`` and ``2p-1-r``), torch ``generate_stage_to_rank_mapping``.
        splits_backward: True when its programs use I and W (backward split).
        weight_rule: which weights a micro-batch's backward uses on a stage (the replay's
            numerics reference, ``backends.torch.replay.reference``): ``"forward"``, the version its
            forward used (with a flush there is only one; PipeDream stashes it);
            ``"latest"``, the newest at the backward's time (PipeMare, no stash);
            ``"previous_iteration"``, ``W(k-1)`` for every micro-batch of iteration ``k``, in
            the forward and the backward (PipeDream-2BW).
        master_copy_versions: True when its extra weight versions are fp32 master copies (4
            bytes per parameter), not copies of the training-dtype weights
            (:func:`sim.memory.states.version_bytes_per_param`).
        version_rule: how a replay keeps a stage's weights (one of :data:`VERSION_RULES`;
            ``backends.torch.replay.versions`` reads it): ``"single"``, one copy updated in
            place at every STEP (every flushed schedule, where no micro-batch is in flight at a
            STEP, and PipeMare, whose backward uses the updated weights); ``"stashed"``, a copy
            per version that a micro-batch in flight still needs, forwards on the newest
            (PipeDream's weight stashing, schedules.md §2.2); ``"two_versions"``, the two newest,
            every micro-batch of iteration ``k`` on ``W(k-1)`` (PipeDream-2BW, §2.4). It says
            what :attr:`weight_rule` and :attr:`synchronous` imply (tests/test_schedules.py).
        torch_class: the class of ``torch.distributed.pipelining`` that runs this schedule
            itself from one stage per rank (``"ScheduleGPipe"``, ``"Schedule1F1B"``: the
            replay's ``backend="torch"``), or None where torch has none for it; the schedules
            of several stage chunks per rank replay through torch's
            ``_PipelineScheduleRuntime`` loading our CSV instead (schedules.md §4.2).

    Raises:
        ScheduleError: ``stages < 1``, ``microbatches < 1``, ``microbatches < stages`` where
            the schedule needs ``m >= p``, ``virtual_stages`` outside the class's range, or an
            ``m`` the schedule's torch constructor rejects (:meth:`check`).
    """

    name: ClassVar[str]
    synchronous: ClassVar[bool] = True
    needs_m_ge_p: ClassVar[bool] = False
    defined_for_fewer_microbatches: ClassVar[bool] = False
    description: ClassVar[str] = ""
    min_virtual_stages: ClassVar[int] = 1
    max_virtual_stages: ClassVar[int | None] = 1
    stage_style: ClassVar[str] = "loop"
    splits_backward: ClassVar[bool] = False
    weight_rule: ClassVar[str] = "forward"
    master_copy_versions: ClassVar[bool] = False
    version_rule: ClassVar[str] = "single"
    torch_class: ClassVar[str | None] = None
    overlaps_pairs: ClassVar[bool] = False
    """Whether the program holds ``OVERLAP_F_B`` pairs (a forward and a backward of two chunks
    the runtime may overlap: DualPipeV)."""

    def __init__(
        self,
        stages: int,
        microbatches: int,
        virtual_stages: int | None = None,
        *,
        fewer_microbatches: bool = False,
    ):
        if stages < 1:
            raise ScheduleError(f"stages must be >= 1, got {stages}")
        if microbatches < 1:
            raise ScheduleError(f"microbatches must be >= 1, got {microbatches}")
        if microbatches < stages and not self.accepts_fewer_microbatches(fewer_microbatches):
            raise ScheduleError(
                f"{self.name} needs microbatches >= stages, got m={microbatches} < p={stages}; "
                f"raise the number of micro-batches or use fewer stages"
            )
        v = self.min_virtual_stages if virtual_stages is None else virtual_stages
        hi = self.max_virtual_stages
        if v < self.min_virtual_stages or (hi is not None and v > hi):
            want = (
                f"exactly {hi}"
                if hi == self.min_virtual_stages
                else (
                    f">= {self.min_virtual_stages}"
                    if hi is None
                    else f"{self.min_virtual_stages}..{hi}"
                )
            )
            raise ScheduleError(
                f"{self.name} needs virtual_stages (stage chunks per rank) {want}, got {v}"
            )
        self.stages = stages
        self.microbatches = microbatches
        self.virtual_stages = v
        self.check()

    @classmethod
    def accepts_fewer_microbatches(cls, fewer_microbatches: bool) -> bool:
        """Whether ``m < p`` is accepted: always unless ``needs_m_ge_p``; then only with
        ``fewer_microbatches`` where the order is defined for it."""
        return not cls.needs_m_ge_p or (fewer_microbatches and cls.defined_for_fewer_microbatches)

    def check(self) -> None:
        """Further constraints on ``(p, v, m)`` (torch's constructor checks); none by default.

        Raises:
            ScheduleError: the combination is not accepted.
        """
        return None

    @property
    def num_stages(self) -> int:
        """Stages (model chunks) in the pipeline: ``p * v``."""
        return self.stages * self.virtual_stages

    def stage_rank(self, stage: int) -> int:
        """The rank that runs ``stage`` (torch ``generate_stage_to_rank_mapping``).

        "loop": ``stage mod p``; "v": the V shape, ``stage`` for the first ``p`` stages, then
        back down (stage ``2p-1-r`` on rank ``r``), and so on for more chunks.

        Example:
            >>> from sim.schedules.registry import get_schedule
            >>> [get_schedule("zbv_zero_bubble")(4, 8).stage_rank(s) for s in range(8)]
            [0, 1, 2, 3, 3, 2, 1, 0]
        """
        p = self.stages
        chunk, pos = divmod(stage, p)
        if self.stage_style == "v" and chunk % 2 == 1:
            return p - 1 - pos
        return pos

    def rank_stages(self, rank: int) -> list[int]:
        """The stages ``rank`` runs, in increasing order (``[rank]`` when ``v = 1``)."""
        return [s for s in range(self.num_stages) if self.stage_rank(s) == rank]

    @abstractmethod
    def program(self, iterations: int = 1) -> Program:
        """Per-rank action lists for ``iterations`` optimizer steps, ``STEP`` actions included.

        Returns:
            ``program[r]`` is the ordered list of :class:`Action` run by rank ``r`` (stage
            ``r`` when ``v = 1``); every stage runs F and a backward (B, or I then W) for
            micro-batches ``0 .. iterations*microbatches-1`` and
            ``optimizer_steps(iterations)`` STEP actions of its own (``iterations`` unless a
            schedule steps more often, as PipeDream does).
        """

    @abstractmethod
    def weight_versions(self, stage: int) -> int:
        """Weight versions stage ``stage`` keeps in memory (schedules.md §1)."""

    def optimizer_steps(self, iterations: int) -> int:
        """STEP actions per stage in ``program(iterations)``: one per iteration by default."""
        return iterations

    def steady_state_iterations(self) -> int:
        """Iterations after which every steady-state pattern has occurred on every stage.

        Used to measure quantities such as :meth:`delay_steps` from a finite program; the same
        rule sets how many iterations the engine simulates
        (:func:`sim.metrics.iterations_needed`).
        """
        return iterations_needed(
            self.stages, self.microbatches, self.synchronous, self.fill_microbatches()
        )

    def fill_microbatches(self) -> int:
        """Forwards stage 0 runs before its first backward in steady state, at most: ``p`` for
        the 1F1B-shaped orders (PipeMare overrides it); sets how long the pipeline fills."""
        return self.stages

    def delay_steps(self, stage: int) -> int:
        """Optimizer steps between a micro-batch's F and B at ``stage`` (staleness), at most.

        Measured from :meth:`program` over :meth:`steady_state_iterations` iterations with
        :func:`sim.schedules.analysis.delay_steps`; 0 for every flushed schedule.
        """
        return program_delay_steps(self.program(self.steady_state_iterations()), stage)

    def shared_program(self, iterations: int = 1) -> Program:
        """:meth:`program` built once per schedule (class, ``p``, ``m``, ``v`` and options)
        and ``iterations`` in this process, and shared by every caller (the grid's points,
        their bounds and staleness): read it, do not modify it."""
        key = (type(self), tuple(sorted(vars(self).items())), iterations)
        out = _PROGRAMS.get(key)
        if out is None:
            if len(_PROGRAMS) >= _PROGRAMS_KEPT:
                _PROGRAMS.pop(next(iter(_PROGRAMS)))
            out = _PROGRAMS[key] = self.program(iterations)
        return out

    def period_microbatches(self) -> int:
        """Micro-batches after which a rank's steady-state actions repeat (up to micro-batch
        numbers): 1 for the 1F1B-shaped orders, a round for the interleaved ones
        (:mod:`sim.engine.periodic` inserts whole periods of at least this many)."""
        return 1

    def with_microbatches(self, microbatches: int) -> Schedule:
        """This schedule (same ``p``, ``v`` and options) with ``microbatches`` per iteration.

        Raises:
            ScheduleError: ``microbatches`` is below 1, below ``p`` where the schedule needs
                ``m >= p``, or rejected by :meth:`check`.

        Example:
            >>> from sim.schedules.one_f_one_b import OneFOneB
            >>> OneFOneB(4, 64).with_microbatches(12)
            OneFOneB(stages=4, microbatches=12)
        """
        if microbatches < 1 or (microbatches < self.stages and self.needs_m_ge_p):
            raise ScheduleError(f"{self.name} cannot run {microbatches} micro-batches")
        out = copy.copy(self)
        out.microbatches = microbatches
        out.check()
        return out

    def one_iteration(self) -> Program:
        """The compute actions of one iteration (no STEP), as torch's CSV holds them."""
        return [[a for a in rank if a.op != STEP] for rank in self.program(1)]

    def __repr__(self) -> str:
        extra = f", virtual_stages={self.virtual_stages}" if self.virtual_stages > 1 else ""
        return (
            f"{type(self).__name__}(stages={self.stages}, microbatches={self.microbatches}{extra})"
        )


_PROGRAMS: dict[tuple, Program] = {}
_PROGRAMS_KEPT = 64
"""Programs :meth:`Schedule.shared_program` keeps (the oldest goes first): a grid's points
share a few schedules each."""


def with_steps_every(order: list[Action], every: int) -> list[Action]:
    """Insert a STEP action after every ``every``-th backward (B or W) in ``order``.

    Args:
        order: one rank's compute actions.
        every: backwards per optimizer step (1 for PipeDream, m for 2BW, PipeMare and the
            flushed schedules).

    Example:
        >>> order = [Action(0, op, mb) for mb in range(2) for op in "FB"]
        >>> [str(a) for a in with_steps_every(order, 2)]
        ['0F0', '0B0', '0F1', '0B1', '0STEP0']
    """
    out: list[Action] = []
    done = 0
    stage = order[0].stage if order else 0
    for action in order:
        out.append(action)
        if action.op in ("B", "W"):
            done += 1
            if done % every == 0:
                out.append(Action(stage, STEP, done // every - 1))
    return out

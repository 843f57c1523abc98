"""Base of the schedules with several stage chunks per rank (virtual stages), torch 2.13 style.

torch's multi-stage schedules (``ScheduleLoopedBFS``, ``ScheduleInterleaved1F1B``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``; all
``_PipelineScheduleRuntime`` subclasses in ``torch/distributed/pipelining/schedules.py``) compute
``pipeline_order[rank]``: one iteration's compute actions per rank, ``None`` for idle padding
(schedules.md §2.8, §4.1). A subclass here implements :meth:`MultiStageSchedule.rank_order`, the
same list without the ``None`` padding (a :data:`Program` is list order, not time: §5), and
this base repeats it per iteration (the pipeline flushes) and appends one ``STEP`` per local
stage after each iteration (torch inserts ``REDUCE_GRAD`` per stage in the same place,
``_add_reduce_grad``).

torch's ``OVERLAP_F_B`` pair (DualPipeV) is kept as a pair (:meth:`Action.pair`):
``_PipelineScheduleRuntime`` receives the inputs of both sub-actions before it, runs them one
after the other (``for sub_a in action.sub_actions: _perform_action(sub_a)``) and sends both
outputs after; schedules.md §3 costs a pair as the serial sum of its two actions.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from sim.schedules.action import STEP, Action, Program
from sim.schedules.base import Schedule


def shift(order: list[Action], first: int) -> list[Action]:
    """``order`` with every micro-batch index moved up by ``first`` (iteration ``k``: ``k*m``)."""
    return [a.shifted(first) for a in order]


class MultiStageSchedule(Schedule):
    """A flushed schedule whose ranks hold ``v >= 2`` stage chunks; one weight version.

    Subclasses set ``name``, ``description``, the ``virtual_stages`` range, ``stage_style`` and
    ``splits_backward``, and implement :meth:`rank_order`.
    """

    synchronous: ClassVar[bool] = True
    min_virtual_stages: ClassVar[int] = 2
    max_virtual_stages: ClassVar[int | None] = None

    @abstractmethod
    def rank_order(self, rank: int) -> list[Action]:
        """Rank ``rank``'s compute actions for one iteration (micro-batches ``0 .. m-1``), in
        torch 2.13's order with its ``None`` padding removed."""

    def program(self, iterations: int = 1) -> Program:
        """Per-rank actions of ``iterations`` flushed iterations, each followed by one STEP per
        local stage (in increasing stage order, numbered by iteration)."""
        m = self.microbatches
        out: Program = []
        for rank in range(self.stages):
            order = self.rank_order(rank)
            local = self.rank_stages(rank)
            acts: list[Action] = []
            for k in range(iterations):
                acts += shift(order, k * m)
                acts += [Action(s, STEP, k) for s in local]
            out.append(acts)
        return out

    def weight_versions(self, stage: int) -> int:
        """One version: the flush applies every update before the next forward (§1)."""
        return 1

"""The base of torch's interleaved generators (``_calculate_single_rank_operations`` of
``ScheduleInterleaved1F1B`` and ``ScheduleInterleavedZeroBubble``, torch 2.13; schedules.md
§2.6-§2.8): ``v`` chunks per rank run depth-first in rounds of ``m // max(1, m // p)``
micro-batches, ``m`` a multiple of the round.

A subclass says how many warm-up forwards (``warmup_factor``: 2 for 1F1B, 1 for zero bubble)
and whether the backward splits into I and W (:func:`~sim.schedules.rank_ops.interleaved_rank_ops`).
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Action
from sim.schedules.multi_stage import MultiStageSchedule
from sim.schedules.rank_ops import interleaved_rank_ops, rounds_check


class InterleavedRounds(MultiStageSchedule):
    """A torch interleaved schedule (module doc); not registered itself."""

    warmup_factor: ClassVar[int] = 2
    """torch's ``multiply_factor`` of the warm-up's ``p - 1 - r`` term."""

    def check(self) -> None:
        """torch's rounds check (:func:`~sim.schedules.rank_ops.rounds_check`)."""
        rounds_check(self.name, self.stages, self.microbatches)

    def period_microbatches(self) -> int:
        """A round: ``m // max(1, m // p)`` micro-batches (each chunk in turn runs a round)."""
        return rounds_check(self.name, self.stages, self.microbatches)

    def rank_order(self, rank: int) -> list[Action]:
        return interleaved_rank_ops(
            rank,
            self.stages,
            self.virtual_stages,
            self.microbatches,
            factor=self.warmup_factor,
            zero_bubble=self.splits_backward,
            name=self.name,
        )

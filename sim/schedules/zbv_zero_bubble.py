"""ZB-V (Zero Bubble, Qi et al. ICLR'24 §6) as torch 2.13 orders it.

torch ``ScheduleZBVZeroBubble._calculate_single_rank_operations`` (schedules.md §2.7, §2.8):
exactly two stage chunks per rank in a V (rank ``r`` holds stages ``r`` and ``2p-1-r``, so
the last rank holds the two middle stages and the loss stage is on rank 0). With
``n = max(2p-1, m)`` micro-batches it emits ``2(p-r)-1`` F of chunk 0; ``r`` pairs
[F chunk 1, F chunk 0]; ``p-r`` triples [F, I, W] of chunk 1; the steady phase [F, I, W] of
chunk 0 then of chunk 1; the cool-down I's and W's; then drops every action whose micro-batch
is ``>= m``.

Zero bubble when t_F = t_I = t_W; peak ``2p`` chunk-micro-batches (``p`` full stages) on every
rank; twice 1F1B's point-to-point volume (schedules.md §1, §3).
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Action
from sim.schedules.multi_stage import MultiStageSchedule


class ZBVZeroBubble(MultiStageSchedule):
    """ZB-V: two chunks per rank in a V, backward split into I and W; any ``m >= 1``.

    Example:
        >>> [str(a) for a in ZBVZeroBubble(1, 2).rank_order(0)]
        ['0F0', '1F0', '1I0', '1W0', '0F1', '0I0', '0W0', '1F1', '1I1', '1W1', '0I1', '0W1']
    """

    name: ClassVar[str] = "zbv_zero_bubble"
    max_virtual_stages: ClassVar[int | None] = 2
    stage_style: ClassVar[str] = "v"
    splits_backward: ClassVar[bool] = True
    description: ClassVar[str] = "ZB-V (torch ScheduleZBVZeroBubble): 2 chunks per rank in a V"

    def rank_order(self, rank: int) -> list[Action]:
        p, m = self.stages, self.microbatches
        n = max(2 * p - 1, m)
        c0, c1 = rank, 2 * p - 1 - rank
        count = {(c, op): 0 for c in (c0, c1) for op in "FIW"}
        out: list[Action] = []

        def emit(stage: int, op: str) -> None:
            out.append(Action(stage, op, count[(stage, op)]))
            count[(stage, op)] += 1

        for _ in range(2 * (p - rank) - 1):
            emit(c0, "F")
        for _ in range(rank):
            emit(c1, "F")
            emit(c0, "F")
        for _ in range(p - rank):
            for op in "FIW":
                emit(c1, op)
        while count[(c1, "F")] < count[(c0, "F")] or count[(c0, "F")] < n:
            if count[(c0, "F")] < n:
                emit(c0, "F")
            emit(c0, "I")
            emit(c0, "W")
            for op in "FIW":
                emit(c1, op)
        for _ in range(rank):
            emit(c0, "I")
            emit(c1, "I")
        for _ in range(p - rank):
            emit(c0, "I")
            emit(c0, "W")
        for stage in (c1, c0):
            while count[(stage, "W")] < count[(stage, "I")]:
                emit(stage, "W")
        return [a for a in out if a.microbatch < m]

"""LoopedBFS (breadth-first pipeline parallelism, arXiv 2211.05953) as torch 2.13 orders it.

torch ``ScheduleLoopedBFS._calculate_single_rank_operations`` (schedules.md §2.8): rank ``r``
holds stages ``r, r+p, ..., r+(v-1)p``; it runs every forward of its first local stage for all
``m`` micro-batches, then of the next local stage, and so on; then every backward of its local
stages in **reverse** stage order and **reverse** micro-batch order. Like GPipe it keeps all
``m`` micro-batches of every chunk in flight (``m * v`` chunk-micro-batches per rank).
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Action
from sim.schedules.multi_stage import MultiStageSchedule


class LoopedBFS(MultiStageSchedule):
    """Breadth-first: all F per local stage, then all B in reverse; ``v >= 2`` chunks per rank.

    Example:
        >>> [str(a) for a in LoopedBFS(2, 2).rank_order(1)]
        ['1F0', '1F1', '3F0', '3F1', '3B1', '3B0', '1B1', '1B0']
    """

    name: ClassVar[str] = "looped_bfs"
    description: ClassVar[str] = (
        "LoopedBFS (torch ScheduleLoopedBFS): all F per local chunk, then all B in reverse"
    )

    def rank_order(self, rank: int) -> list[Action]:
        local = self.rank_stages(rank)
        mbs = range(self.microbatches)
        forwards = [Action(s, "F", i) for s in local for i in mbs]
        backwards = [Action(s, "B", i) for s in reversed(local) for i in reversed(mbs)]
        return forwards + backwards

"""DualPipeV (DeepSeek-V3 DualPipe, arXiv 2412.19437, in its V form) as torch 2.13 orders it.

torch ``ScheduleDualPipeV._calculate_single_rank_operations`` (schedules.md §2.8): two chunks
per rank in a V (rank ``r``: stages ``r`` and ``2p-1-r``), ``m >= 2p``. Eight steps with
``c0``/``c1`` the two local chunks: (1) ``2(p-r-1)`` F c0; (2) ``r+1`` [F c0, F c1];
(3) ``p-r-1`` [I c1, pending W, F c1]; (4) ``m-2p+r+1`` pairs [(F c0; B c1), (F c1; B c0)]
(the last rank's first pair not overlapped); (5) ``p-r-1`` [B c1, (F c1; B c0)]; (6) ``r+1``
[B c1, B c0], switching to I from the middle on; (7) ``p-r-1`` [pending W, B or I c0];
(8) ``r+1`` pending W. A pending W is the oldest I without its W (a FIFO).

torch's ``OVERLAP_F_B`` pairs are kept (:meth:`~sim.schedules.action.Action.pair`); like
torch's runtime, the engine waits for both inputs, runs F then B serially and sends both
outputs after (:mod:`sim.schedules.multi_stage`), unless ``sweep.ep_overlap`` asks for the
gain DualPipe was designed for: a forward's expert-parallel all-to-alls under a backward's
compute and vice versa (:mod:`sim.engine.overlap`). Measured peak ``2p+1``
chunk-micro-batches per rank (schedules.md §3).
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Action
from sim.schedules.errors import ScheduleError
from sim.schedules.multi_stage import MultiStageSchedule


class _Emitter:
    """torch's counters: B and I share one index per stage; W's follow a FIFO of I's."""

    def __init__(self) -> None:
        self.out: list[Action] = []
        self.count: dict[tuple[int, str], int] = {}
        self.pending: list[tuple[int, int]] = []

    def add(self, stage: int, op: str) -> None:
        self.out.append(self._next(stage, op))

    def overlap(self, forward_stage: int, backward_stage: int) -> None:
        """torch's ``add_overlap_f_b``: (F, B) as one OVERLAP_F_B action."""
        self.out.append(
            Action.pair(self._next(forward_stage, "F"), self._next(backward_stage, "B"))
        )

    def _next(self, stage: int, op: str) -> Action:
        key = (stage, "I" if op == "B" else op)
        mb = self.count.get(key, 0)
        self.count[key] = mb + 1
        if op == "I":
            self.pending.append((stage, mb))
        return Action(stage, op, mb)

    def weight(self) -> None:
        if self.pending:
            stage, mb = self.pending.pop(0)
            self.out.append(Action(stage, "W", mb))


class DualPipeV(MultiStageSchedule):
    """DualPipeV: two chunks per rank in a V; B, or I and W in the tail; needs ``m >= 2p``.

    Example:
        >>> [str(a) for a in DualPipeV(1, 2).rank_order(0)]
        ['0F0', '1F0', '0F1', '1B0', '(1F1;0B0)OVERLAP_F_B', '1B1', '0I1', '0W1']
    """

    name: ClassVar[str] = "dualpipe_v"
    max_virtual_stages: ClassVar[int | None] = 2
    stage_style: ClassVar[str] = "v"
    splits_backward: ClassVar[bool] = True
    description: ClassVar[str] = "DualPipeV (torch ScheduleDualPipeV): V, F/B pairs, m >= 2p"
    overlaps_pairs: ClassVar[bool] = True

    def check(self) -> None:
        """torch's constructor check: at least as many micro-batches as stages (``2p``).

        Raises:
            ScheduleError: ``m < 2p``.
        """
        if self.microbatches < self.num_stages:
            raise ScheduleError(
                f"{self.name} needs microbatches >= stages (2p = {self.num_stages}), "
                f"got m={self.microbatches}"
            )

    def rank_order(self, rank: int) -> list[Action]:
        p, m = self.stages, self.microbatches
        c0, c1 = rank, 2 * p - 1 - rank
        e = _Emitter()
        for _ in range(2 * (p - rank - 1)):
            e.add(c0, "F")
        for _ in range(rank + 1):
            e.add(c0, "F")
            e.add(c1, "F")
        for _ in range(p - rank - 1):
            e.add(c1, "I")
            e.weight()
            e.add(c1, "F")
        for i in range(m - 2 * p + rank + 1):
            if i == 0 and rank == p - 1:  # torch: not overlapped, to shrink the bubble
                e.add(c0, "F")
                e.add(c1, "B")
            else:
                e.overlap(c0, c1)
            e.overlap(c1, c0)
        for _ in range(p - rank - 1):
            e.add(c1, "B")
            e.overlap(c1, c0)
        zb = False
        half = (rank + 1) // 2
        for i in range(rank + 1):
            zb = zb or (i == half and rank % 2 == 1)
            e.add(c1, "I" if zb else "B")
            zb = zb or (i == half and rank % 2 == 0)
            e.add(c0, "I" if zb else "B")
        for _ in range(p - rank - 1):
            e.weight()
            e.add(c0, "I" if zb else "B")
        for _ in range(rank + 1):
            e.weight()
        return e.out

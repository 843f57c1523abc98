"""GPipe: all forwards, then all backwards, then the optimizer step (flush every iteration).

torch ``ScheduleGPipe._step_microbatches`` (schedules.md §2.1; torch 2.13 ``schedules.py``
L872–960) runs F for micro-batches ``0 .. m-1``, then B in **increasing** micro-batch order (not
reversed), then ``perform_reduce_grad``. The Appendix table "ScheduleGPipe, p=4, m=8" is this
order. Every stage holds ``m`` micro-batches of activations at the flush.
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Action, Program
from sim.schedules.base import Schedule, with_steps_every


def gpipe_order(stage: int, first: int, count: int) -> list[Action]:
    """F for ``first .. first+count-1``, then B in the same increasing order (§2.1)."""
    mbs = range(first, first + count)
    return [Action(stage, "F", i) for i in mbs] + [Action(stage, "B", i) for i in mbs]


class GPipe(Schedule):
    """GPipe with torch's backward order; one weight version; ``m`` in flight on every stage.

    Example:
        >>> [str(a) for a in GPipe(2, 2).program(1)[1]]
        ['1F0', '1F1', '1B0', '1B1', '1STEP0']
    """

    name: ClassVar[str] = "gpipe"
    synchronous: ClassVar[bool] = True
    needs_m_ge_p: ClassVar[bool] = False
    description: ClassVar[str] = "GPipe (torch ScheduleGPipe): all F, then all B, flush"
    torch_class: ClassVar[str | None] = "ScheduleGPipe"

    def program(self, iterations: int = 1) -> Program:
        m = self.microbatches
        return [
            with_steps_every([a for k in range(iterations) for a in gpipe_order(s, k * m, m)], m)
            for s in range(self.stages)
        ]

    def weight_versions(self, stage: int) -> int:
        """One version (schedules.md §1)."""
        return 1

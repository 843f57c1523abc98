"""PipeDream-2BW: 1F1B without flushes, gradients coalesced over ``m`` micro-batches, 2 versions.

Source: msr-fiddle/pipedream@pipedream_2bw ``forward_backward_pipelining_no_flushes``
(schedules.md §2.4). The 1F1B order runs over all ``iterations * m`` micro-batches with the
warm-up only in the first iteration and the cool-down only in the last; the pipeline never
drains. Each stage applies one optimizer step after every ``m``-th backward (gradient
coalescing), so the update is ``W(t+1) = W(t) - lr * grad f(W(t-1))``: at most one step stale.

Two weight versions per stage (the newer one, and the older one that in-flight micro-batches
started on). That bound holds only when ``m >= p``: then at most one STEP lies between any
micro-batch's F and B on a stage (``p - s - 1 <= m - 1`` backwards run in between).
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Program
from sim.schedules.base import Schedule
from sim.schedules.one_f_one_b import unrolled_program


class PipeDream2BW(Schedule):
    """PipeDream-2BW (double-buffered weights); asynchronous; needs ``m >= p``.

    Peak ``p - s`` micro-batches in flight on stage ``s`` (as 1F1B); ``delay_steps <= 1``.

    Example:
        >>> [str(a) for a in PipeDream2BW(2, 2).program(2)[0]]
        ['0F0', '0F1', '0B0', '0F2', '0B1', '0STEP0', '0F3', '0B2', '0B3', '0STEP1']
    """

    name: ClassVar[str] = "pipedream_2bw"
    synchronous: ClassVar[bool] = False
    weight_rule: ClassVar[str] = "previous_iteration"
    version_rule: ClassVar[str] = "two_versions"
    needs_m_ge_p: ClassVar[bool] = True
    description: ClassVar[str] = "PipeDream-2BW: 1F1B without flush, step every m backwards"
    master_copy_versions: ClassVar[bool] = True
    """2BW keeps two fp32 master copies, ``fp32_from_fp16_groups`` and its ``_copy``
    (msr-fiddle/pipedream@d6e2538 ``megatron/megatron/optimizer/optimizer.py``;
    schedules.md §2.4)."""

    def program(self, iterations: int = 1) -> Program:
        m = self.microbatches
        return unrolled_program(self.stages, iterations * m, m)

    def weight_versions(self, stage: int) -> int:
        """Two versions, current and shadow (schedules.md §2.4)."""
        return 2

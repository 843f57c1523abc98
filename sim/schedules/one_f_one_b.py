"""1F1B (PipeDream-Flush, DAPPLE's early backward) exactly as torch runs it.

torch ``Schedule1F1B._step_microbatches`` (schedules.md §2.3; torch 2.13 ``schedules.py``
L1026–1176) on stage ``s`` of ``p``: ``min(m, p - s)`` warm-up forwards, then a *1B1F* loop
(backward first, then forward) until every forward is issued, then the remaining backwards as
cool-down, then ``perform_reduce_grad`` (our STEP). The pipeline flushes every iteration.

Megatron counts the same order differently (warm-up ``p - s - 1`` then 1F1B); the action lists
are identical. :func:`one_f_one_b_order` is also the unrolled order of the asynchronous
schedules (PipeDream, PipeDream-2BW, PipeMare), which run it over all micro-batches at once.
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Action, Program
from sim.schedules.base import Schedule, with_steps_every


def one_f_one_b_order(stage: int, stages: int, first: int, count: int) -> list[Action]:
    """Torch's 1F1B order on one stage for micro-batches ``first .. first+count-1``.

    Args:
        stage: stage index ``s`` (rank ``s`` runs it).
        stages: pipeline depth ``p``.
        first: index of the first micro-batch.
        count: number of micro-batches (``m`` for one flushed iteration; ``iterations*m`` for
            the unrolled asynchronous schedules).

    Returns:
        ``min(count, p-s)`` forwards, then alternating B, F while forwards remain, then the
        remaining backwards (schedules.md §2.3). Peak in flight is ``min(count, p-s)``.

    Example:
        >>> [str(a) for a in one_f_one_b_order(1, 2, 0, 3)]
        ['1F0', '1B0', '1F1', '1B1', '1F2', '1B2']
    """
    warmup = min(count, stages - stage)
    order = [Action(stage, "F", first + i) for i in range(warmup)]
    for i in range(count):
        order.append(Action(stage, "B", first + i))
        if warmup + i < count:
            order.append(Action(stage, "F", first + warmup + i))
    return order


def unrolled_program(stages: int, total: int, every: int) -> Program:
    """The asynchronous schedules' program: one 1F1B order over ``total`` micro-batches.

    Warm-up only at the start and cool-down only at the end (no flush in between), a STEP after
    every ``every``-th backward on each stage (schedules.md §2.2, §2.4, §6.2).

    Args:
        stages: pipeline depth ``p``.
        total: micro-batches over the whole run (``iterations * m``).
        every: backwards per optimizer step (1 for PipeDream, ``m`` for 2BW and PipeMare).
    """
    return [with_steps_every(one_f_one_b_order(s, stages, 0, total), every) for s in range(stages)]


class OneFOneB(Schedule):
    """1F1B with a flush per iteration (PipeDream-Flush), torch ``Schedule1F1B``'s runtime order.

    One weight version; peak ``min(m, p - s)`` micro-batches in flight on stage ``s``; needs
    ``m >= p`` like torch's constructor (schedules.md §2.3, §5) unless built with
    ``fewer_microbatches=True``: Megatron (``forward_backward_pipelining_without_interleaving``,
    ``num_warmup_microbatches = min(p - rank - 1, m)``) and DeepSpeed (``TrainSchedule``, which
    skips invalid micro-batch ids) run ``m < p``, and :func:`one_f_one_b_order` is already their
    order then: every forward, then every backward, on the stages with ``p - s > m``.

    Example:
        >>> [str(a) for a in OneFOneB(2, 2).program(1)[0]]
        ['0F0', '0F1', '0B0', '0B1', '0STEP0']
    """

    name: ClassVar[str] = "1f1b"
    synchronous: ClassVar[bool] = True
    needs_m_ge_p: ClassVar[bool] = True
    defined_for_fewer_microbatches: ClassVar[bool] = True
    description: ClassVar[str] = "1F1B / PipeDream-Flush (torch Schedule1F1B), flush per iteration"
    torch_class: ClassVar[str | None] = "Schedule1F1B"

    def program(self, iterations: int = 1) -> Program:
        m = self.microbatches
        return [
            with_steps_every(
                [a for k in range(iterations) for a in one_f_one_b_order(s, self.stages, k * m, m)],
                m,
            )
            for s in range(self.stages)
        ]

    def weight_versions(self, stage: int) -> int:
        """One version: the flush applies every update before the next forward (§1)."""
        return 1

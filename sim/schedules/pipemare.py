"""PipeMare (MLSys'21, arXiv 1910.05124): asynchronous pipeline, no weight stashing, no flush.

No public code is known; the paper's claims are **unverified** (schedules.md §2.5). The paper
targets a fine-grained dataflow pipeline in which every stage runs a forward and a backward in
the same time slot and a new micro-batch enters every slot, so a micro-batch's forward and its
backward at stage ``i`` are about ``2(P - i) + 1`` micro-batches apart, and the weights its
forward read are ``tau_i = ceil((2(P - i) + 1) / N)`` optimizer steps old when its gradient is
applied (``N`` micro-batches per step; read with 0-based ``i = s`` as schedules.md §1 and
issue 9 do: :meth:`PipeMare.paper_delay_steps`).

A GPU runs one op at a time, so a 1F1B order keeps only ``p - s`` micro-batches in flight and
its delay is ``ceil((p - s - 1) / m)``, about half the paper's (what this module did before).
We reproduce the paper's delay instead: stage ``s`` runs ``K_s = 2(p - s) + 2`` warm-up
forwards, then alternates one backward and one forward (torch's 1B1F loop), with no flush and
a STEP after every ``m``-th backward. Between micro-batch ``j``'s F and B the stage then runs
the backwards of the ``K_s - 1 = 2(p - s) + 1`` micro-batches before it, which cross
``ceil((2(p - s) + 1) / m)`` STEPs in the worst alignment: :meth:`Schedule.delay_steps`
measures exactly the paper's ``tau_s`` (one fewer warm-up forward cannot: with ``K`` in flight
at most ``K - 1`` backwards lie between a micro-batch's F and B).

Memory (schedules.md §1, §2.5; memory.md §3): one weight copy, no stashed versions (the
forward and the backward of a micro-batch may see different weights, the "discrepancy"), and
``K_s = 2(p - s) + 2`` micro-batches of activations in flight on stage ``s`` (the reference's
"~2(p - s) + 1", one more because F and B do not overlap on a GPU). The memory model reads the
in-flight count from the program (:func:`sim.schedules.analysis.peak_in_flight`), so stage 0
stashes ``2p + 2`` micro-batches where 1F1B stashes ``p``. The paper's fixes:

* T1, learning-rate rescheduling: per-stage step size ``alpha_k * tau_i ** -p_k`` (no memory);
* T2, discrepancy correction: an EMA "velocity" of the weight updates used to extrapolate the
  weights for the backward. It costs one extra weight-sized buffer per stage; construct with
  ``discrepancy_correction=True`` and :meth:`PipeMare.weight_versions` counts it.
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Action, Program
from sim.schedules.base import Schedule, with_steps_every


def warmup_forwards(stage: int, stages: int) -> int:
    """Forwards stage ``stage`` of ``stages`` runs before its first backward: ``2(p - s) + 2``
    (module doc)."""
    return 2 * (stages - stage) + 2


def pipemare_order(stage: int, stages: int, total: int) -> list[Action]:
    """Stage ``stage``'s compute actions over micro-batches ``0 .. total-1``: ``min(total, K_s)``
    forwards, then B, F alternating while forwards remain, then the remaining backwards.

    Example:
        >>> [str(a) for a in pipemare_order(0, 1, 6)]
        ['0F0', '0F1', '0F2', '0F3', '0B0', '0F4', '0B1', '0F5', '0B2', '0B3', '0B4', '0B5']
    """
    warmup = min(total, warmup_forwards(stage, stages))
    order = [Action(stage, "F", i) for i in range(warmup)]
    for i in range(total):
        order.append(Action(stage, "B", i))
        if warmup + i < total:
            order.append(Action(stage, "F", warmup + i))
    return order


class PipeMare(Schedule):
    """PipeMare: asynchronous, one weight copy, a STEP every ``m`` backwards; any ``m``.

    Stage ``s`` keeps ``2(p - s) + 2`` micro-batches in flight so that its staleness is the
    paper's ``ceil((2(p - s) + 1) / m)`` steps (module doc).

    Args:
        stages: pipeline depth ``p``.
        microbatches: micro-batches per optimizer step ``m``.
        discrepancy_correction: keep T2's velocity buffer (one extra weight-sized buffer).

    Example:
        >>> PipeMare(4, 2).delay_steps(0), PipeMare(4, 2).paper_delay_steps(0)
        (5, 5)
    """

    name: ClassVar[str] = "pipemare"
    synchronous: ClassVar[bool] = False
    weight_rule: ClassVar[str] = "latest"
    needs_m_ge_p: ClassVar[bool] = False
    description: ClassVar[str] = (
        "PipeMare: async, no stashing, 2(p-s)+2 in flight, step every m backwards"
    )

    def __init__(
        self,
        stages: int,
        microbatches: int,
        virtual_stages: int | None = None,
        *,
        discrepancy_correction: bool = False,
    ):
        super().__init__(stages, microbatches, virtual_stages)
        self.discrepancy_correction = discrepancy_correction

    def program(self, iterations: int = 1) -> Program:
        total, m = iterations * self.microbatches, self.microbatches
        return [
            with_steps_every(pipemare_order(s, self.stages, total), m) for s in range(self.stages)
        ]

    def weight_versions(self, stage: int) -> int:
        """1, or 2 with T2's velocity buffer (schedules.md §1, §2.5)."""
        return 2 if self.discrepancy_correction else 1

    def fill_microbatches(self) -> int:
        """Stage 0's warm-up, ``2p + 2`` forwards, before its first backward."""
        return warmup_forwards(0, self.stages)

    def paper_delay_steps(self, stage: int) -> int:
        """The paper's ``ceil((2(p - s) + 1) / m)`` (unverified, §2.5); equals
        :meth:`delay_steps` (module doc)."""
        return -(-(2 * (self.stages - stage) + 1) // self.microbatches)

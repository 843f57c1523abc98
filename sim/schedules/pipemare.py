"""PipeMare (MLSys'21, arXiv 1910.05124): asynchronous pipeline, no weight stashing, no flush.

No public code is known; the paper's claims are **unverified** (schedules.md §2.5). We model it
on GPUs as the unrolled asynchronous 1F1B order (as PipeDream, §2.2) with one optimizer step per
``m`` backwards (as 2BW, §2.4) and a single weight copy: the forward and the backward of a
micro-batch may see different weights (the "discrepancy"), which PipeMare corrects with

* T1, learning-rate rescheduling: per-stage step size ``alpha_k * tau_i ** -p_k`` (no memory);
* T2, discrepancy correction: an EMA "velocity" of the weight updates used to extrapolate the
  weights for the backward. It costs one extra weight-sized buffer per stage; construct with
  ``discrepancy_correction=True`` and :meth:`PipeMare.weight_versions` counts it.

Delay. The paper states ``tau_i = ceil((2(P - i) + 1) / N)`` optimizer steps at stage ``i`` of
``P`` with ``N`` micro-batches per minibatch (unverified; :meth:`PipeMare.paper_delay_steps`,
read with 0-based ``i = s`` as schedules.md §1 does). Its model is a fine-grained dataflow
pipeline that injects a new micro-batch every slot while older ones travel forward and back,
so about ``2(P - i) + 1`` micro-batches enter between a micro-batch's forward and its backward
at stage ``i``. Our GPU order is 1F1B: a stage starts a new forward only after finishing a
backward, so only ``p - s - 1`` micro-batches enter in between (``p - s`` in flight), and the
delay measured from the program (:meth:`Schedule.delay_steps`) is ``ceil((p - s - 1) / m)``:
roughly half the paper's, and 0 on the last stage where the paper gives 1.
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Program
from sim.schedules.base import Schedule
from sim.schedules.one_f_one_b import unrolled_program


class PipeMare(Schedule):
    """PipeMare: asynchronous 1F1B, one weight copy, a STEP every ``m`` backwards; any ``m``.

    Args:
        stages: pipeline depth ``p``.
        microbatches: micro-batches per optimizer step ``m``.
        discrepancy_correction: keep T2's velocity buffer (one extra weight-sized buffer).

    Example:
        >>> PipeMare(4, 2).delay_steps(0), PipeMare(4, 2).paper_delay_steps(0)
        (2, 5)
    """

    name: ClassVar[str] = "pipemare"
    synchronous: ClassVar[bool] = False
    needs_m_ge_p: ClassVar[bool] = False
    description: ClassVar[str] = "PipeMare: async 1F1B without stashing, step every m backwards"

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
        m = self.microbatches
        return unrolled_program(self.stages, iterations * m, m)

    def weight_versions(self, stage: int) -> int:
        """1, or 2 with T2's velocity buffer (schedules.md §1, §2.5)."""
        return 2 if self.discrepancy_correction else 1

    def paper_delay_steps(self, stage: int) -> int:
        """The paper's ``ceil((2(p - s) + 1) / m)`` (unverified, §2.5); see the module docstring."""
        return -(-(2 * (self.stages - stage) + 1) // self.microbatches)

"""PipeDream (SOSP'19): asynchronous 1F1B with weight stashing, an update after every backward.

Source: msr-fiddle/pipedream@pipedream ``runtime/runtime.py`` and
``main_with_runtime.py`` (schedules.md §2.2). Stage ``s`` runs ``p - s - 1`` warm-up forwards,
then strict 1F1B (F then B) with no flush, and ``optimizer.step()`` after every backward. Written
in torch's counting (warm-up ``p - s`` then 1B1F) this is the same action list, which is how
:func:`~sim.schedules.one_f_one_b.one_f_one_b_order` generates it.

Weight stashing keeps ``num_versions = warm-up + 1 = p - s`` versions on stage ``s``: the
backward of a micro-batch uses the version its forward used, which is ``p - s - 1`` updates old
when the backward runs. Here an optimizer step is a micro-batch, not a minibatch; an
"iteration" for throughput purposes is still ``m`` micro-batches, so ``program(iterations)``
runs ``iterations * m`` micro-batches and as many STEP actions.
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.action import Program
from sim.schedules.base import Schedule
from sim.schedules.one_f_one_b import unrolled_program


class PipeDream(Schedule):
    """PipeDream with weight stashing; asynchronous; any ``m``.

    Peak ``p - s`` micro-batches in flight and ``p - s`` weight versions on stage ``s``;
    ``delay_steps(s) == p - s - 1`` in steady state.

    Example:
        >>> [str(a) for a in PipeDream(2, 1).program(2)[0]]
        ['0F0', '0F1', '0B0', '0STEP0', '0B1', '0STEP1']
    """

    name: ClassVar[str] = "pipedream"
    synchronous: ClassVar[bool] = False
    needs_m_ge_p: ClassVar[bool] = False
    description: ClassVar[str] = "PipeDream: async 1F1B, weight stashing, step every backward"
    version_rule: ClassVar[str] = "stashed"

    def program(self, iterations: int = 1) -> Program:
        return unrolled_program(self.stages, iterations * self.microbatches, 1)

    def optimizer_steps(self, iterations: int) -> int:
        """One STEP per micro-batch: ``iterations * m``."""
        return iterations * self.microbatches

    def weight_versions(self, stage: int) -> int:
        """``p - s`` stashed versions (``num_versions = num_warmup_minibatches + 1``, §2.2)."""
        return self.stages - stage

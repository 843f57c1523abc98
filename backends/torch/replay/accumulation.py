"""Where and in which order a replay sums the gradient of one parameter at one optimizer step.

A replay's gradient of a parameter at step ``j`` is a sum of contributions, one per backward
(stage ``s``, micro-batch ``i``) that used the parameter and goes into step ``j``:

* on a rank, autograd adds each backward's contribution to ``p.grad`` in place, in the order
  the rank's program runs its backwards (``B``; ``W`` when the backward is split into ``I`` and
  ``W``; the ``B`` inside an ``OVERLAP_F_B``), whichever of the rank's stage chunks ran it;
  torch's runtimes then divide the sum by ``m`` (they backpropagate the unscaled loss,
  ``backends.torch.replay.torch_schedules``), ours scaled the loss before (``runtime``);
* a parameter several ranks hold (a tied embedding, :mod:`backends.torch.parallel.ties`) is then
  summed over the ranks by the all-reduce.

Floating-point addition is not associative: the same contributions summed in another order
differ by a few units in the last place (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., §4.2). The one-process reference
(:mod:`backends.torch.replay.reference`) sums them in the replay's order (:func:`total`), so a
correct replay matches it to the bit where the kernels are the same, instead of drifting a unit
in the last place per step, which a head tied to its embedding magnifies from step to step
(issue 30, item 2; ``tests/test_numerics.py``). Over ranks the order is ascending rank,
exact for two holders (``a + b == b + a``); gloo's ring over three or more holders sums each
chunk from another rank, which stays a rounding-level difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from backends.torch.replay.job import ReplayJob
from sim.schedules.action import STEP, Action
from sim.schedules.registry import get_schedule

Position = tuple[int, int, int]
"""``(rank, index of the action in the rank's program, index inside an OVERLAP_F_B)``."""


@dataclass(frozen=True)
class Accumulation:
    """Where each backward's weight gradient is summed in a replay (module docstring).

    Attributes:
        position: ``(stage, micro-batch) -> Position`` of the action adding its contribution.
        divisor: what a rank divides its sum by before the all-reduce (``m`` for torch's
            runtimes, 1 for ours, whose loss is scaled before the backward).
    """

    position: Mapping[tuple[int, int], Position]
    divisor: float


def _weight_backwards(program: Sequence[Action]) -> Iterable[tuple[int, int, Action]]:
    """``(index, sub-index, action)`` of the actions of ``program`` that add weight gradients."""
    for i, a in enumerate(program):
        for k, sub in enumerate(a.sub_actions or (a,)):
            if sub.op in ("B", "W"):
                yield i, k, sub


def accumulation(job: ReplayJob) -> Accumulation:
    """The :class:`Accumulation` of a replay job (its schedule, stages, micro-batches, virtual
    stages, iterations and backend).

    Raises:
        KeyError: an unknown schedule (as ``sim.schedules.registry.get_schedule``).
    """
    sched = get_schedule(job.schedule)(job.stages, job.microbatches, job.virtual_stages)
    total = job.warmup_iterations + job.iterations
    position: dict[tuple[int, int], Position] = {}
    for rank, program in enumerate(sched.program(total)):
        for i, k, a in _weight_backwards([a for a in program if a.op != STEP]):
            position[(a.stage, a.microbatch)] = (rank, i, k)
    divisor = float(job.microbatches) if job.backend == "torch" else 1.0
    return Accumulation(position, divisor)


def total(contributions: Sequence[tuple[Position, torch.Tensor]], divisor: float) -> torch.Tensor:
    """The gradient a replay applies: each rank's contributions summed in program order (and
    divided by ``divisor``), then the ranks' sums in ascending rank order.

    Example:
        >>> big, small = torch.tensor([1.0]), torch.tensor([2.0**-24])
        >>> total([((1, 0, 0), small), ((0, 0, 0), big), ((1, 5, 0), small)], 1.0).item() > 1
        True
    """
    shares: dict[int, torch.Tensor] = {}
    for (rank, *_), g in sorted(contributions, key=lambda c: c[0]):
        prev = shares.get(rank)
        shares[rank] = g if prev is None else prev + g
    out: torch.Tensor | None = None
    for rank in sorted(shares):
        share = shares[rank] if divisor == 1.0 else shares[rank] / divisor
        out = share if out is None else out + share
    assert out is not None, "a gradient without contributions"
    return out

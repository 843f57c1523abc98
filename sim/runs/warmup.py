"""The warm-up rule: which logged iterations are steady state, and the one time taken from them.

Rule (every reader uses it): **drop every logged value that covers any of the first**
:data:`WARMUP_STEPS` **optimizer steps, then take the median of the rest**. A value logged at
step ``i`` covers the steps since the previous logged one (a log interval of 10 logs at 10,
20, ...: the value at 10 is the mean of steps 1-10, so it is warm-up; the first value covers
one interval, the smallest gap between logged steps, back from its step). The first step pays
for CUDA context and NCCL communicator set-up, cuDNN/cuBLAS autotuning, ``torch.compile`` and
the caching allocator's first growth; the second allocates the optimizer state (Megatron-LM
reports memory "after the second iteration ... to include optimizer state memory",
``megatron/training/training.py::training_log``; torchtitan starts its MFU clock after step 1).
Megatron-LM's own functional tests compare iteration times from step 3 on (the golden rows of
``../shared/data/measured/``: "median iteration-time over steps >= 3"), and SimuMax times
steady iterations 2-3 of a run that starts counting at 0. The median, not the mean, so that
one slow step (a checkpoint save, a garbage collection, an evaluation) does not move it.

When fewer than :data:`MIN_STEADY` steps remain after the warm-up, every logged step after the
first is used and the rule says so; a log with only the first step is refused.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

WARMUP_STEPS = 2
"""Logged steps numbered up to this are warm-up (module doc)."""
MIN_STEADY = 1
"""Fewest steady steps the rule accepts before it falls back to steps after the first."""


class WarmupError(ValueError):
    """Too few logged steps for any steady-state time."""


def steady_time(series: Mapping[int, float]) -> tuple[float, str]:
    """The steady-state iteration time of ``{step: seconds}`` and the rule applied.

    Raises:
        WarmupError: no step after the first one is logged.

    Example:
        >>> steady_time({1: 9.0, 2: 1.5, 3: 1.0, 4: 1.2, 5: 1.1})
        (1.1, 'median of steps 3-5 (3 of 5 logged; steps <= 2 are warm-up)')
        >>> steady_time({10: 3.0, 20: 1.0, 30: 1.2})[0]  # the value at 10 covers steps 1-10
        1.1
    """
    steps = sorted(series)
    gap = min((b - a for a, b in zip(steps, steps[1:], strict=False)), default=1)
    first = {
        s: (p + 1 if p is not None else s - gap + 1)
        for p, s in zip([None, *steps], steps, strict=False)
    }
    steady = [s for s in steps if first[s] > WARMUP_STEPS]
    rule = f"steps <= {WARMUP_STEPS} are warm-up"
    if len(steady) < MIN_STEADY:
        steady = [s for s in steps if s > steps[0]] if steps else []
        rule = f"too few steps after {WARMUP_STEPS}: every step after the first"
    if not steady:
        raise WarmupError(
            f"only step(s) {steps} logged: a steady-state time needs a step after the first "
            "(log at least 3 iterations, --log-interval 1)"
        )
    value = statistics.median(series[s] for s in steady)
    span = f"{steady[0]}-{steady[-1]}" if len(steady) > 1 else f"{steady[0]}"
    return value, f"median of steps {span} ({len(steady)} of {len(steps)} logged; {rule})"

"""Simulate a long 1F1B pipeline's steady state once per period, not once per micro-batch.

Scenario: a flushed 1F1B pipeline of ``p`` stages with ``m`` micro-batches per iteration costs
``O(p m)`` actions (the SC'21 1T GPT, p = 64 and m = 512, is 65,536 actions and 650,000 logged
events over its two iterations). Between the warm-up and the cool-down every stage alternates
one backward and one forward, and with fixed stage costs, plans and links the pipeline's
activity repeats with a period: adding a micro-batch adds one period to each iteration and
changes nothing else. So :func:`simulate_periodic` runs the same configuration with
``M`` micro-batches per iteration (:func:`short_microbatches`: ``p + 8`` for a period of one
micro-batch), finds and verifies the
steady-state period in each iteration (:func:`~sim.engine.period_check.find_period`: the same
events and memory changes in consecutive periods), and inserts the ``m - M`` missing periods
at each iteration's cut: every later event, memory change and iteration end moves by
``(m - M) delta`` per cut passed. The peaks are the short run's (the inserted periods repeat
a period it ran). The returned log is the full run's log without the inserted periods (a gap
at each cut; the micro-batch numbers after a cut are the short run's); :class:`Repeated`
carries one period's events and how many times they were left out, which
:func:`sim.metrics.compute_metrics` adds to its sums.

It falls back to the full simulation, saying why (``log.meta["periodic"]``), when:

* the schedule is not 1F1B with one stage per rank (GPipe, interleaved, zero-bubble, the
  asynchronous schedules are not handled);
* ``m`` is not larger than ``M`` plus one period (nothing to gain);
* the configuration is asymmetric (:func:`sim.engine.symmetry.asymmetry`: a straggler, a
  degraded link, GPUs unlike each other, replicas with other plans, expert or context
  parallelism);
* a memory plan moves data off its GPU (swaps, offload, chunk fetches: copies whose state is
  not a function of the micro-batch alone);
* no period is found or the windows differ (:mod:`sim.engine.period_check`).

The result equals the full simulation's iteration time and peaks up to float rounding
(``tests/test_periodic.py``). No I/O, no clock: deterministic like the engine.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace
from typing import NamedTuple

from sim.engine.inputs import SimInput
from sim.engine.period_check import REL_TOL, WINDOWS, Period, find_period
from sim.engine.pipeline import simulate
from sim.engine.symmetry import asymmetry
from sim.events import Event, EventLog, MemoryEvent
from sim.schedules.base import Schedule
from sim.schedules.one_f_one_b import OneFOneB

SLACK_MICROBATCHES = 4
"""Micro-batches of the short run beyond ``p + (WINDOWS + 1) q``: 1F1B's steady phase on stage
0 (the shortest) lasts about ``M - p`` micro-batches, and :func:`find_period` needs
:data:`~sim.engine.period_check.WINDOWS` ``+ 1`` periods of ``q`` of them in it, plus room for
the cut."""


def short_microbatches(stages: int, period: int) -> int:
    """``M``: micro-batches per iteration of a short run that can show a period of
    ``period`` micro-batches on a ``stages``-deep pipeline (:data:`SLACK_MICROBATCHES`)."""
    return stages + (WINDOWS + 1) * period + SLACK_MICROBATCHES


class Repeated(NamedTuple):
    """What a periodic run left out of its log.

    Attributes:
        events: one steady-state period's events (of the measured iteration).
        repeats: how many such periods were left out of each iteration.
    """

    events: tuple[Event, ...]
    repeats: int


def simulate_periodic(inp: SimInput, schedule: Schedule) -> tuple[EventLog, Repeated | None]:
    """Simulate ``inp`` (whose program is ``schedule``'s) with whole steady-state periods
    inserted analytically when the module doc's conditions hold; else the full simulation.

    A period of one micro-batch is looked for first (a run of ``p + 8``); failing that, one
    of up to ``p`` (a run of ``5p + 4``) while that is shorter than ``m``; a period of ``q``
    that does not divide what is left out is run again with the remainder added.

    Returns:
        ``(log, repeated)``: ``repeated`` is None after a full simulation; in both cases
        ``log.meta["periodic"]`` says what was done.

    Raises:
        ValueError: the program deadlocks (:func:`~sim.engine.pipeline.simulate`).
    """
    why = why_not_periodic(inp, schedule)
    if why is not None:
        return _full(inp, why)
    p, m = schedule.stages, inp.microbatches
    tried: list[str] = []
    for most in dict.fromkeys((1, p)):
        short = short_microbatches(p, most)
        if short + most >= m:
            tried.append(f"{m} micro-batches: too few for a period of up to {most}")
            continue
        found = _short_run(inp, p, short, most)
        if not isinstance(found, str) and (m - short) % found[1][0].microbatches:
            short += (m - short) % found[1][0].microbatches
            found = _short_run(inp, p, short, found[1][0].microbatches)
        if isinstance(found, str):
            tried.append(found)
            continue
        log, periods = found
        return log, _splice(log, periods, short, m)
    return _full(inp, "; ".join(tried))


def _short_run(inp: SimInput, p: int, short: int, most: int) -> tuple[EventLog, list[Period]] | str:
    """``inp`` run with ``short`` micro-batches per iteration and each iteration's period (of
    at most ``most`` micro-batches; the same in every iteration), or why there is none."""
    iterations = _iterations(inp)
    prog = OneFOneB(p, short, fewer_microbatches=True).program(iterations)
    log = simulate(replace(inp, program=type(inp.program)(prog), microbatches=short))
    periods: list[Period] = []
    for k in range(iterations):
        found = find_period(log, k, most)
        if isinstance(found, str):
            return found
        periods.append(found)
    first = periods[0]
    for per in periods[1:]:
        if per.microbatches != first.microbatches or abs(per.delta_s - first.delta_s) > (
            REL_TOL * per.delta_s
        ):
            return "the iterations' periods differ"
    return log, periods


def _splice(log: EventLog, periods: list[Period], short: int, m: int) -> Repeated:
    """Insert the ``m - short`` missing micro-batches' periods at each iteration's cut of
    ``log`` (in place); what was left out."""
    q, delta = periods[0].microbatches, periods[0].delta_s
    count = (m - short) // q
    _insert(log, [per.cut_s for per in periods], [per.delta_s * count for per in periods])
    log.meta["periodic"] = (
        f"periodic: {short} of {m} micro-batches per iteration simulated; {count} "
        f"steady-state periods of {q} micro-batch(es), {delta:.6g} s each, inserted per "
        "iteration (not in the event log)"
    )
    return Repeated(periods[-1].events, count)


def why_not_periodic(inp: SimInput, schedule: Schedule) -> str | None:
    """Why ``inp`` is simulated in full rather than periodically (module doc), or None when
    the periodic run is tried (it may still fall back if no period is found)."""
    if type(schedule) is not OneFOneB or schedule.virtual_stages != 1:
        return f"schedule {schedule.name} is not 1F1B with one stage per rank"
    short = short_microbatches(schedule.stages, 1)
    if inp.microbatches <= short + 1:
        return f"{inp.microbatches} micro-batches: too few to skip a period (needs > {short + 1})"
    why = None if inp.mirrored else asymmetry(inp)  # a mirrored input passed it already
    if why is not None:
        return why
    plans = [p for row in inp.plans for p in row] + [
        p for rows in inp.tensor_plans for row in rows for p in row
    ]
    if any(p.off_gpu for p in plans):
        return "a memory plan moves data off its GPU (swaps, offload or chunk fetches)"
    if _iterations(inp) * inp.microbatches != _backwards_on_rank0(inp):
        return "the program is not the schedule's (micro-batches differ)"
    return None


def _iterations(inp: SimInput) -> int:
    """Optimizer steps in ``inp``'s program (STEP actions of rank 0)."""
    return sum(a.op == "STEP" for a in inp.program[0])


def _backwards_on_rank0(inp: SimInput) -> int:
    return sum(a.op == "B" for a in inp.program[0])


def _full(inp: SimInput, why: str) -> tuple[EventLog, None]:
    log = simulate(inp)
    log.meta["periodic"] = f"full pipeline simulated: {why}"
    return log, None


def _insert(log: EventLog, cuts: list[float], shifts: list[float]) -> None:
    """Move everything after each cut (ascending) by that cut's shift, cumulatively: events
    by their start (an event that spans a cut keeps its length: the inserted periods come
    after it), memory changes by their time, the iteration ends; in place."""
    total = [0.0]
    for shift in shifts:
        total.append(total[-1] + shift)
    make, mem = Event._make, MemoryEvent._make
    events = []
    for e in log.events:
        shift = total[bisect_right(cuts, e.start_s)]
        events.append(e if not shift else make((*e[:4], e[4] + shift, e[5] + shift, *e[6:])))
    log.events = events
    memory = []
    for m in log.memory:
        shift = total[bisect_right(cuts, m.time_s)]
        memory.append(m if not shift else mem((m[0] + shift, *m[1:])))
    log.memory = memory
    log.iteration_ends_s = [t + total[bisect_right(cuts, t)] for t in log.iteration_ends_s]

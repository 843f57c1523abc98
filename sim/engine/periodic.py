"""Simulate a long pipeline's steady state once per period, not once per micro-batch.

Scenario: a pipeline of ``p`` ranks with ``m`` micro-batches per iteration costs ``O(p m)``
actions (the SC'21 1T GPT, p = 64 and m = 512, is 65,536 actions and 650,000 logged events
over its two iterations). Between the warm-up and the cool-down every rank repeats the same
few actions (1F1B: one backward and one forward; interleaved 1F1B: a round of forwards and
backwards over its chunks; zero-bubble and V-shaped orders: F, I and W of each chunk;
DualPipeV: its overlapped pairs; PipeDream, 2BW and PipeMare: 1F1B without a flush), and with
fixed stage costs, plans and links the pipeline's activity repeats with a period: adding a
period's micro-batches adds one period to each iteration and changes nothing else. So
:func:`simulate_periodic` runs the same configuration with ``M`` micro-batches per iteration
(:func:`short_microbatches`: the schedule's fill, :data:`~sim.engine.period_check.WINDOWS`
``+ 1`` periods and :data:`SLACK_MICROBATCHES`; a multiple of the schedule's own period,
:meth:`~sim.schedules.base.Schedule.period_microbatches`), finds and verifies the steady-state
period in each iteration (:func:`~sim.engine.period_check.find_period`: the same events and
memory changes in consecutive periods), checks that the long program is the short one with
whole periods inserted at those cuts (:func:`~sim.engine.period_program.splice_reason`), and
inserts the ``m - M`` missing micro-batches' periods at each iteration's cut: every later
event, memory change and iteration end moves by ``(m - M) / q`` periods per cut passed. The
peaks are the short run's (the inserted periods repeat a period it ran). The returned log is
the full run's log without the inserted periods (a gap at each cut, ``log.meta["periodic_gaps_s"]``:
``[start_s, end_s]`` per cut, which the timeline plot shades; the micro-batch numbers after a
cut are the short run's); :class:`Repeated` carries one period's events and how many
times the metrics' window left them out, which :func:`sim.metrics.compute_metrics` adds to
its sums.

It falls back to the full simulation, saying why (``log.meta["periodic"]``), when:

* the schedule runs every forward of a rank before its backwards (GPipe, looped BFS: no
  steady state, the stash grows with ``m``);
* ``m`` is not larger than ``M`` plus one period (nothing to gain);
* the configuration is asymmetric (:func:`sim.engine.symmetry.asymmetry`: a straggler, a
  degraded link, GPUs unlike each other, replicas with other plans, an exchange through a
  host);
* a memory plan moves data off its GPU (swaps, offload, chunk fetches: copies whose state is
  not a function of the micro-batch alone);
* no shorter run keeps the schedule's structure (an interleaved round that changes with
  ``m``, a different number of iterations to measure), no period is found, the windows differ
  (:mod:`sim.engine.period_check`) or the long program is not the short one with periods
  inserted (:mod:`sim.engine.period_program`).

The result equals the full simulation's iteration time and peaks up to float rounding
(``tests/test_periodic.py``, every schedule). No I/O, no clock: deterministic like the engine.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import replace
from typing import NamedTuple

from sim.engine.inputs import SimInput
from sim.engine.period_check import REL_TOL, WINDOWS, Period, find_period
from sim.engine.period_program import action_starts, first_starts, splice_reason
from sim.engine.pipeline import simulate
from sim.engine.symmetry import asymmetry
from sim.events import Event, EventLog, MemoryEvent
from sim.metrics import steady_window
from sim.schedules.action import STEP, flatten
from sim.schedules.base import Schedule
from sim.schedules.combined import combine_pairs
from sim.schedules.errors import ScheduleError

SLACK_MICROBATCHES = 4
"""Micro-batches of the short run beyond the fill and ``(WINDOWS + 1) q``: 1F1B's steady phase
on stage 0 (the shortest) lasts about ``M - p`` micro-batches, and :func:`find_period` needs
:data:`~sim.engine.period_check.WINDOWS` ``+ 1`` periods of ``q`` of them in it, plus room for
the cut."""

CHUNK_FILL = 3
"""With ``v > 1`` chunks per rank, the fill of the short run in units of the schedule's own
fill (:meth:`~sim.schedules.base.Schedule.fill_microbatches`): an interleaved rank runs its
first chunk's first backward only after a round of every later chunk, and its last forward of
the first chunk a round of each later chunk before the end, about ``3p`` micro-batches outside
the steady phase (measured on interleaved 1F1B, interleaved zero bubble, ZB-V and DualPipeV,
``tests/test_periodic.py``)."""


def short_microbatches(fill: int, period: int) -> int:
    """``M``: micro-batches per iteration of a short run that can show a period of ``period``
    micro-batches after a fill of ``fill`` (the pipeline depth for 1F1B;
    :data:`SLACK_MICROBATCHES`)."""
    return fill + (WINDOWS + 1) * period + SLACK_MICROBATCHES


class Repeated(NamedTuple):
    """What a periodic run left out of its log.

    Attributes:
        events: one steady-state period's events (of the last iteration).
        repeats: how many such periods were left out of the metrics' window
            (:func:`sim.metrics.steady_window`: one iteration of a flushed schedule, several
            of an asynchronous one).
    """

    events: tuple[Event, ...]
    repeats: int


def simulate_periodic(inp: SimInput, schedule: Schedule) -> tuple[EventLog, Repeated | None]:
    """Simulate ``inp`` (whose program is ``schedule``'s) with whole steady-state periods
    inserted analytically when the module doc's conditions hold; else the full simulation.

    A period of the schedule's own ``q0`` micro-batches is looked for first; failing that (a
    chain of sends setting the pace, the pipeline cycling through several phases), one of up
    to ``max(2 q0, p)`` micro-batches while that run is shorter than ``m``; a period of ``q`` that does not
    divide what is left out is run again with the remainder added.

    Returns:
        ``(log, repeated)``: ``repeated`` is None after a full simulation; in both cases
        ``log.meta["periodic"]`` says what was done.

    Raises:
        ValueError: the program deadlocks (:func:`~sim.engine.pipeline.simulate`).
    """
    why = why_not_periodic(inp, schedule)
    if why is not None:
        return _full(inp, why)
    p, m, q0 = schedule.stages, inp.microbatches, schedule.period_microbatches()
    fill = _fill(schedule)
    tried: list[str] = []
    for most in dict.fromkeys((q0, max(2 * q0, p))):
        short = _round_up(short_microbatches(fill, most), q0)
        if short + most >= m:
            tried.append(f"{m} micro-batches: too few for a period of up to {most}")
            continue
        found = _short_run(inp, schedule, short, most)
        if not isinstance(found, str) and (m - short) % found[2][0].microbatches:
            short += (m - short) % found[2][0].microbatches
            found = _short_run(inp, schedule, short, found[2][0].microbatches)
        if not isinstance(found, str):
            found = _checked(inp, found, short)
        if isinstance(found, str):
            tried.append(found)
            continue
        log, _, periods = found
        return log, _splice(log, periods, short, m, schedule)
    return _full(inp, "; ".join(tried))


Found = tuple[EventLog, list[list], list[Period]]
"""A short run: its log, its program and each iteration's period."""


def _short_run(inp: SimInput, schedule: Schedule, short: int, most: int) -> Found | str:
    """``inp`` run with ``short`` micro-batches per iteration and each iteration's period (of
    at most ``most`` micro-batches, a multiple of the schedule's own; the same in every
    iteration: where two iterations settle into periods of different lengths, their least
    common multiple, which is a period of both), or why there is none."""
    try:
        sched = schedule.with_microbatches(short)
    except ScheduleError as exc:
        return f"no run of {short} micro-batches: {exc}"
    if sched.period_microbatches() != schedule.period_microbatches():
        return f"a run of {short} micro-batches has another period (rounds of the schedule)"
    if _window_fill(sched) != _window_fill(schedule):
        return f"a run of {short} micro-batches is measured over other iterations"
    iterations = _iterations(inp, schedule)
    prog = sched.program(iterations)
    if inp.combined_pairs:  # the long program's pairs (Megatron's combined 1F1B)
        prog = combine_pairs(prog)
    log = simulate(replace(inp, program=type(inp.program)(prog), microbatches=short))
    step = schedule.period_microbatches()
    periods = _periods(log, iterations, most, step)
    if isinstance(periods, str):
        return periods
    q = math.lcm(*(per.microbatches for per in periods))
    if q != step and any(per.microbatches != q for per in periods):
        periods = _periods(log, iterations, q, q)  # one period for all: their multiple
        if isinstance(periods, str):
            return periods
    first = periods[0]
    for per in periods[1:]:
        if abs(per.delta_s - first.delta_s) > REL_TOL * per.delta_s:
            return "the iterations' periods differ"
    return log, prog, periods


def _periods(log: EventLog, iterations: int, most: int, step: int) -> list[Period] | str:
    """Each iteration's period in ``log`` (:func:`~sim.engine.period_check.find_period`), or
    why one has none."""
    out: list[Period] = []
    for k in range(iterations):
        found = find_period(log, k, most, step=step)
        if isinstance(found, str):
            return found
        out.append(found)
    return out


def _checked(inp: SimInput, found: Found, short: int) -> Found | str:
    """``found`` when the long program is its program with whole periods inserted at its
    cuts (:func:`~sim.engine.period_program.splice_reason`), else why not."""
    log, prog, periods = found
    q = periods[0].microbatches
    ranks = inp.stage_ranks
    devices = [f"gpu{inp.gpu_index(0, ranks.index(r), 0)}" for r in range(len(prog))]
    first = first_starts(log, set(devices))
    starts = [action_starts(first[d], order) for d, order in zip(devices, prog, strict=True)]
    why = splice_reason(
        inp.program,
        prog,
        starts,
        [per.cut_s for per in periods],
        periods[0].delta_s,
        (inp.microbatches - short) // q,
        q,
    )
    return found if why is None else why


def _splice(
    log: EventLog, periods: list[Period], short: int, m: int, schedule: Schedule
) -> Repeated:
    """Insert the ``m - short`` missing micro-batches' periods at each iteration's cut of
    ``log`` (in place); what was left out of the metrics' window."""
    q, delta = periods[0].microbatches, periods[0].delta_s
    count = (m - short) // q
    cuts = [per.cut_s for per in periods]
    shifts = [per.delta_s * count for per in periods]
    moved = _insert(log, cuts, shifts)
    log.meta["periodic_gaps_s"] = [[c, c + s] for c, s in zip(moved, shifts, strict=True)]
    t0, t1, _ = steady_window(
        log.iteration_ends_s,
        schedule.stages,
        m,
        schedule.synchronous,
        schedule.fill_microbatches(),
    )
    inside = sum(t0 <= c < t1 for c in moved)
    log.meta["periodic"] = (
        f"periodic: {short} of {m} micro-batches per iteration simulated; {count} "
        f"steady-state periods of {q} micro-batch(es), {delta:.6g} s each, inserted per "
        "iteration (not in the event log: the spans in meta['periodic_gaps_s'], seconds)"
    )
    return Repeated(periods[-1].events, count * inside)


def why_not_periodic(inp: SimInput, schedule: Schedule) -> str | None:
    """Why ``inp`` is simulated in full rather than periodically (module doc), or None when
    the periodic run is tried (it may still fall back if no period is found)."""
    q0 = schedule.period_microbatches()
    short = _round_up(short_microbatches(_fill(schedule), q0), q0)
    if inp.microbatches <= short + q0:
        return f"{inp.microbatches} micro-batches: too few to skip a period (needs > {short + q0})"
    if not all(_interleaves(order, inp.microbatches) for order in inp.program):
        return f"schedule {schedule.name} runs every forward before its backwards"
    why = None if inp.mirrored else asymmetry(inp)  # a mirrored input passed it already
    if why is not None:
        return why
    plans = [p for row in inp.plans for p in row] + [
        p for rows in inp.tensor_plans for row in rows for p in row
    ]
    if any(p.off_gpu for p in plans):
        return "a memory plan moves data off its GPU (swaps, offload or chunk fetches)"
    its = _iterations(inp, schedule)
    if not its or schedule.optimizer_steps(its) != _steps_of_stage0(inp):
        return "the program is not the schedule's (optimizer steps differ)"
    return None


def _interleaves(order, m: int) -> bool:
    """Whether a rank runs a backward (B or I) of the first iteration's ``m`` micro-batches
    before its last forward of them (a steady phase)."""
    ops = [a.op for a in flatten(order) if a.op != STEP and a.microbatch < m]
    first_b = next((i for i, op in enumerate(ops) if op in ("B", "I")), len(ops))
    last_f = max((i for i, op in enumerate(ops) if op == "F"), default=-1)
    return first_b < last_f


def _fill(schedule: Schedule) -> int:
    """Micro-batches of a short run outside the steady phase (:data:`CHUNK_FILL`)."""
    fill = schedule.fill_microbatches()
    return fill if schedule.virtual_stages == 1 else CHUNK_FILL * fill


def _round_up(n: int, q: int) -> int:
    return -(-n // q) * q


def _window_fill(schedule: Schedule) -> int:
    """Iterations before the measured window (:func:`sim.metrics.steady_window`)."""
    if schedule.synchronous:
        return 0
    return -(-schedule.fill_microbatches() // schedule.microbatches)


def _steps_of_stage0(inp: SimInput) -> int:
    """STEP actions of stage 0 in ``inp``'s program."""
    return sum(a.op == STEP and a.stage == 0 for a in inp.program[inp.stage_ranks[0]])


def _iterations(inp: SimInput, schedule: Schedule) -> int:
    """Iterations of ``inp``'s program (stage 0's STEPs over the schedule's per iteration)."""
    return _steps_of_stage0(inp) // max(1, schedule.optimizer_steps(1))


def _full(inp: SimInput, why: str) -> tuple[EventLog, None]:
    log = simulate(inp)
    log.meta["periodic"] = f"full pipeline simulated: {why}"
    return log, None


def _insert(log: EventLog, cuts: list[float], shifts: list[float]) -> list[float]:
    """Move everything after each cut (ascending) by that cut's shift, cumulatively: events
    by their start (an event that spans a cut keeps its length: the inserted periods come
    after it), memory changes by their time, the iteration ends; in place. Returns the cuts
    where they are in the spliced log (each after the periods inserted before it)."""
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
    return [c + total[k] for k, c in enumerate(cuts)]

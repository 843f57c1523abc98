"""Find and verify the period of a pipeline's steady state in an event log.

In the steady state of an iteration every stage alternates backwards (B, or I and W) and
forwards (1F1B: one of each; interleaved and V-shaped orders: a round over the rank's chunks),
and (stage costs, plans, links and the program being fixed) the whole pipeline's activity
repeats with a period ``delta_s``: what starts in ``[c, c + delta_s)`` starts again,
``delta_s`` later, in ``[c + delta_s, c + 2 delta_s)``, on the same devices and streams, with the
same durations, bytes and links, and every device's memory goes through the same changes from
the same level. :func:`find_period` finds such a cut ``c`` and period in one iteration of a log
and checks :data:`WINDOWS` consecutive windows against each other; :mod:`sim.engine.periodic`
then inserts whole periods at ``c``.

What is compared is the log (events and memory changes), not the engine's internal state
(queues, host clocks): two equal windows after the warm-up are taken as the state repeating
(an assumption; ``tests/test_periodic.py`` compares the result with the full simulation).
Floats are compared within :data:`REL_TOL` of the run's length (times are sums of many
durations, so a repeat is equal up to rounding, not bit for bit).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from sim.events import Event, EventKind, EventLog, MemoryEvent

WINDOWS = 3
"""Consecutive periods that must match (the first against each later one)."""
REL_TOL = 1e-9
"""Relative tolerance (of the run's last event time) for comparing times and bytes."""


@dataclass(frozen=True)
class Period:
    """A verified steady-state period of one iteration.

    Attributes:
        cut_s: where whole periods may be inserted (seconds from the start of the run).
        delta_s: the period in seconds.
        microbatches: micro-batches per period ``q`` (1 when one micro-batch's F and B set
            the pace; up to ``p`` when a chain of sends does, the pipeline then cycling
            through ``q`` phases).
        events: the events that start in ``[cut_s + delta_s, cut_s + 2 delta_s)``: one
            period's worth of activity.
    """

    cut_s: float
    delta_s: float
    microbatches: int
    events: tuple[Event, ...]


def find_period(
    log: EventLog, iteration: int, max_microbatches: int = 1, step: int = 1
) -> Period | str:
    """The steady-state period of ``iteration`` in ``log`` (module doc) of the fewest
    micro-batches ``q <= max_microbatches``, a multiple of ``step`` (the schedule's own
    period, :meth:`~sim.schedules.base.Schedule.period_microbatches`), or why none was found.

    The steady range is from the latest first backward (B or I) to the earliest last forward
    over the stages (every stage alternating backwards and forwards); a period of ``q``
    micro-batches is the spacing of backwards ``q`` apart on stage 0, constant over the last
    :data:`WINDOWS` ``+ 1`` periods of the range (the latest, where a transient has had longest to die out); the cut is placed
    there, in the widest gap between event starts so that rounding does not move an event
    across it.
    """
    ranges = _steady_ranges(log, iteration)
    if ranges is None:
        return f"iteration {iteration} has a stage without a steady B/F phase"
    lo, hi, starts = ranges
    b = [t for t in starts if lo <= t <= hi]
    tol = REL_TOL * max(_last_time(log), 1.0)
    why = f"iteration {iteration}: no steady period of at most {max_microbatches} micro-batches"
    for q in range(step, max_microbatches + 1, step):
        tail = b[-((WINDOWS + 1) * q + 1) :]
        steps = [y - x for x, y in zip(tail, tail[q:], strict=False)]
        if len(tail) < (WINDOWS + 1) * q + 1:
            why = f"iteration {iteration}'s steady phase holds fewer than {WINDOWS + 1} periods"
            break
        if max(steps) - min(steps) > 10 * tol or steps[0] <= 10 * tol:
            continue
        delta = steps[-1]
        if hi - lo < (WINDOWS + 1) * delta:
            why = f"iteration {iteration}'s steady phase holds fewer than {WINDOWS + 1} periods"
            break
        cut = _quiet_cut(log, hi - (WINDOWS + 1) * delta, delta)
        differ = _compare(log, cut, delta, tol)
        if differ is None:
            events = tuple(e for e in log.events if cut + delta <= e.start_s < cut + 2 * delta)
            return Period(cut, delta, q, events)
        why = f"iteration {iteration}: {differ}"
    return why


def _last_time(log: EventLog) -> float:
    return max((e.end_s for e in log.events), default=0.0)


def _steady_ranges(log: EventLog, iteration: int) -> tuple[float, float, list[float]] | None:
    """``(lo, hi, stage 0's backward starts)`` of ``iteration``: lo the latest first backward,
    hi the earliest last forward over the stages' compute events."""
    first_b: dict[int, float] = {}
    last_f: dict[int, float] = {}
    b0: list[float] = []
    for e in log.events:
        if e.kind != EventKind.COMPUTE or e.iteration != iteration or e.stage is None:
            continue
        op = _op(e.name)
        if op in ("B", "I"):
            first_b[e.stage] = min(first_b.get(e.stage, e.start_s), e.start_s)
            if e.stage == 0 and e.replica == 0 and _first_part(e.name):
                b0.append(e.start_s)
        elif op == "F":
            last_f[e.stage] = max(last_f.get(e.stage, e.start_s), e.start_s)
    if not first_b or set(first_b) != set(last_f):
        return None
    return max(first_b.values()), min(last_f.values()), sorted(set(b0))


def _first_part(name: str) -> bool:
    """Whether a compute event is its action's first: a whole action (``"3B17"``) or the
    first layer part of one an overlapped pair runs as chains (``"3B17.0"``,
    :mod:`sim.engine.overlap`); a backward's later parts are not backwards of their own."""
    _, dot, part = name.partition(".")
    return not dot or part == "0"


def action_name(name: str) -> str:
    """The action a compute event belongs to: its name less a layer part's ``.k`` suffix
    (``"3B17.4"`` -> ``"3B17"``, :mod:`sim.engine.overlap`)."""
    return name.partition(".")[0]


def _op(name: str) -> str:
    """The op letter of a compute event's action name (``"3B17"`` -> ``"B"``)."""
    digits = name.lstrip("0123456789")
    return digits[:1]


def _quiet_cut(log: EventLog, lo: float, delta: float) -> float:
    """A cut in ``[lo, lo + delta)`` in the middle of the widest gap between the phases of the
    event starts and memory changes in that span."""
    phases = sorted(
        {e.start_s - lo for e in log.events if lo <= e.start_s < lo + delta}
        | {m.time_s - lo for m in log.memory if lo <= m.time_s < lo + delta}
    )
    if not phases:
        return lo
    best, at = phases[0] + delta - phases[-1], phases[-1]
    for a, b in zip(phases, phases[1:], strict=False):
        if b - a > best:
            best, at = b - a, a
    cut = lo + at + best / 2
    return cut if cut < lo + delta else cut - delta


def _compare(log: EventLog, cut: float, delta: float, tol: float) -> str | None:
    """Why the :data:`WINDOWS` windows after ``cut`` differ, or None when they repeat."""
    end = cut + WINDOWS * delta
    near = [e for e in log.events if cut <= e.start_s < end]  # one pass over the log
    spans = [_span_key(near, cut + i * delta, delta) for i in range(WINDOWS)]
    for i in range(1, WINDOWS):
        why = _same(spans[0], spans[i], tol, "events")
        if why is not None:
            return why
    mems = _memory_keys(log.memory, cut, delta, tol)
    for i in range(1, WINDOWS):
        why = _same(mems[0], mems[i], tol, "memory changes")
        if why is not None:
            return why
    return None


def _span_key(events: list[Event], start: float, delta: float) -> list[tuple]:
    """The events starting in ``[start, start + delta)``, as comparable tuples: what matters
    besides their names and micro-batch numbers, start relative to ``start``; per device,
    stream and kind in the log's order (sorting by the relative start would let rounding
    swap two events that start together)."""
    out = [
        (
            e.device,
            e.stream,
            e.kind,
            e.stage,
            e.replica,
            e.links,
            e.start_s - start,
            e.end_s - e.start_s,
            e.nbytes,
        )
        for e in events
        if start <= e.start_s < start + delta
    ]
    return sorted(out, key=lambda k: (k[0], k[1], k[2]))  # stable: the log's order within


def _memory_keys(memory: list[MemoryEvent], cut: float, delta: float, tol: float) -> list:
    """Per window of the :data:`WINDOWS` after ``cut``, per device: its level at the window's
    start, its changes in the window grouped by instant (changes within ``tol`` of each
    other) and its level at the end; one pass over ``memory`` (in time order).

    Each instant's changes are compared as a sorted set, and the highest level a window reaches
    is not compared: simultaneous changes apply in the order the engine's queue holds them,
    which follows the float rounding of their times and may change from period to period (an
    allocation ahead of a free in one period, behind it in the next). A repeated period is
    taken to reach one of the levels the checked windows reached, all within the run's peak
    (an assumption: an order of the same changes, like the full simulation's, which rounding
    decides as well)."""
    starts = [cut + i * delta for i in range(WINDOWS)]
    edges = [*starts, starts[-1] + delta]
    level: dict[str, float] = {}
    groups: list[dict[str, list[list]]] = [{} for _ in range(WINDOWS)]
    ends: list[dict[str, float]] = []
    for m in memory:
        i = bisect_right(edges, m.time_s) - 1  # -1 before the first window
        while len(ends) < min(i, WINDOWS):  # windows ended before this change
            ends.append(dict(level))
        if i >= WINDOWS:
            break
        level[m.device] = level.get(m.device, 0.0) + m.delta_bytes
        if i < 0:
            continue
        rel, dev = m.time_s - starts[i], groups[i].setdefault(m.device, [])
        if not dev or rel - dev[-1][0] > tol:
            dev.append([rel, []])
        dev[-1][1].append((str(m.category), m.delta_bytes))
    while len(ends) < WINDOWS:
        ends.append(dict(level))
    out = []
    for i in range(WINDOWS):
        key: list[tuple] = []
        for d in sorted(groups[i]):
            key.extend((d, "at", rel, tuple(sorted(ch))) for rel, ch in groups[i][d])
        key.extend((d, "end", v) for d, v in sorted(ends[i].items()))
        out.append(key)
    return out


def _same(a: list[tuple], b: list[tuple], tol: float, what: str) -> str | None:
    """Why the keyed windows ``a`` and ``b`` differ (floats within ``tol`` seconds, bytes
    within :data:`REL_TOL`), or None."""
    if len(a) != len(b):
        return f"the {what} of consecutive periods differ in number ({len(a)} vs {len(b)})"
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float) and isinstance(v, float):
                if abs(u - v) > max(tol, REL_TOL * max(abs(u), abs(v))):
                    return f"the {what} of consecutive periods differ ({x} vs {y})"
            elif u != v:
                return f"the {what} of consecutive periods differ ({x} vs {y})"
    return None

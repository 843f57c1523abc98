"""Check that a long program is a short one with whole steady-state periods inserted.

:mod:`sim.engine.periodic` simulates a schedule with ``M`` micro-batches per iteration instead of
``m``, finds a steady-state period of ``q`` micro-batches in each iteration of the event log
(:mod:`sim.engine.period_check`: a cut ``c`` and a period ``delta`` after which the events and
memory changes repeat) and inserts ``(m - M) / q`` periods at each cut. That answers the long
run's question only if the long run's action lists are the short run's with those periods
inserted at the cuts. :func:`splice_reason` checks exactly that, rank by rank: with ``i`` the
position in the short list of the first action that starts at or after the cut and ``T`` the
actions that start in the period after it, the long list must be

``short[:i] + T + T(+q) + ... + T(+(count-1) q) + short[i:](+count q)``

(``(+d)``: micro-batch numbers moved up by ``d``; optimizer-step numbers, which PipeDream's
per-backward STEPs carry, by the steps ``T`` holds), cut after cut. Nothing is assumed about the
schedule: 1F1B, interleaved, zero-bubble, V-shaped and the asynchronous orders pass or fail on
their own lists (an interleaved schedule whose rounds change with ``m`` fails and is simulated
in full). Cheap: linear in the long program's actions.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from sim.engine.period_check import action_name
from sim.events import EventKind, EventLog
from sim.schedules.action import STEP, Action

_TIMED = (EventKind.COMPUTE, EventKind.OPTIMIZER)


def _name(a: Action) -> str:
    """The name of an action's first event: its own, or a pair's forward's."""
    return str(a.sub_actions[0] if a.sub_actions is not None else a)


def first_starts(log: EventLog, devices: set[str]) -> dict[str, dict[str, float]]:
    """Per device of ``devices``, the start of its first compute or optimizer event of each
    action (replica 0's; an overlapped pair's layer parts, ``"3B17.4"``, count as their
    action's, :func:`~sim.engine.period_check.action_name`); one pass over ``log``."""
    out: dict[str, dict[str, float]] = {d: {} for d in devices}
    for e in log.events:
        mine = out.get(e.device)
        if mine is not None and e.kind in _TIMED and e.replica in (0, None):
            name = action_name(e.name)
            mine[name] = min(mine.get(name, e.start_s), e.start_s)
    return out


def action_starts(first: dict[str, float], order: Sequence[Action]) -> list[float]:
    """The start of each action of ``order`` (a rank's list) on its device (``first``: that
    device's :func:`first_starts`): its compute (or optimizer) event's; an action without one
    (a STEP without an optimizer kernel) takes the start of the action before it, so the list
    is non-decreasing (a rank runs its actions in order)."""
    out, last = [], 0.0
    for a in order:
        last = max(last, first.get(_name(a), last))
        out.append(last)
    return out


def _shift(a: Action, mbs: int, steps: int) -> Action:
    if a.op == STEP:
        return Action(a.stage, STEP, a.microbatch + steps) if steps else a
    return a.shifted(mbs) if mbs else a


def spliced(
    short: Sequence[Action],
    cuts: Sequence[tuple[int, int]],
    count: int,
    q: int,
    chunks: int,
) -> list[Action]:
    """``short`` with ``count`` copies of each cut's period inserted (module doc).

    Args:
        short: one rank's short action list.
        cuts: per cut, ascending, ``(i, n)``: the position of the first action after it and
            the number of actions in one period.
        count: periods inserted per cut.
        q: micro-batches per period.
        chunks: stage chunks of the rank (a step has one STEP per chunk).
    """
    out: list[Action] = []
    prev = mbs = steps = 0
    for i, n in cuts:
        out += [_shift(a, mbs, steps) for a in short[prev:i]]
        period = short[i : i + n]
        per_steps = sum(a.op == STEP for a in period) // chunks
        for j in range(count):
            out += [_shift(a, mbs + j * q, steps + j * per_steps) for a in period]
        mbs += count * q
        steps += count * per_steps
        prev = i
    out += [_shift(a, mbs, steps) for a in short[prev:]]
    return out


def splice_reason(
    long: Sequence[Sequence[Action]],
    short: Sequence[Sequence[Action]],
    starts: Sequence[Sequence[float]],
    cuts: Sequence[float],
    delta_s: float,
    count: int,
    q: int,
) -> str | None:
    """Why ``long`` (per rank) is not ``short`` with ``count`` periods of ``q`` micro-batches
    (``delta_s`` seconds) inserted at each of ``cuts`` (seconds, ascending), or None when it is.

    Args:
        starts: per rank, :func:`action_starts` of its short list.
    """
    for r, (lo, sh, st) in enumerate(zip(long, short, starts, strict=True)):
        places = []
        for c in cuts:
            i = bisect_left(st, c)
            places.append((i, bisect_left(st, c + delta_s) - i))
        chunks = max(1, len({a.stage for a in sh if a.op == STEP}))
        if spliced(sh, places, count, q, chunks) != list(lo):
            return f"rank {r}'s actions are not the short run's with whole periods inserted"
    return None

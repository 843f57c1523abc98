"""Pure functions over a :data:`~sim.schedules.action.Program`: in-flight counts, staleness, checks.

They read each rank's list in its own order (list positions, not time), which is what the
memory and staleness claims of schedules.md §1 are about; time comes from the engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sim.schedules.action import STEP, Action, Program, flatten
from sim.schedules.errors import ScheduleError

_DONE_OPS = ("B", "W")
"""Ops that end a micro-batch's stay on a stage (a split backward ends at W)."""


def peak_in_flight(program: Program) -> list[int]:
    """Peak micro-batches in flight per rank: max over its list of forwards minus backwards done.

    A micro-batch is in flight on a rank from its F until its B (or, for a split backward, its W),
    as in schedules.md §3 ("until W"). Multi-stage ranks count chunk-micro-batches.

    Returns:
        One count per rank, e.g. ``[4, 3, 2, 1]`` for 1F1B with p=4, m=8.

    Example:
        >>> from sim.schedules.registry import get_schedule
        >>> peak_in_flight(get_schedule("1f1b")(4, 8).program(1))
        [4, 3, 2, 1]
        >>> peak_in_flight(get_schedule("gpipe")(4, 8).program(1))
        [8, 8, 8, 8]
    """
    peaks = []
    for actions in program:
        live = peak = 0
        for action in flatten(actions):
            live += (action.op == "F") - (action.op in _DONE_OPS)
            peak = max(peak, live)
        peaks.append(peak)
    return peaks


def peak_in_flight_per_stage(program: Program) -> dict[int, int]:
    """Peak micro-batches in flight per stage (chunk): ``{stage: peak}``, as
    :func:`peak_in_flight` counts them but for each stage of a multi-stage rank separately.

    Example:
        >>> from sim.schedules.registry import get_schedule
        >>> peak_in_flight_per_stage(get_schedule("interleaved_1f1b")(2, 2).program(1))
        {0: 2, 2: 2, 1: 2, 3: 1}
    """
    peaks: dict[int, int] = {}
    for actions in program:
        live: dict[int, int] = {}
        for a in flatten(actions):
            if a.op == STEP:
                continue
            live[a.stage] = live.get(a.stage, 0) + (a.op == "F") - (a.op in _DONE_OPS)
            peaks[a.stage] = max(peaks.get(a.stage, 0), live[a.stage])
    return peaks


def _rank_of(program: Program, stage: int) -> list[Action]:
    for actions in program:
        if any(a.stage == stage and a.op != STEP for a in flatten(actions)):
            return list(flatten(actions))
    raise ScheduleError(f"no rank runs stage {stage}")


def delay_steps(program: Program, stage: int) -> int:
    """Staleness at ``stage``: max over micro-batches of the STEPs between its F and its backward.

    The backward is B, or I for a split backward (the first op that uses the weights again).
    0 for flushed schedules; ``p - s - 1`` for PipeDream; at most 1 for 2BW with ``m >= p``.

    Raises:
        ScheduleError: no rank runs ``stage``.

    Example:
        >>> from sim.schedules.registry import get_schedule
        >>> [delay_steps(get_schedule("pipedream")(4, 4).program(3), s) for s in range(4)]
        [3, 2, 1, 0]
    """
    steps = 0
    started: dict[int, int] = {}
    worst = 0
    for action in _rank_of(program, stage):
        if action.stage != stage:
            continue
        if action.op == STEP:
            steps += 1
        elif action.op == "F":
            started[action.microbatch] = steps
        elif action.op in ("B", "I") and action.microbatch in started:
            worst = max(worst, steps - started[action.microbatch])
    return worst


def _check_rank(
    actions: list[Action], rank: int, local: list[int], expected_mbs: set[int], steps: int
) -> None:
    ops: Counter[tuple[int, str, int]] = Counter()
    step_count = dict.fromkeys(local, 0)
    for pos, a in enumerate(flatten(actions)):
        where = f"rank {rank}, action {pos}: {a}"
        if a.stage not in step_count:
            raise ScheduleError(f"{where} belongs to stage {a.stage}, not to rank {rank}")
        if a.op == STEP:
            if a.microbatch != step_count[a.stage]:
                raise ScheduleError(f"{where}: want step number {step_count[a.stage]}")
            step_count[a.stage] += 1
            continue
        if a.microbatch not in expected_mbs:
            raise ScheduleError(f"{where}: no such micro-batch")
        needs = {"B": "F", "I": "F", "W": "I"}.get(a.op)
        if needs and not ops[(a.stage, needs, a.microbatch)]:
            raise ScheduleError(f"{where} runs before {needs}")
        ops[(a.stage, a.op, a.microbatch)] += 1
    for s in local:
        for mb in sorted(expected_mbs):
            n = {op: ops[(s, op, mb)] for op in "FBIW"}
            if n["F"] != 1 or n["B"] + n["I"] != 1 or n["W"] != n["I"]:
                raise ScheduleError(
                    f"rank {rank}: stage {s} micro-batch {mb} has {n}; want one F, one B"
                )
        if step_count[s] != steps:
            raise ScheduleError(f"rank {rank}: stage {s} has {step_count[s]} STEPs, want {steps}")


def validate_program(
    program: Program,
    stages: int,
    microbatches: int,
    iterations: int,
    *,
    steps: int | None = None,
    stage_ranks: Sequence[int] | None = None,
) -> None:
    """Check a program; raise on the first problem.

    Every rank runs only its stages (``stage_ranks[s]`` is the rank of stage ``s``; default:
    rank ``s`` runs stage ``s``); on every stage, every micro-batch ``0 .. iterations*microbatches-1``
    gets one F and one backward (B, or I then W) after it; STEPs are numbered 0, 1, ... and
    there are ``steps`` of them (default ``iterations``; PipeDream has ``iterations *
    microbatches``); and the ranks can run their lists to the end without deadlock under the
    dependencies of schedules.md §4.1 (:func:`check_deadlock_free`).

    Args:
        stages: pipeline depth ``p`` (ranks).

    Raises:
        ScheduleError: naming the rank, list position and action at fault.
    """
    if len(program) != stages:
        raise ScheduleError(f"program has {len(program)} ranks, want {stages}")
    owner = list(range(stages)) if stage_ranks is None else list(stage_ranks)
    expected = set(range(iterations * microbatches))
    for rank, actions in enumerate(program):
        local = [s for s, r in enumerate(owner) if r == rank]
        _check_rank(actions, rank, local, expected, iterations if steps is None else steps)
    check_deadlock_free(program)


def _ready(action: Action, done: set[Action], last_stage: int) -> bool:
    if action.sub_actions is not None:  # torch receives both inputs before the pair
        return all(_ready(a, done, last_stage) for a in action.sub_actions)
    s, op, mb = action.stage, action.op, action.microbatch
    if op == "F":
        return s == 0 or Action(s - 1, "F", mb) in done
    if op == "W":
        return Action(s, "I", mb) in done
    if op in ("B", "I"):
        downstream = s == last_stage or any(Action(s + 1, o, mb) in done for o in ("B", "I"))
        return downstream and Action(s, "F", mb) in done
    return True


def check_deadlock_free(program: Program) -> None:
    """Run every rank's list in order under the dependencies of schedules.md §4.1.

    F(s, mb) needs F(s-1, mb); B or I(s, mb) needs F(s, mb) and the backward (B or I) of
    (s+1, mb); W needs I. STEP waits for nothing. An ``OVERLAP_F_B`` pair waits for the
    dependencies of both its actions, as torch's runtime does. Any rank may advance whenever its next action's
    dependencies are done.

    Raises:
        ScheduleError: when all unfinished ranks wait, naming each rank's blocked action.
    """
    last_stage = max((a.stage for actions in program for a in flatten(actions)), default=0)
    done: set[Action] = set()
    pos = [0] * len(program)
    progress = True
    while progress:
        progress = False
        for rank, actions in enumerate(program):
            while pos[rank] < len(actions) and _ready(actions[pos[rank]], done, last_stage):
                done.update(flatten([actions[pos[rank]]]))
                pos[rank] += 1
                progress = True
    blocked = [
        f"rank {r} at {acts[pos[r]]}" for r, acts in enumerate(program) if pos[r] < len(acts)
    ]
    if blocked:
        raise ScheduleError("deadlock: " + ", ".join(blocked))

"""Where a replay's iteration time differs from the prediction, action by action.

For each rank, one iteration's time splits into its own work by op (``F``, ``B`` with any
recompute, the optimizer ``STEP`` with the tied all-reduces it waits in) and the rest, idle time (waiting for a neighbour, the
pipeline bubble, runtime overhead between actions). :func:`action_breakdown` puts the measured
and the predicted split side by side, so the error of ``sim validate`` reads as "B runs 8 %
slower than profiled" or "rank 1 waits 40 ms more per iteration" instead of one number.
"""

from __future__ import annotations

from collections import defaultdict

from sim.engine.collectives import TIED_ALLREDUCE
from sim.events import EventKind, EventLog
from sim.metrics import steady_window
from sim.point.simulate import Resolved
from sim.schedules.action import STEP, Action
from sim.validate.measured import measured_log

PARTS = ("F", "B", STEP, "idle")
"""The parts of one rank's iteration, in the order the table lists them."""


def _op_of(name: str) -> str | None:
    """``F``, ``B`` (B, I, W and their recompute ``R...``) or ``STEP`` of an event name."""
    base = name[1:] if name.startswith("R") else name
    try:
        action = Action.from_str(base)
    except ValueError:
        return None
    if action.op == STEP:
        return STEP
    return "F" if action.op == "F" else "B"


def _tied(e) -> bool:
    """Whether ``e`` is a predicted tied all-reduce of a step (``Collectives.join_tied``:
    from the rank's arrival, its wait for the other holders included): part of the STEP, as
    the replay's STEP action measures its ``Ties.reduce`` (``backends/torch/replay/runtime.py``)."""
    return (
        e.kind == EventKind.ALLREDUCE
        and e.name.startswith(TIED_ALLREDUCE)
        and e.iteration is not None
    )


def work_per_iteration(
    log: EventLog, *, microbatches: int, first_iteration: int, iterations: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """Per device, per op: ``(seconds per iteration, actions per iteration)`` of the compute,
    recompute and optimizer events (and, in STEP, the tied all-reduces before the update,
    :func:`_tied`) of iterations ``first_iteration .. first_iteration +
    iterations - 1`` (micro-batch ``mb`` belongs to iteration ``mb // microbatches``, step
    ``k`` to iteration ``k``, as the schedules number them).

    Raises:
        ValueError: ``iterations`` or ``microbatches`` below 1.
    """
    if iterations < 1 or microbatches < 1:
        raise ValueError(f"iterations and microbatches must be >= 1: {iterations}, {microbatches}")
    busy = {EventKind.COMPUTE, EventKind.RECOMPUTE, EventKind.OPTIMIZER}
    seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in log.events:
        if _tied(e):
            if first_iteration <= (e.iteration or 0) < first_iteration + iterations:
                seconds[e.device][STEP] += e.duration_s
            continue
        if e.kind not in busy:
            continue
        op = _op_of(e.name)
        if op is None:
            continue
        index = Action.from_str(e.name[1:] if e.name.startswith("R") else e.name).microbatch
        iteration = index if op == STEP else index // microbatches
        if not first_iteration <= iteration < first_iteration + iterations:
            continue
        seconds[e.device][op] += e.duration_s
        if e.kind != EventKind.RECOMPUTE:
            counts[e.device][op] += 1
    return {
        dev: {op: (seconds[dev][op] / iterations, counts[dev][op] / iterations) for op in ops}
        for dev, ops in seconds.items()
    }


def action_breakdown(
    measured: EventLog,
    measured_iteration_s: float,
    predicted: EventLog,
    predicted_iteration_s: float,
    *,
    microbatches: int,
    warmup_iterations: int,
    measured_iterations: int,
    predicted_window: tuple[int, int],
) -> list[dict]:
    """Rows ``rank, part, measured_s, predicted_s, diff_s, actions`` (seconds per iteration).

    ``measured`` is :func:`sim.validate.measured.measured_log` of the replay (its first
    ``warmup_iterations`` iterations are left out; ``measured_iterations`` follow);
    ``predicted`` is the engine's log, of which iterations ``predicted_window = (first,
    count)`` are used (the steady window of :func:`sim.metrics.steady_window`). ``idle`` is the iteration time less the rank's own work. Per rank the parts'
    ``diff_s`` add up to ``measured_iteration_s - predicted_iteration_s`` with the opposite
    sign convention of ``error``: positive means the replay spent more time there.

    Raises:
        ValueError: no measured or predicted iteration.
    """
    meas = work_per_iteration(
        measured,
        microbatches=microbatches,
        first_iteration=warmup_iterations,
        iterations=measured_iterations,
    )
    first, count = predicted_window
    pred = work_per_iteration(
        predicted, microbatches=microbatches, first_iteration=first, iterations=count
    )
    rows = []
    for dev in sorted(set(meas) | set(pred), key=lambda d: (len(d), d)):
        m_ops, p_ops = meas.get(dev, {}), pred.get(dev, {})
        for part in PARTS:
            if part == "idle":
                m_s = measured_iteration_s - sum(s for s, _ in m_ops.values())
                p_s = predicted_iteration_s - sum(s for s, _ in p_ops.values())
                n = 0.0
            else:
                m_s, n = m_ops.get(part, (0.0, 0.0))
                p_s = p_ops.get(part, (0.0, 0.0))[0]
            rows.append(
                dict(
                    rank=dev,
                    part=part,
                    measured_s=m_s,
                    predicted_s=p_s,
                    diff_s=m_s - p_s,
                    actions=n,
                )
            )
    return rows


def breakdown_rows(
    res: Resolved,
    spans: list[list[tuple[str, float, float, float]]],
    measured_iteration_s: float,
    predicted: EventLog,
    predicted_iteration_s: float,
    *,
    warmup_iterations: int,
    measured_iterations: int,
) -> list[dict]:
    """:func:`action_breakdown` of one replay of ``res`` by our runtime, each row headed by
    ``schedule, runtime, microbatches``; the predicted window is the steady one
    (:func:`sim.metrics.steady_window`) of ``predicted``."""
    point = res.point
    ends = predicted.iteration_ends_s
    start_s, _, steps = steady_window(
        ends, point.stages, point.microbatches, res.schedule.synchronous
    )
    first = ends.index(start_s) + 1 if start_s in ends else 0
    rows = action_breakdown(
        measured_log(spans),
        measured_iteration_s,
        predicted,
        predicted_iteration_s,
        microbatches=point.microbatches,
        warmup_iterations=warmup_iterations,
        measured_iterations=measured_iterations,
        predicted_window=(first, steps),
    )
    head = dict(schedule=point.schedule, runtime="ours", microbatches=point.microbatches)
    return [{**head, **r} for r in rows]

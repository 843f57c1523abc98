"""A replay's measured actions as an event log, and the measured and predicted timelines.

Each configuration replayed by our runtime gets ``measured-<schedule>-m<m>.json`` and
``predicted-<schedule>-m<m>.json`` (Chrome traces, :mod:`sim.report.chrome_trace`): open both
in https://ui.perfetto.dev to see where the replay and the simulation part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.events import Event, EventLog
from sim.point.config import PointConfig
from sim.report.chrome_trace import write_chrome_trace
from sim.schedules.action import STEP, Action


def measured_log(spans: list[list[tuple[str, float, float, float]]]) -> EventLog:
    """An :class:`EventLog` of a replay's measured per-rank actions (rank ``r`` is ``gpu<r>``).

    Each action becomes a ``stall`` span while it waited for its input and a ``compute`` (or
    ``optimizer``) span for the rest, so the measured timeline reads like the simulated one.

    Args:
        spans: per rank, ``(action, start_s, ready_s, end_s)`` (:class:`sim.replay.Measurement`).

    Example:
        >>> [(e.kind, e.name, e.start_s, e.end_s) for e in measured_log([[("0F0", 0, 1, 3)]]).events]
        [('stall', 'wait 0F0', 0, 1), ('compute', '0F0', 1, 3)]
    """
    log = EventLog()
    for rank, rank_spans in enumerate(spans):
        for name, start, ready, end in rank_spans:
            action = Action.from_str(name)
            meta: dict[str, Any] = dict(
                stage=action.stage, microbatch=None if action.op == STEP else action.microbatch
            )
            if ready > start:
                log.events.append(
                    Event("stall", f"gpu{rank}", "compute", f"wait {name}", start, ready, **meta)
                )
            kind = "optimizer" if action.op == STEP else "compute"
            log.events.append(Event(kind, f"gpu{rank}", "compute", name, ready, end, **meta))
    return log


def write_timelines(
    dest: Path,
    point: PointConfig,
    runtime: str,
    spans: list[list[tuple[str, float, float, float]]],
    predicted: EventLog,
) -> list[Path]:
    """Write the measured (when there are ``spans``) and the predicted timeline into ``dest``.

    Returns:
        The files written.
    """
    tag = f"{point.schedule}-m{point.microbatches}"
    written = []
    if spans:
        written.append(
            write_chrome_trace(
                measured_log(spans),
                dest / f"measured-{tag}.json",
                title=f"measured {tag} ({runtime} runtime)",
            )
        )
    written.append(
        write_chrome_trace(predicted, dest / f"predicted-{tag}.json", title=f"predicted {tag}")
    )
    return written

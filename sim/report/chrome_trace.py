"""Export an :class:`~sim.events.EventLog` as a Chrome trace (JSON) that Perfetto and
``chrome://tracing`` open, so a simulated timeline can sit beside a real torch profiler trace.

Layout: one process per device (``pid`` 0, 1, ... in display order: GPUs by number, then hosts),
one thread per stream (``compute`` first, then ``recv``, ``send``, ``p2p``, ``comm``, ``d2h``,
``h2d``); a stream with concurrent spans gets extra threads ``send (2)`` ... so that no span
hides another. Spans are complete events (``ph: "X"``) with ``ts`` and ``dur`` in microseconds; memory
in use is a counter track (``ph: "C"``) per device in GiB; iteration ends are global instant
events. The output depends only on the log, so the same log always gives the same JSON.

Bounded at scale: above :data:`sim.report.scale.PER_STAGE_ABOVE_GPUS` GPUs,
:func:`write_chrome_trace` keeps one GPU per stage (one pipeline with its collectives,
:func:`sim.report.scale.stage_view`), as the plots do; a 64-GPU job's full trace was 152 MB
(issue 30). Processes are named with their stage (``gpu3 (stage 1)``).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

from sim.atomic import atomic_write_bytes
from sim.events import Event, EventLog
from sim.report._common import (
    GIB,
    row_key,
    row_label,
    sorted_devices,
    stream_lanes,
)
from sim.report.memory import memory_timeline
from sim.report.scale import plotted_view

US_PER_S = 1e6
"""Microseconds per second: Chrome trace timestamps are in microseconds."""


def _jsonable(value: Any) -> Any:
    """``value`` reduced to JSON types, deterministically (sets are sorted)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=str)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _span_args(ev: Event) -> dict[str, Any]:
    args: dict[str, Any] = {"kind": ev.kind, "replica": ev.replica}
    for key in ("stage", "microbatch", "iteration"):
        if getattr(ev, key) is not None:
            args[key] = getattr(ev, key)
    if ev.nbytes:
        args["bytes"] = ev.nbytes
    if ev.links:
        args["links"] = list(ev.links)
    return args


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _metadata(
    pids: dict[str, int],
    tids: dict[tuple[str, str, int], int],
    log: EventLog,
    labels: dict[str, str] | None = None,
) -> list[dict]:
    """Names (``labels``, else the device's) and sort indices of processes (devices) and
    threads (streams)."""
    out: list[dict] = []
    for device, pid in pids.items():
        out.append(_meta("process_name", pid, 0, {"name": (labels or {}).get(device, device)}))
        out.append(_meta("process_sort_index", pid, 0, {"sort_index": pid}))
        if device in log.capacity_bytes:
            label = f"capacity {log.capacity_bytes[device] / GIB:.2f} GiB"
            out.append(_meta("process_labels", pid, 0, {"labels": label}))
    for (device, stream, lane), tid in tids.items():
        out.append(_meta("thread_name", pids[device], tid, {"name": row_label(stream, lane)}))
        out.append(_meta("thread_sort_index", pids[device], tid, {"sort_index": tid}))
    return out


def _memory_counters(log: EventLog, pids: dict[str, int]) -> list[dict]:
    out: list[dict] = []
    for device, (times_s, in_use) in memory_timeline(log).items():
        if len(times_s) <= 1:
            continue
        # One sample per timestamp: the value after the last event at that instant.
        samples = dict(zip(times_s, in_use, strict=True))
        for t, b in samples.items():
            counter = {"ph": "C", "name": "memory in use", "pid": pids[device], "tid": 0}
            out.append({**counter, "ts": t * US_PER_S, "args": {"GiB": b / GIB}})
    return out


def _in_order(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``spans`` by start, process, thread and longest first; spans equal in all four by their
    JSON text (sorted keys), so the order never depends on the log's order. The JSON text is
    made only for such ties."""
    spans = sorted(spans, key=lambda d: (d["ts"], d["pid"], d["tid"], -d["dur"]))
    out: list[dict[str, Any]] = []
    for _, group in itertools.groupby(spans, key=lambda d: (d["ts"], d["pid"], d["tid"], d["dur"])):
        tied = list(group)
        if len(tied) > 1:
            tied.sort(key=lambda d: json.dumps(d, sort_keys=True))
        out += tied
    return out


def to_chrome_trace(
    log: EventLog, *, title: str = "", labels: dict[str, str] | None = None
) -> dict:
    """Build a Chrome trace event document from an event log.

    Args:
        log: the simulation's event log (times in seconds, sizes in bytes).
        title: shown in the trace's ``otherData`` (Perfetto's "metadata" panel).
        labels: process names by device (default: the device names).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``. Each span
        becomes ``{"ph": "X", "name", "cat": kind, "ts": start_s * 1e6, "dur": duration_s * 1e6,
        "pid", "tid", "args": {kind, replica, stage, microbatch, iteration, bytes, links}}``
        (``ts``/``dur`` in microseconds; absent fields are left out of ``args``).
    """
    devices = sorted_devices(
        [e.device for e in log.events] + [m.device for m in log.memory] + list(log.capacity_bytes)
    )
    pids = {dev: i for i, dev in enumerate(devices)}
    rows = stream_lanes(log.events)
    tids: dict[tuple[str, str, int], int] = {}
    for row in sorted(set(rows), key=row_key):
        tids[row] = sum(1 for r in tids if r[0] == row[0]) + 1

    spans = _in_order(
        [
            {
                "ph": "X",
                "name": ev.name,
                "cat": ev.kind,
                "ts": ev.start_s * US_PER_S,
                "dur": ev.duration_s * US_PER_S,
                "pid": pids[ev.device],
                "tid": tids[row],
                "args": _span_args(ev),
            }
            for ev, row in zip(log.events, rows, strict=True)
        ]
    )
    trace: list[dict] = _metadata(pids, tids, log, labels)
    trace.extend(spans)
    trace.extend(_memory_counters(log, pids))
    for i, end_s in enumerate(log.iteration_ends_s):
        trace.append(
            {
                "ph": "i",
                "s": "g",
                "name": f"iteration {i} end",
                "pid": 0,
                "tid": 0,
                "ts": end_s * US_PER_S,
                "args": {"iteration": i},
            }
        )
    other = {
        "title": title,
        "generator": "pipesim",
        "time_unit_of_ts": "us",
        "meta": _jsonable(log.meta),
    }
    return {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": other}


def dumps_chrome_trace(
    log: EventLog, *, title: str = "", labels: dict[str, str] | None = None
) -> str:
    """The Chrome trace of ``log`` as a JSON string with sorted keys (deterministic)."""
    doc = to_chrome_trace(log, title=title, labels=labels)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def write_chrome_trace(log: EventLog, path: str | os.PathLike, *, title: str = "") -> Path:
    """Write the Chrome trace of ``log`` to ``path`` (JSON, atomically): every GPU up to
    :data:`~sim.report.scale.PER_STAGE_ABOVE_GPUS`, one per stage above (module doc).

    Returns:
        The path written. Open it at https://ui.perfetto.dev or ``chrome://tracing``.
    """
    view, labels, per_stage = plotted_view(log)
    if per_stage:
        title = f"{title} (one GPU per stage: {len(labels)} of the job's GPUs)".strip()
    text = dumps_chrome_trace(view, title=title, labels=labels)
    return atomic_write_bytes(path, text.encode("utf-8"))

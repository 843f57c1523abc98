"""Gantt timeline of one simulated run: one row per (device, stream), time in milliseconds.

Compute spans are coloured by op (``F`` forward, ``B`` full backward, ``I`` backward-input,
``W`` backward-weight, read from names like ``"2F5"``); recompute, optimizer steps, stage-boundary
transfers, all-reduces, swaps, chunk moves and stalls each have their own colour. Micro-batch
numbers are written inside compute and recompute bars that are wide enough to hold them. A stream
with concurrent spans gets extra rows (``send (2)``) so that no bar hides another.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import Any

from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from sim.events import Event, EventLog
from sim.report._common import (
    axes_for,
    finish,
    row_key,
    row_label,
    shade_periodic_gaps,
    stream_lanes,
)
from sim.report.scale import plotted_view

# (colour, hatch, legend label) per bar class, in legend order.
STYLES: dict[str, tuple[str, str, str]] = {
    "F": ("#1f77b4", "", "F forward"),
    "B": ("#2ca02c", "", "B backward"),
    "I": ("#98df8a", "", "I backward-input"),
    "W": ("#9467bd", "", "W backward-weight"),
    "compute": ("#17becf", "", "compute (other)"),
    "recompute": ("#aec7e8", "//", "recompute"),
    "optimizer": ("#e377c2", "", "optimizer step"),
    "transfer": ("#ff7f0e", "", "transfer (stage boundary)"),
    "allreduce": ("#d62728", "", "allreduce (data parallel)"),
    "reduce_scatter": ("#ff9896", "", "reduce-scatter (sharded DP)"),
    "all_gather": ("#f7b6d2", "", "all-gather (sharded DP)"),
    "host_optimizer": ("#dbdb8d", "", "optimizer step on the host"),
    "swap_out": ("#8c564b", "", "swap out"),
    "swap_in": ("#c49c94", "", "swap in"),
    "chunk_move": ("#bcbd22", "", "chunk move"),
    "alltoall": ("#393b79", "", "all-to-all (expert / context parallel)"),
    "ring_exchange": ("#6b6ecf", "..", "ring attention KV (context parallel)"),
    "stall": ("#7f7f7f", "xx", "stall (waiting for data)"),
    "host_wait": ("#bdbdbd", "..", "waiting for the host to issue"),
    "other": ("#c7c7c7", "", "other"),
}
"""Colour, hatch and legend label of each bar class."""

_OP_RE = re.compile(r"^\s*\d+([FBIW])\d+")
_LABELLED = ("compute", "recompute")
EDGE_PX = 3.0
"""Bars narrower than this (pixels) are drawn without the white edge that separates wide
ones: two 0.5-pt white edges covered them (deepseek-v3's all-to-alls read as blank rows)."""
_CHAR_PX = 6.0  # approximate width of one 7-pt character at 100 dpi


def bar_class(ev: Event) -> str:
    """The :data:`STYLES` key of an event: its op letter for compute, else its kind."""
    if ev.kind == "compute":
        m = _OP_RE.match(ev.name)
        return m.group(1) if m else "compute"
    return ev.kind if ev.kind in STYLES else "other"


def _window_s(log: EventLog, iteration: int | None) -> tuple[float, float]:
    """The time range (seconds) to show: the whole run, or one iteration's work."""
    if iteration is None:
        ends = [e.end_s for e in log.events] + log.iteration_ends_s
        return 0.0, max(ends, default=0.0)
    if not 0 <= iteration < len(log.iteration_ends_s):
        raise ValueError(
            f"iteration {iteration} is not in the log "
            f"({len(log.iteration_ends_s)} iteration(s) recorded)"
        )
    own = [e for e in log.events if e.iteration == iteration]
    start = log.iteration_ends_s[iteration - 1] if iteration > 0 else 0.0
    end = log.iteration_ends_s[iteration]
    if own:
        start = min(e.start_s for e in own)
        end = max(end, max(e.end_s for e in own))
    return start, end


def _text_color(color: str) -> str:
    r, g, b = to_rgb(color)
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"


def _label_bars(
    ax, shown: list[tuple[Event, int]], lo_ms: float, hi_ms: float, origin_ms: float
) -> None:
    """Write micro-batch numbers inside compute bars wide enough for them (``lo_ms``,
    ``hi_ms``: the window drawn, in axis coordinates, i.e. ms after ``origin_ms``)."""
    px_per_ms = ax.get_window_extent().width / max(hi_ms - lo_ms, 1e-12)
    for ev, row in shown:
        if ev.kind not in _LABELLED or ev.microbatch is None:
            continue
        a = max(ev.start_s * 1e3 - origin_ms, lo_ms)
        b = min(ev.end_s * 1e3 - origin_ms, hi_ms)
        text = str(ev.microbatch)
        if (b - a) * px_per_ms < len(text) * _CHAR_PX + 4:
            continue
        ax.text(
            (a + b) / 2,
            row,
            text,
            ha="center",
            va="center",
            fontsize=7,
            color=_text_color(STYLES[bar_class(ev)][0]),
            clip_on=True,
        )


Bars = dict[str, dict[int, list[tuple[float, float]]]]
"""``{bar class: {row: [(start ms, length ms), ...]}}``: what :func:`plot_gantt` draws."""


def plot_gantt(
    log: EventLog,
    path: str | os.PathLike | None = None,
    *,
    iteration: int | None = None,
    title: str = "",
    ax: Any = None,
) -> Any:
    """Draw the timeline of every device stream (above
    :data:`~sim.report.scale.PER_STAGE_ABOVE_GPUS` GPUs: one GPU per stage, so one pipeline
    with its collectives; below, every GPU labelled with its stage).

    Args:
        log: the simulation's event log.
        path: PNG to write (None: write nothing).
        iteration: show only this optimizer step (0-based): from the first start of its
            micro-batches' work (or the previous iteration's end) to its end in
            ``log.iteration_ends_s``, its x-axis in ms from that start (0 at the left edge).
            ``None`` shows the whole run, its x-axis in ms from the simulation's start.
        title: prefix of the figure title.
        ax: draw into these matplotlib axes (a notebook's) instead of a new figure.

    Returns:
        The :class:`matplotlib.figure.Figure` drawn on.

    Raises:
        ValueError: the log has no events, or ``iteration`` is not one of its iterations.
    """
    if not log.events:
        raise ValueError("the event log has no events to draw a timeline of")
    log, labels, per_stage = plotted_view(log)
    lo_s, hi_s = _window_s(log, iteration)
    pad_ms = 0.01 * max(hi_s - lo_s, 1e-9) * 1e3  # keep an iteration-end line off the frame
    # one iteration is drawn from its own start (an absolute 13,400-26,800 ms read as a bug)
    origin_ms = lo_s * 1e3 if iteration is not None else 0.0
    lo_ms, hi_ms = lo_s * 1e3 - origin_ms, hi_s * 1e3 + pad_ms - origin_ms
    lanes = stream_lanes(log.events)
    keys = sorted(set(lanes), key=row_key)
    rows = {k: i for i, k in enumerate(keys)}
    shown = [
        (ev, rows[lane])
        for ev, lane in zip(log.events, lanes, strict=True)
        if ev.end_s >= lo_s and ev.start_s <= hi_s
    ]
    bars: Bars = defaultdict(lambda: defaultdict(list))
    for ev, row in shown:
        bars[bar_class(ev)][row].append((ev.start_s * 1e3 - origin_ms, ev.duration_s * 1e3))

    fig, ax = axes_for(ax, (14.0, max(2.5, 0.38 * len(keys) + 1.6)))
    _draw_bars(ax, bars, ax.get_window_extent().width / max(hi_ms - lo_ms, 1e-12))
    shown_ends = [t for t in log.iteration_ends_s if lo_s <= t <= hi_s]
    for i, end_s in enumerate(shown_ends):
        ax.axvline(
            end_s * 1e3 - origin_ms,
            color="k",
            linestyle="--",
            linewidth=0.8,
            label="iteration end" if i == 0 else None,
        )
    shade_periodic_gaps(ax, log, lo_s, hi_s, origin_s=origin_ms / 1e3)
    for i in range(1, len(keys)):
        if keys[i][0] != keys[i - 1][0]:
            ax.axhline(i - 0.5, color="0.75", linewidth=0.6)
    ax.set_yticks(range(len(keys)), [f"{labels.get(d, d)} {row_label(s, n)}" for d, s, n in keys])
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.set_xlim(lo_ms, hi_ms)
    ax.set_xlabel(
        "time (ms)"
        if iteration is None
        else f"time (ms) from iteration {iteration}'s start ({origin_ms:,.1f} ms into the run)"
    )
    ax.set_ylabel("device, stream")
    _legend(ax, bars)
    span = "whole run" if iteration is None else f"iteration {iteration}"
    head = f"{title}: " if title else ""
    what = (
        "one pipeline (with its data-parallel collectives) timeline"
        if per_stage
        else "pipeline timeline"
    )
    ax.set_title(f"{head}{what}, {span} (time in ms; numbers are micro-batches)")
    _label_bars(ax, shown, lo_ms, hi_ms, origin_ms)
    return finish(fig, path)


def _draw_bars(ax: Any, bars: Bars, px_per_ms: float) -> None:
    """Draw ``bars`` in their :data:`STYLES`, each row a band of height 0.8; a bar narrower than
    :data:`EDGE_PX` pixels at ``px_per_ms`` has no white edge (it would hide its colour)."""
    for cls, (color, hatch, _) in STYLES.items():
        for row, spans in bars.get(cls, {}).items():
            wide = [sp for sp in spans if sp[1] * px_per_ms >= EDGE_PX]
            thin = [sp for sp in spans if sp[1] * px_per_ms < EDGE_PX]
            for group, edge in ((wide, 0.5), (thin, 0.0)):
                if group:
                    ax.broken_barh(
                        group,
                        (row - 0.4, 0.8),
                        facecolors=color,
                        hatch=hatch or None,
                        edgecolor="white" if edge else "none",
                        linewidth=edge,
                    )


def _legend(ax: Any, bars: Bars) -> None:
    """The legend right of the axes: a patch for each bar class drawn, then the lines'
    labels (the iteration end)."""
    handles: list[Any] = [
        Patch(facecolor=c, hatch=h or None, edgecolor="white", label=lab)
        for cls, (c, h, lab) in STYLES.items()
        if cls in bars
    ]
    handles += ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0))

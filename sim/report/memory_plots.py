"""Memory figures of one simulated run: peak per GPU by category, and memory over time.

Both read only the :class:`~sim.events.MemoryEvent` ledger and the capacities of the log, through
:mod:`sim.report.memory`. GPUs are shown (hosts only when the log has no GPU); sizes in GiB, times
in ms. Each function writes its PNG atomically, closes its figure and returns the path written.
"""

from __future__ import annotations

import os
from typing import Any

import matplotlib

from sim.events import EventLog
from sim.report._common import (
    GIB,
    axes_for,
    category_key,
    finish,
    is_host,
    shade_periodic_gaps,
)
from sim.report.memory import memory_timeline, peaks_by_category
from sim.report.scale import plotted_view

LINE_STYLES = ("-", "--", "-.", ":")
"""Line styles cycled with the colours of the memory timeline, so that equal lines stay told
apart."""

CATEGORY_COLORS = {
    "weights": "#1f77b4",
    "gradients": "#ff7f0e",
    "optimizer": "#2ca02c",
    "activations": "#d62728",
    "buffers": "#9467bd",
    "swap": "#8c564b",
    "chunks": "#bcbd22",
    "offload": "#17becf",
    "reserve": "#525252",
    "allocator": "#969696",
    "working": "#e377c2",
    "framework": "#d9d9d9",
}
"""Fill colour of each memory category (the runtime reserve and allocator margin in dark and
light grey, working memory in pink); other categories are light grey."""


def _plotted_devices(log: EventLog, devices: list[str]) -> list[str]:
    """Of ``devices`` (those with a memory timeline, in display order), the GPUs, or every
    device if there are no GPUs."""
    if not log.memory:
        raise ValueError("the event log has no memory events to plot")
    gpus = [d for d in devices if not is_host(d)]
    return gpus or devices


def _end_time_s(log: EventLog) -> float:
    ends = [e.end_s for e in log.events] + [m.time_s for m in log.memory] + log.iteration_ends_s
    return max(ends, default=0.0)


def plot_memory_per_gpu(
    log: EventLog, path: str | os.PathLike | None = None, *, title: str = "", ax: Any = None
) -> Any:
    """One bar per GPU: its peak memory (GiB), stacked by what is live at that peak.

    A dashed black segment over each bar marks the device's capacity; a peak above capacity is
    labelled in red.

    Above :data:`~sim.report.scale.PER_STAGE_ABOVE_GPUS` GPUs, one bar per stage (its GPU
    with the highest peak); below, one per GPU, labelled with its stage.

    Args:
        log: the simulation's event log.
        path: PNG to write (None: write nothing).
        title: a line above the plot's own title (``sim run``: the winner's configuration).
        ax: draw into these matplotlib axes (a notebook's) instead of a new figure.

    Returns:
        The :class:`matplotlib.figure.Figure` drawn on.

    Raises:
        ValueError: the log has no memory events.
    """
    log, labels, per_stage = plotted_view(log)
    devices = _plotted_devices(log, list(memory_timeline(log)))
    peaks = peaks_by_category(log)
    parts = {d: peaks[d] for d in devices}
    categories = sorted({c for p in parts.values() for c in p}, key=category_key)
    fig, ax = axes_for(ax, (max(6.0, 0.9 * len(devices) + 2.5), 4.5))
    xs = range(len(devices))
    bottom = _stacked_bars(ax, devices, parts, categories)
    top, any_over = _totals_and_capacities(ax, devices, bottom, log.capacity_bytes)
    ax.set_xticks(
        list(xs),
        [labels.get(d, d).replace(" (", "\n(") for d in devices],
        fontsize=8,
    )
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    ax.set_ylabel("memory at peak (GiB)")
    ax.set_xlabel("pipeline stage (its GPU with the highest peak)" if per_stage else "GPU")
    over_note = "; red numbers exceed capacity" if any_over else ""
    per = "stage" if per_stage else "GPU"
    head = f"{title}\n" if title else ""  # the configuration (sim run: the winner)
    ax.set_title(
        f"{head}Peak memory per {per} (GiB), stacked by category at each GPU's peak{over_note}"
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return finish(fig, path)


def _stacked_bars(
    ax: Any, devices: list[str], parts: dict[str, dict[str, float]], categories: list[str]
) -> list[float]:
    """One bar per device stacking each category's bytes at its peak, in GiB; returns the
    bars' heights (GiB)."""
    bottom = [0.0] * len(devices)
    for cat in categories:
        heights = [parts[d].get(cat, 0.0) / GIB for d in devices]
        ax.bar(
            range(len(devices)),
            heights,
            bottom=bottom,
            width=0.7,
            label=cat,
            color=CATEGORY_COLORS.get(cat, "#7f7f7f"),
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    return bottom


def _totals_and_capacities(
    ax: Any, devices: list[str], bottom: list[float], capacity_bytes: dict[str, float]
) -> tuple[float, bool]:
    """Each bar's total (GiB) above it, red where it exceeds the device's capacity, and the
    capacity as a dashed line; returns the highest of both (GiB) and whether any exceeds."""
    top = max(bottom, default=0.0)
    cap_label: str | None = "capacity"
    any_over = False
    for x, dev in enumerate(devices):
        cap = capacity_bytes.get(dev)
        over = cap is not None and bottom[x] * GIB > cap
        any_over = any_over or over
        ax.annotate(
            f"{bottom[x]:.2f}",
            (x, bottom[x]),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 2),
            textcoords="offset points",
            color="red" if over else "k",
        )
        if cap is not None:
            ax.hlines(
                cap / GIB,
                x - 0.45,
                x + 0.45,
                colors="k",
                linestyles="--",
                label=cap_label or "_nolegend_",
            )
            cap_label = None
            top = max(top, cap / GIB)
    return top, any_over


def plot_memory_timeline(
    log: EventLog, path: str | os.PathLike | None = None, *, title: str = "", ax: Any = None
) -> Any:
    """Each GPU's memory in use (GiB) over time (ms) as step lines, with capacities.

    One dashed black line marks the capacity when every GPU has the same one; otherwise each
    GPU's capacity is dashed in its own colour. Dotted grey lines mark iteration ends.

    Above :data:`~sim.report.scale.PER_STAGE_ABOVE_GPUS` GPUs, one line per stage; each line
    has its own colour and dash pattern.

    Args:
        log: the simulation's event log.
        path: PNG to write (None: write nothing).
        title: a line above the plot's own title (``sim run``: the winner's configuration).
        ax: draw into these matplotlib axes (a notebook's) instead of a new figure.

    Returns:
        The :class:`matplotlib.figure.Figure` drawn on.

    Raises:
        ValueError: the log has no memory events.
    """
    log, labels, per_stage = plotted_view(log)
    timelines = memory_timeline(log)
    devices = _plotted_devices(log, list(timelines))
    end_ms = _end_time_s(log) * 1e3
    cmap = matplotlib.colormaps["tab10" if len(devices) <= 10 else "tab20"]
    fig, ax = axes_for(ax, (11.0, 4.8))
    caps = {d: log.capacity_bytes[d] / GIB for d in devices if d in log.capacity_bytes}
    shared_cap = len(set(caps.values())) == 1 and len(caps) == len(devices)
    for i, dev in enumerate(devices):
        times_s, in_use = timelines[dev]
        xs = [t * 1e3 for t in times_s] + [max(end_ms, times_s[-1] * 1e3)]
        ys = [b / GIB for b in in_use] + [in_use[-1] / GIB]
        color = cmap(i % cmap.N)
        ax.step(
            xs,
            ys,
            where="post",
            color=color,
            linestyle=LINE_STYLES[i % len(LINE_STYLES)],
            label=labels.get(dev, dev),
            linewidth=1.4,
        )
        if dev in caps and not shared_cap:
            ax.axhline(
                caps[dev], color=color, linestyle="--", linewidth=0.9, label=f"{dev} capacity"
            )
    if shared_cap and caps:
        cap = next(iter(caps.values()))
        ax.axhline(cap, color="k", linestyle="--", label=f"capacity {cap:.1f} GiB")
    for j, end_s in enumerate(log.iteration_ends_s):
        ax.axvline(
            end_s * 1e3,
            color="0.6",
            linestyle=":",
            linewidth=0.9,
            label="iteration end" if j == 0 else None,
        )
    shade_periodic_gaps(ax, log, 0.0, end_ms / 1e3)
    ax.set_xlim(0, max(end_ms, 1e-9))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("memory in use (GiB)")
    head = f"{title}\n" if title else ""  # the configuration (sim run: the winner)
    ax.set_title(f"{head}Memory in use per {'stage' if per_stage else 'GPU'} over time (GiB)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return finish(fig, path)

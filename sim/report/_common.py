"""Helpers shared by the report modules: device and stream ordering, unit constants, atomic writes.

Every report file is written atomically: the bytes go to a temporary file in the destination
directory, which then replaces the destination with :func:`os.replace`, so a reader never sees a
half-written PNG or JSON.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sim.atomic import atomic_write_bytes
from sim.events import Event, EventLog

GIB = float(2**30)
"""Bytes per GiB."""

_HOST_PREFIXES = ("cpu", "host")
_STREAM_ORDER = ("compute", "recv", "send", "p2p", "comm", "d2h", "h2d")
_CATEGORY_ORDER = ("weights", "gradients", "optimizer", "activations", "buffers", "swap")


def is_host(device: str) -> bool:
    """True for host devices (``cpu0``, ``host1``); every other device is an accelerator."""
    return device.lower().startswith(_HOST_PREFIXES)


def device_key(device: str) -> tuple:
    """Sort key: accelerators before hosts, then by name with numbers in numeric order.

    ``gpu2`` sorts before ``gpu10``, and ``cpu0`` after every GPU.
    """
    parts = re.split(r"(\d+)", device)
    natural = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p)
    return (is_host(device), natural)


def sorted_devices(devices: Iterable[str]) -> list[str]:
    """Distinct devices in display order (see :func:`device_key`)."""
    return sorted(set(devices), key=device_key)


def stream_key(stream: str) -> tuple[int, str]:
    """Sort key for streams: compute first, then recv, send, p2p, comm, d2h, h2d, others by name."""
    rank = _STREAM_ORDER.index(stream) if stream in _STREAM_ORDER else len(_STREAM_ORDER)
    return (rank, stream)


def category_key(category: str) -> tuple[int, str]:
    """Sort key for memory categories: weights, gradients, optimizer, activations, buffers, swap."""
    rank = _CATEGORY_ORDER.index(category) if category in _CATEGORY_ORDER else len(_CATEGORY_ORDER)
    return (rank, category)


def stream_lanes(events: Sequence[Event]) -> list[tuple[str, str, int]]:
    """Place each span on a lane of its ``(device, stream)`` so spans on one lane never overlap.

    Most streams need one lane; a stream the engine runs concurrent spans on (two sends to
    different peers, say) gets more, so timelines show every span instead of hiding one under
    another. Placement is greedy by start time (lowest free lane first) and deterministic.

    Returns:
        ``(device, stream, lane)`` for each event, in the order of ``events``.
    """
    order = sorted(range(len(events)), key=lambda i: _span_order(events[i]))
    lane_ends: dict[tuple[str, str], list[float]] = {}
    out: list[tuple[str, str, int]] = [("", "", 0)] * len(events)
    for i in order:
        ev = events[i]
        ends = lane_ends.setdefault((ev.device, ev.stream), [])
        for lane, end in enumerate(ends):  # the lowest lane free at the start
            if end <= ev.start_s:
                ends[lane] = ev.end_s
                break
        else:
            lane = len(ends)
            ends.append(ev.end_s)
        out[i] = (ev.device, ev.stream, lane)
    return out


def _span_order(ev: Event) -> tuple:
    return (ev.start_s, -ev.end_s, ev.kind, ev.name, ev.stage or 0, ev.microbatch or 0)


def row_key(row: tuple[str, str, int]) -> tuple:
    """Sort key of a ``(device, stream, lane)`` row: device order, then stream order, then lane."""
    return (device_key(row[0]), stream_key(row[1]), row[2])


def row_label(stream: str, lane: int) -> str:
    """Display name of a stream lane: ``send``, then ``send (2)``, ``send (3)`` ..."""
    return stream if lane == 0 else f"{stream} ({lane + 1})"


PAD_INCHES = 0.1
"""Margin around everything drawn, in inches (matplotlib's ``savefig.pad_inches`` default)."""
PNG_COMPRESS_LEVEL = 1
"""zlib level of the PNGs (Pillow's default is 6): level 1 writes a plot about a quarter
faster for files about a quarter larger."""


def axes_for(ax: Any, figsize: tuple[float, float], **figure_kw: Any) -> tuple[Any, Any]:
    """``(figure, axes)`` to draw on: ``ax`` and its figure when given (a notebook's), else a
    new :class:`matplotlib.figure.Figure` of ``figsize`` inches with one axes. A new figure
    is made without pyplot: no backend is chosen, no global state kept, and it is freed like
    any object (matplotlib's advice for figures made outside an interactive session)."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, **figure_kw)
    return fig, fig.add_subplot()


def finish(fig: Any, path: str | os.PathLike | None) -> Any:
    """Write ``fig`` to ``path`` (PNG, :func:`save_figure`) when one is given; returns ``fig``."""
    if path is not None:
        save_figure(fig, path)
    return fig


STYLE_CYCLE = (
    ("o", "-", 9.0),
    ("s", "--", 7.5),
    ("^", "-.", 7.0),
    ("D", ":", 6.0),
    ("v", (0, (5, 1, 1, 1)), 6.5),
    ("P", (0, (3, 1, 1, 1, 1, 1)), 6.5),
    ("X", (0, (1, 1)), 6.0),
    ("*", (0, (6, 2)), 8.0),
)
"""``(marker, line style, marker size)`` per series, so that series with equal values stay
visible: different markers and dashes, and markers that shrink down the cycle so a later one
sits inside an earlier one."""


def series_style(i: int) -> dict[str, Any]:
    """Matplotlib keyword arguments of the ``i``-th series (:data:`STYLE_CYCLE`)."""
    marker, dashes, size = STYLE_CYCLE[i % len(STYLE_CYCLE)]
    return {"marker": marker, "linestyle": dashes, "markersize": size}


def save_figure(fig: Any, path: str | os.PathLike, *, dpi: int = 120) -> Path:
    """Render a matplotlib figure to PNG and write it to ``path`` atomically, cropped to what
    is drawn (legends outside the axes included) plus :data:`PAD_INCHES`.

    Without a layout engine the crop box is measured from the artists' extents (no
    rendering), so the figure is drawn once; ``bbox_inches="tight"`` draws it twice, which a
    figure with a layout engine (``layout="constrained"``) needs anyway to place its axes.

    Returns:
        The path written.
    """
    box: Any = "tight"
    if not hasattr(fig.canvas, "get_renderer"):  # a figure made without pyplot
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    if fig.get_layout_engine() is None:
        fig.set_dpi(dpi)
        box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(PAD_INCHES)
    buf = io.BytesIO()
    fig.savefig(
        buf,
        format="png",
        dpi=dpi,
        bbox_inches=box,
        pad_inches=PAD_INCHES,
        pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL},
    )
    return atomic_write_bytes(path, buf.getvalue())


def shade_periodic_gaps(
    ax: Any, log: EventLog, lo_s: float, hi_s: float, *, origin_s: float = 0.0
) -> None:
    """Shade the spans where :mod:`sim.engine.periodic` inserted steady-state periods it
    simulated once (``log.meta["periodic_gaps_s"]``): the log has no events there, so without
    the shading a timeline reads as idle GPUs (a memory plot as flat memory). ``lo_s``,
    ``hi_s``: the time window drawn (seconds); ``origin_s``: the time at the axis' 0 (a plot of
    one iteration is drawn from its start)."""
    gaps = [(a, b) for a, b in log.meta.get("periodic_gaps_s", []) if b >= lo_s and a <= hi_s]
    for i, (a, b) in enumerate(gaps):
        ax.axvspan(
            (a - origin_s) * 1e3,
            (b - origin_s) * 1e3,
            facecolor="0.93",
            hatch="//",
            edgecolor="0.75",
            linewidth=0,
            zorder=0,
            label="steady state, simulated once, not drawn" if i == 0 else None,
        )

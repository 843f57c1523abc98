"""Where the winner's plots and timeline come from: :func:`prediction_source` and
:func:`stamped`.

``sim run`` writes the winner's plots (``timeline.png``, ``memory_per_gpu.png``,
``memory_timeline.png``) and Chrome trace (``timeline.json``) from one simulation. A PNG or a
JSON seen on its own does not say that its times and bytes are a prediction, nor on which
hardware description and from which kind of trace; the run records that once in the event
log's ``meta["provenance"]`` (so ``timeline.json``'s ``otherData.meta`` carries it) and
:func:`stamped` writes it under each plot.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from sim.events import EventLog
from sim.point.experiment import Prepared
from sim.report._common import finish
from sim.trace.origin import trace_origin

PREDICTED = "pipesim prediction (simulated, not measured)"
"""The first words of every :func:`prediction_source`."""

META_KEY = "provenance"
"""The event log's ``meta`` key holding :func:`prediction_source`."""


def prediction_source(hardware: str, trace: str, trace_origin: str) -> str:
    """One line naming what a simulation's figures were predicted with.

    Args:
        hardware: the hardware description's name (``Topology.name``; its figures' sources:
            ``sim hardware show``).
        trace: the trace's name.
        trace_origin: ``measured``, ``roofline estimate``, ``analytic``, ``hand-written`` or
            ``unknown`` (:mod:`sim.trace.origin`).

    Example:
        >>> prediction_source("dgx1-v100-16gb", "gpt2-1.5b", "analytic")
        'pipesim prediction (simulated, not measured): hardware dgx1-v100-16gb (sources: sim hardware show dgx1-v100-16gb), analytic trace gpt2-1.5b'
    """  # noqa: E501
    return (
        f"{PREDICTED}: hardware {hardware} (sources: sim hardware show {hardware}), "
        f"{trace_origin} trace {trace}"
    )


def experiment_sources(prep: Prepared) -> dict[str, str]:
    """Per model of a prepared experiment, its :func:`prediction_source` (the experiment's
    hardware, the model's trace and its origin)."""
    hardware = prep.topology.name
    return {
        name: prediction_source(hardware, trace.name, trace_origin(trace))
        for name, trace in prep.traces.items()
    }


def joined(sources: dict[str, str]) -> str:
    """The distinct texts of ``sources`` (:func:`experiment_sources`), ``"; "``-joined: one
    footnote for a plot of several models."""
    return "; ".join(dict.fromkeys(sources.values()))


def stamped(
    plot: Callable[..., Any], log: EventLog, path: str | os.PathLike | None, **kw: Any
) -> Any:
    """``plot(log, None, **kw)`` with ``log.meta["provenance"]`` written under the figure (when
    the log has one), saved to ``path`` (PNG) when given. Returns the figure."""
    return footnoted(plot, log, path=path, text=str(log.meta.get(META_KEY) or ""), **kw)


def footnoted(
    plot: Callable[..., Any],
    *args: Any,
    path: str | os.PathLike | None,
    text: str,
    **kw: Any,
) -> Any:
    """``plot(*args, None, **kw)`` with ``text`` under the figure (:func:`footnote`; none when
    empty), saved to ``path`` (PNG) when given. Returns the figure."""
    fig = plot(*args, None, **kw)
    if text:
        footnote(fig, text)
    return finish(fig, path)


def footnote(fig: Any, text: str) -> None:
    """Write ``text`` (e.g. a :func:`prediction_source`) small, under everything ``fig``'s
    axes draw."""
    fig.text(0.01, _below_axes(fig), text, fontsize=7, color="0.35", va="top")


def _below_axes(fig: Any) -> float:
    """The figure-fraction height just under everything the axes draw (tick labels and axis
    labels included), where a footnote overlaps nothing. An axes that draws nothing (hidden:
    ``get_tightbbox`` is None, as the spare panels of a grid) is left out; with none drawn,
    the figure's bottom."""
    if not hasattr(fig.canvas, "get_renderer"):  # a figure made without pyplot
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib on first use

        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    boxes = [b for b in (ax.get_tightbbox(renderer) for ax in fig.axes) if b is not None]
    if not boxes:
        return 0.03
    bottom_px = min(b.y0 for b in boxes)
    return float(fig.transFigure.inverted().transform((0.0, bottom_px))[1]) - 0.01

"""Static PNG figures of a sweep and of one simulated run (matplotlib, Agg backend).

* :func:`plot_throughput` (here): samples/s against micro-batches per iteration, one line per
  schedule.
* :func:`plot_memory_per_gpu`, :func:`plot_memory_timeline` (from :mod:`sim.report.memory_plots`):
  each GPU's peak memory stacked by category; each GPU's memory over time; with capacities.
* :func:`plot_gantt` (from :mod:`sim.report.gantt`): the timeline of every device stream.

Every function writes its PNG atomically, closes its figure and returns the path written.
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

import matplotlib
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator

from sim.report._common import finish, series_style
from sim.report.gantt import plot_gantt
from sim.report.memory_plots import plot_memory_per_gpu, plot_memory_timeline

__all__ = ["plot_gantt", "plot_memory_per_gpu", "plot_memory_timeline", "plot_throughput"]

_THROUGHPUT_COLUMNS = ("model", "schedule", "microbatches", "throughput_samples_per_s", "fits")
_OTHER_KNOBS = {
    "stages": "stages",
    "virtual_stages": "virtual stages",
    "dp_width": "DP width",
    "dp_shard": "FSDP shard",
    "tensor_parallel": "tensor parallel",
    "sequence_parallel": "sequence parallel",
    "context_parallel": "context parallel",
    "expert_parallel": "expert parallel",
    "microbatch_size": "micro-batch size",
    "memory_policy": "memory policy",
    "precision": "precision",
}


_BAND = ("throughput_low_samples_per_s", "throughput_high_samples_per_s")
BAND_LABEL = "band: p10–p90 of measured / predicted"
"""Legend entry of the error bars (:mod:`sim.report.row_bands`)."""


def _band_bars(ax, fitting: pd.DataFrame, color: Any) -> bool:
    """Error bars from each micro-batch count's best fitting row's band (its
    ``throughput_low/high_samples_per_s``, :mod:`sim.report.row_bands`), drawn from low to high
    about the band's own middle: a band may lie wholly below (or above) its prediction (a
    regime pipesim predicts too fast: ``experiments/megatron-scaling.yaml`` at t = 8), where
    bars anchored on the prediction would have a negative side; False when the rows have
    none."""
    if not set(_BAND) <= set(fitting.columns) or fitting[_BAND[0]].isna().all():
        return False
    best = fitting.loc[fitting.groupby("microbatches")["throughput_samples_per_s"].idxmax()]
    best = best.dropna(subset=list(_BAND))
    low, high = best[_BAND[0]], best[_BAND[1]]
    mid, half = (low + high) / 2, (high - low).abs() / 2
    ax.errorbar(
        best["microbatches"], mid, yerr=half, fmt="none", ecolor=color, capsize=3, alpha=0.6
    )
    return True


def _throughput_facet(
    ax, df: pd.DataFrame, colors: dict[str, Any], styles: dict[str, dict[str, Any]]
) -> None:
    """Draw one model's lines (best fitting config) and hollow markers (best non-fitting),
    each schedule with its own colour, marker and dashes (:func:`series_style`), so that
    schedules with equal throughput stay visible."""
    for schedule, rows in df.groupby("schedule", sort=True):
        color, style = colors[schedule], styles[schedule]
        best_fit = rows[rows["fits"]].groupby("microbatches")["throughput_samples_per_s"].max()
        best_oom = rows[~rows["fits"]].groupby("microbatches")["throughput_samples_per_s"].max()
        if len(best_fit):
            ax.plot(best_fit.index, best_fit.values, color=color, alpha=0.9, **style)
            _band_bars(ax, rows[rows["fits"]], color)
        if len(best_oom):
            ax.plot(
                best_oom.index,
                best_oom.values,
                color=color,
                markerfacecolor="none",
                markeredgewidth=1.5,
                zorder=3,
                **{**style, "linestyle": "none"},
            )
    ms = sorted(df["microbatches"].unique())
    if ms and ms[0] > 0 and ms[-1] / ms[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ms))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(int(m)) for m in ms])
    ax.set_xlabel("micro-batches per iteration m")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def plot_throughput(
    results_df: pd.DataFrame, path: str | os.PathLike | None = None, *, ax: Any = None
) -> Any:
    """Throughput (samples/s) against micro-batches per iteration, one line per schedule.

    Each point is the best configuration at that ``(model, schedule, microbatches)`` over the
    other swept knobs (stages, DP width, micro-batch size, memory policy). Filled markers joined
    by lines: the best configuration that fits in memory, with its prediction band as error bars
    where the table has one (``throughput_low/high_samples_per_s``: :mod:`sim.report.row_bands`). Hollow markers: the best one that does
    not fit (what it would give with more memory). Several models give one panel per model.

    Args:
        results_df: the sweep's table; needs ``model, schedule, microbatches,
            throughput_samples_per_s, fits``.
        path: PNG to write (None: write nothing).
        ax: draw into these matplotlib axes (a notebook's; the table must hold one model).

    Returns:
        The :class:`matplotlib.figure.Figure` drawn on.

    Raises:
        ValueError: the table is empty or lacks a needed column; ``ax`` with several models.
    """
    missing = [c for c in _THROUGHPUT_COLUMNS if c not in results_df.columns]
    if missing:
        raise ValueError(f"results table lacks column(s) {missing} needed by plot_throughput")
    df = results_df.dropna(subset=["throughput_samples_per_s"]).copy()
    if df.empty:
        raise ValueError("results table has no rows with a throughput to plot")
    df["fits"] = df["fits"].astype(bool)
    df["model"] = df["model"].astype(str)
    df["schedule"] = df["schedule"].astype(str)
    models = sorted(df["model"].unique())
    schedules = sorted(df["schedule"].unique())
    cmap = matplotlib.colormaps["tab10" if len(schedules) <= 10 else "tab20"]
    colors = {s: cmap(i % cmap.N) for i, s in enumerate(schedules)}
    styles = {s: series_style(i) for i, s in enumerate(schedules)}
    fig, axes = _panels(ax, len(models))
    for panel, model in zip(axes, models, strict=False):
        _throughput_facet(panel, df[df["model"] == model], colors, styles)
        panel.set_title(f"model {model}")
    for panel in axes[len(models) :]:
        panel.set_visible(False)
    handles = [Line2D([], [], color=colors[s], label=s, **styles[s]) for s in schedules]
    handles.append(Line2D([], [], color="k", marker="o", label="fits in memory"))
    if set(_BAND) <= set(df.columns) and df[_BAND[0]].notna().any():
        handles.append(Line2D([], [], color="k", marker="|", linestyle="none", label=BAND_LABEL))
    if (~df["fits"]).any():
        handles.append(
            Line2D(
                [],
                [],
                color="k",
                marker="o",
                linestyle="none",
                markerfacecolor="none",
                label="does not fit in memory",
            )
        )
    axes[0].legend(handles=handles, fontsize=8, loc="best")
    varied = [
        name for col, name in _OTHER_KNOBS.items() if col in df.columns and df[col].nunique() > 1
    ]
    over = textwrap.fill(f"(each point: best config over {', '.join(varied)})", 70)
    sub = f"\n{over}" if varied else ""
    fig.suptitle(f"Throughput (samples/s) vs micro-batches per iteration{sub}")
    return finish(fig, path)


def _panels(ax: Any, n: int) -> tuple[Any, list[Any]]:
    """``(figure, axes)``: ``[ax]`` when given (one model), else a new figure of up to three
    panels per row (made without pyplot: :func:`sim.report._common.axes_for`).

    Raises:
        ValueError: ``ax`` given for several models.
    """
    if ax is not None:
        if n != 1:
            raise ValueError(f"ax= draws one model, the table has {n}: pass one model's rows")
        return ax.figure, [ax]
    from matplotlib.figure import Figure

    ncols = min(n, 3)
    nrows = -(-n // ncols)
    fig = Figure(figsize=(6.0 * ncols, 4.2 * nrows + 0.6), layout="constrained")
    return fig, list(fig.subplots(nrows, ncols, squeeze=False).flat)

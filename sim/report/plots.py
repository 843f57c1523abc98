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
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

from sim.report._common import save_figure  # noqa: E402
from sim.report.gantt import plot_gantt  # noqa: E402
from sim.report.memory_plots import plot_memory_per_gpu, plot_memory_timeline  # noqa: E402

__all__ = ["plot_gantt", "plot_memory_per_gpu", "plot_memory_timeline", "plot_throughput"]

_THROUGHPUT_COLUMNS = ("model", "schedule", "microbatches", "throughput_samples_per_s", "fits")
_OTHER_KNOBS = {
    "stages": "stages",
    "dp_width": "DP width",
    "microbatch_size": "micro-batch size",
    "memory_policy": "memory policy",
}


def _throughput_facet(ax, df: pd.DataFrame, colors: dict[str, Any]) -> None:
    """Draw one model's lines (best fitting config) and hollow markers (best non-fitting)."""
    for schedule, rows in df.groupby("schedule", sort=True):
        color = colors[schedule]
        best_fit = rows[rows["fits"]].groupby("microbatches")["throughput_samples_per_s"].max()
        best_oom = rows[~rows["fits"]].groupby("microbatches")["throughput_samples_per_s"].max()
        if len(best_fit):
            ax.plot(best_fit.index, best_fit.values, "o-", color=color)
        if len(best_oom):
            ax.plot(
                best_oom.index,
                best_oom.values,
                "o",
                color=color,
                markerfacecolor="none",
                markersize=9,
                markeredgewidth=1.5,
                zorder=3,
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


def plot_throughput(results_df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Throughput (samples/s) against micro-batches per iteration, one line per schedule.

    Each point is the best configuration at that ``(model, schedule, microbatches)`` over the
    other swept knobs (stages, DP width, micro-batch size, memory policy). Filled markers joined
    by lines: the best configuration that fits in memory. Hollow markers: the best one that does
    not fit (what it would give with more memory). Several models give one panel per model.

    Args:
        results_df: the sweep's table; needs ``model, schedule, microbatches,
            throughput_samples_per_s, fits``.
        path: PNG to write.

    Returns:
        The path written.

    Raises:
        ValueError: the table is empty or lacks a needed column.
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
    cmap = plt.get_cmap("tab10" if len(schedules) <= 10 else "tab20")
    colors = {s: cmap(i % cmap.N) for i, s in enumerate(schedules)}
    ncols = min(len(models), 3)
    nrows = -(-len(models) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(6.0 * ncols, 4.2 * nrows + 0.6), squeeze=False, layout="constrained"
    )
    try:
        for ax, model in zip(axes.flat, models, strict=False):
            _throughput_facet(ax, df[df["model"] == model], colors)
            ax.set_title(f"model {model}")
        for ax in list(axes.flat)[len(models) :]:
            ax.set_visible(False)
        handles = [Line2D([], [], color=colors[s], marker="o", label=s) for s in schedules]
        handles.append(Line2D([], [], color="k", marker="o", label="fits in memory"))
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
        axes.flat[0].legend(handles=handles, fontsize=8, loc="best")
        varied = [
            name
            for col, name in _OTHER_KNOBS.items()
            if col in df.columns and df[col].nunique() > 1
        ]
        sub = f"\n(each point: best config over {', '.join(varied)})" if varied else ""
        fig.suptitle(f"Throughput (samples/s) vs micro-batches per iteration{sub}")
        return save_figure(fig, path)
    finally:
        plt.close(fig)

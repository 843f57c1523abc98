"""``sim memory``'s outputs: the peaks per pipeline rank as a table, a CSV and stacked bars.

:func:`memory_frame` has one row per configuration and pipeline rank (bytes of every category
of :data:`sim.memory.rank_memory.CATEGORIES` at the rank's peak; ``allocated``, ``reserved``,
``device`` and ``capacity`` bytes; ``fits``; the action the peak falls in; the advice for a
configuration that does not fit); :func:`memory_table` one line per configuration (its tightest
rank); :func:`plot_memory_ranks` one panel per configuration (the first :data:`MAX_PANELS`), a
bar per pipeline rank stacked by category with the capacity dashed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from sim.memory.rank_memory import CATEGORIES  # noqa: E402
from sim.plan.memory_grid import GridMemory  # noqa: E402
from sim.report._common import GIB, save_figure  # noqa: E402
from sim.report.memory_plots import CATEGORY_COLORS  # noqa: E402
from sim.report.provenance import footnote  # noqa: E402
from sim.report.tables import config_label  # noqa: E402

POINT_COLUMNS = (
    "model",
    "schedule",
    "stages",
    "virtual_stages",
    "dp_width",
    "tensor_parallel",
    "sequence_parallel",
    "context_parallel",
    "expert_parallel",
    "microbatch_size",
    "microbatches",
    "memory_policy",
    "framework",
)
"""The configuration's columns, as ``results.csv`` names them."""
MAX_PANELS = 12
"""Configurations drawn by :func:`plot_memory_ranks` (the CSV has every one)."""


def label(gm: GridMemory) -> str:
    """The model and its configuration as ``sim run``'s table names it
    (:func:`~sim.report.tables.config_label`: ``llama 1f1b p=4 w=8 t=2+sp b=1 m=16 dist_opt``)."""
    return f"{gm.point.model} {config_label(gm.point)}"


def memory_frame(
    results: list[GridMemory], sources: dict[str, str] | None = None, reserve_source: str = ""
) -> pd.DataFrame:
    """One row per configuration and pipeline rank (module doc); a configuration that could
    not be resolved has one row with its ``error``. ``sources``: per model, what its figures
    are predicted with (:func:`sim.report.provenance.prediction_source`), the ``source``
    column ("" for a model not in it). ``reserve_source``: where ``reserve_bytes`` comes from
    (:func:`sim.hardware.provenance.reserve_source`), the ``reserve_source`` column of every
    rank's row."""
    rows = []
    for gm in results:
        base = {c: getattr(gm.point, c) for c in POINT_COLUMNS}
        base["source"] = (sources or {}).get(gm.point.model, "")
        advice = gm.advice.text() if gm.advice else ""
        if gm.memory is None:
            rows.append({**base, "pipeline_rank": None, "error": gm.error})
            continue
        for rank, r in enumerate(gm.memory.ranks):
            rows.append(
                {
                    **base,
                    "pipeline_rank": rank,
                    "stages_on_rank": " ".join(str(s) for s in r.stages),
                    **{f"{c}_bytes": r.by_category.get(c, 0.0) for c in CATEGORIES},
                    "reserve_source": reserve_source,
                    "allocated_bytes": r.allocated_bytes,
                    "reserved_bytes": r.reserved_bytes,
                    "device_bytes": r.device_bytes,
                    "capacity_bytes": r.capacity_bytes,
                    "headroom_bytes": r.headroom_bytes,
                    "fits": r.fits,
                    "peak_at": r.peak_at,
                    "advice": advice if r is gm.memory.tightest else "",
                    "error": "",
                }
            )
    return pd.DataFrame(rows)


CAPTION = (
    "allocated: torch.cuda.max_memory_allocated; reserved: max_memory_reserved (allocated plus "
    "the caching allocator's cache); device: reserved plus the runtime reserve (CUDA context, "
    "libraries); capacity: the GPU's memory as CUDA reports it (the hardware description: sim "
    "hardware show)"
)
"""What :func:`memory_table`'s columns are (:class:`~sim.memory.rank_memory.RankMemory`)."""


def memory_table(results: list[GridMemory]) -> Table:
    """One line per configuration: its tightest rank's allocated, reserved and device peaks
    (GiB) against the capacity, and what to change when it does not fit."""
    table = Table(
        title="peak memory per GPU, GiB (tightest pipeline rank)",
        title_justify="left",
        caption=CAPTION,
        caption_justify="left",
    )
    for head in ("configuration", "rank", "allocated", "reserved", "device", "capacity"):
        table.add_column(head, justify="left" if head == "configuration" else "right")
    table.add_column("fits", justify="center")
    table.add_column("what to change", justify="left")
    for gm in results:
        if gm.memory is None:
            table.add_row(escape(label(gm)), "", "", "", "", "", "—", escape(gm.error))
            continue
        t = gm.memory.tightest
        rank = gm.memory.ranks.index(t)
        fits = "[green]✓[/]" if gm.memory.fits else "[red]✗[/]"
        tip = escape(gm.advice.text()) if gm.advice else ""
        cells = (t.allocated_bytes, t.reserved_bytes, t.device_bytes, t.capacity_bytes)
        table.add_row(escape(label(gm)), str(rank), *(f"{v / GIB:.2f}" for v in cells), fits, tip)
    return table


def plot_memory_ranks(
    results: list[GridMemory], path: str | os.PathLike, *, source: str = ""
) -> Path:
    """One panel per configuration (the first :data:`MAX_PANELS` that resolved): a bar per
    pipeline rank, its peak stacked by category (GiB), the capacity dashed (module doc);
    ``source`` (what the figures are predicted with) written under the panels.

    Raises:
        ValueError: no configuration resolved.
    """
    shown = [gm for gm in results if gm.memory is not None][:MAX_PANELS]
    if not shown:
        raise ValueError("no configuration could be resolved: nothing to plot")
    cols = min(3, len(shown))
    rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, gm in zip(axes.flat, shown, strict=False):
        assert gm.memory is not None
        ranks = gm.memory.ranks
        bottom = [0.0] * len(ranks)
        for cat in CATEGORIES:
            vals = [r.by_category.get(cat, 0.0) / GIB for r in ranks]
            if not any(vals):
                continue
            ax.bar(range(len(ranks)), vals, bottom=bottom, label=cat,
                   color=CATEGORY_COLORS.get(cat, "#d9d9d9"))  # fmt: skip
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        cap = ranks[0].capacity_bytes / GIB
        ax.axhline(cap, color="black", linestyle="--", linewidth=1, label="GPU capacity")
        ax.set_title(label(gm), fontsize=7)
        ax.set_xlabel("pipeline rank", fontsize=8)
        ax.set_ylabel("GiB", fontsize=8)
        ax.set_xticks(range(len(ranks)))
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shown) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=7,
               bbox_to_anchor=(0.5, 1.02))  # fmt: skip
    fig.tight_layout()
    if source:
        footnote(fig, source)
    out = save_figure(fig, path)
    plt.close(fig)
    return out

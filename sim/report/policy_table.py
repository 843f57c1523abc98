"""The console's memory-policy summary (``sim run`` over several memory policies): the table
of :func:`sim.report.memory_summary.memory_summary` as rich prints it, and whether it says
anything the table of best configurations does not (:func:`policies_shown`).

Several models: one row per model (best fitting samples/s per policy, the fastest policy) and
a last row, the largest model that fits per policy, left out when every policy fits the same
model. One model: a row per policy (its best fitting samples/s, and how much slower than the
fastest it is), since the per-model columns and the last row would repeat the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape
from rich.table import Table

from sim.report.memory_summary import TIE
from sim.report.tables import shown_values

if TYPE_CHECKING:
    import pandas as pd

_TITLE = "Memory policies: best fitting samples/s per model and policy"


def policies_shown(results_df: pd.DataFrame, top: int) -> bool:
    """Whether the table of the ``top`` best configurations of one model (``results_df``: its
    rows; :func:`sim.report.tables.compact_table`) already shows every memory policy's best
    fitting configuration: each swept policy fits and has a row among those shown (the first
    row of a policy in the ranking is its best)."""
    policies = set(results_df["memory_policy"].astype(str))
    return policies <= shown_values(results_df, top, "memory_policy")


def policy_table(summary: pd.DataFrame) -> Table:
    """``summary`` (:func:`sim.report.memory_summary.memory_summary`: a row per model, then
    the largest model that fits per policy; columns parameters, fastest policy, samples/s, one
    per policy) as a rich table that folds to the terminal (module doc); samples/s with two
    decimals, a policy with no fitting configuration as —."""
    models, largest = summary.iloc[:-1], summary.iloc[-1]
    if len(models) == 1:
        return _one_model(models)
    policies = [
        c for c in summary.columns if c not in ("parameters", "fastest policy", "samples/s")
    ]
    same = len({str(largest[p]) for p in policies}) == 1
    title = _TITLE + ("" if same else "; last row: the largest model that fits per policy")
    said = f"largest model that fits: {largest[policies[0]]}, under every policy"
    table = _table(title, said if same else None)
    table.add_column("model", overflow="fold")
    for column in summary.columns:
        left, whole = column == "fastest policy", column in ("parameters", "samples/s")
        justify: Any = "left" if left else "right"
        table.add_column(escape(str(column)), overflow="fold", justify=justify, no_wrap=whole)
    for model, row in (models if same else summary).iterrows():
        last = model is summary.index[-1] and not same
        cells = [_cell(column, row[column], blank="" if last else "—") for column in summary]
        table.add_row(escape(str(model)), *cells)
    return table


def _one_model(models: pd.DataFrame) -> Table:
    """A row per policy, fastest first: its best fitting samples/s and how much slower than
    the fastest (``fastest`` within :data:`sim.report.memory_summary.TIE`); ``none fits`` last."""
    model = str(models.index[0])
    row = models.iloc[0]
    speeds = row.drop(["parameters", "fastest policy", "samples/s"]).astype(float)
    top = float(row["samples/s"])
    title = f"Memory policies of {escape(model)}: best fitting samples/s per policy"
    table = _table(title)
    table.min_width = len(title)  # one line, however narrow the three columns
    table.add_column("memory policy", overflow="fold")
    table.add_column("samples/s", justify="right", no_wrap=True)
    table.add_column("vs fastest", justify="right", no_wrap=True)
    for policy, v in speeds.sort_values(ascending=False, na_position="last").items():
        if v != v:
            table.add_row(escape(str(policy)), "none fits", "")
            continue
        vs = "fastest" if v >= top * (1 - TIE) else f"{(v / top - 1) * 100:+.1f} %"
        table.add_row(escape(str(policy)), f"{v:,.2f}", vs)
    return table


def _table(title: str, caption: str | None = None) -> Table:
    return Table(
        title=title,
        caption=escape(caption) if caption else None,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        title_justify="left",
        caption_justify="left",
    )


def _cell(column: object, value: object, blank: str = "—") -> str:
    if isinstance(value, str):
        return escape(value) if value else blank
    if not isinstance(value, (int, float)) or value != value:
        return "—"
    return f"{value:,.0f}" if column == "parameters" else f"{value:,.2f}"

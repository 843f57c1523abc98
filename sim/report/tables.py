"""Terminal summary of a sweep: the best configurations first, as a :class:`rich.table.Table`.

Configurations that fit in memory come first, by throughput (highest first); those that do not
fit follow, also by throughput, so a reader sees what more memory would buy.

Two forms: :func:`compact_table` (``sim run``'s default: the configuration as one label, time,
throughput with its band, MFU, peak memory, fits; fits 100 columns) and :func:`summary_table`
(``sim run --wide``: one column per knob and measurement).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape
from rich.table import Table

from sim.point.rows import rank_key
from sim.report._common import GIB

if TYPE_CHECKING:
    import pandas as pd

# (column in the results table, header with unit, formatter, right-justify)
_COLUMNS: tuple[tuple[str, str, Any, bool], ...] = (
    ("model", "model", str, False),
    ("schedule", "schedule", str, False),
    ("stages", "p stages", lambda v: f"{int(v)}", True),
    ("dp_width", "w DP", lambda v: f"{int(v)}", True),
    ("tensor_parallel", "t TP", lambda v: f"{int(v)}", True),
    ("expert_parallel", "ep EP", lambda v: f"{int(v)}", True),
    ("context_parallel", "cp CP", lambda v: f"{int(v)}", True),
    ("microbatch_size", "b samples", lambda v: f"{int(v)}", True),
    ("microbatches", "m", lambda v: f"{int(v)}", True),
    ("memory_policy", "memory policy", str, False),
    ("precision", "precision", str, False),
    ("iteration_time_s", "iteration (ms)", lambda v: f"{v * 1e3:,.2f}", True),
    ("throughput_samples_per_s", "throughput (samples/s)", lambda v: rate_text(v), True),
    ("throughput_band", "band p10–p90 (samples/s)", str, True),
    ("mfu", "MFU (%)", lambda v: f"{v * 100:.1f}", True),
    ("bubble_fraction", "bubble (%)", lambda v: f"{v * 100:.1f}", True),
    ("peak_allocated_bytes", "allocated (GiB)", lambda v: f"{v / GIB:.2f}", True),
    ("peak_reserved_bytes", "reserved (GiB)", lambda v: f"{v / GIB:.2f}", True),
    ("peak_memory_bytes", "peak (GiB)", lambda v: f"{v / GIB:.2f}", True),
    ("headroom_bytes", "headroom (GiB)", lambda v: f"{v / GIB:.2f}", True),
    ("staleness_steps", "stale (steps)", lambda v: f"{int(v)}", True),
)


def _cell(value: Any, fmt: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    try:
        return fmt(value)
    except (TypeError, ValueError):
        return str(value)


def rank_results(results_df: pd.DataFrame) -> pd.DataFrame:
    """The results table reordered best first, by :func:`sim.point.rows.rank_key` (the one ranking
    used everywhere): fitting rows by throughput (descending), then the rows that do not fit;
    rows with no throughput (NaN) last within their group; ties broken deterministically.

    Raises:
        ValueError: the table lacks ``throughput_samples_per_s`` or ``fits``.
    """
    missing = [c for c in ("throughput_samples_per_s", "fits") if c not in results_df.columns]
    if missing:
        raise ValueError(f"results table lacks column(s) {missing} needed to rank configurations")
    records = results_df.to_dict("records")
    order = sorted(range(len(records)), key=lambda i: rank_key(records[i]))
    return results_df.iloc[order]


def _with_band_cell(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``throughput_band``, ``low–high`` samples/s (:mod:`sim.report.row_bands`; one
    line), where it has the band columns."""
    if "throughput_low_samples_per_s" not in df:
        return df
    lo, hi = df["throughput_low_samples_per_s"], df["throughput_high_samples_per_s"]
    cells = [
        f"{_short(a)}–{_short(b)}" if a == a and b == b else None
        for a, b in zip(lo, hi, strict=True)
    ]
    return df.assign(throughput_band=cells)


def rate_text(samples_per_s: float, decimals: int = 1) -> str:
    """A throughput with ``decimals`` decimals from 10 samples/s, three significant digits
    below (``23.1``, ``5.23``, ``0.0436``): a 70B model's 0.0436 samples/s printed as ``0.0``
    beside its band ``0.0436–0.0544``."""
    return f"{samples_per_s:,.{decimals}f}" if samples_per_s >= 10 else f"{samples_per_s:#.3g}"


def _short(samples_per_s: float) -> str:
    """Three or four digits: ``1,083``, ``843``, ``40.4``."""
    return f"{samples_per_s:,.0f}" if samples_per_s >= 100 else f"{samples_per_s:.3g}"


OPTIONAL = ("expert_parallel", "context_parallel")
"""Columns shown only when some row is above 1."""


def _shown(df: pd.DataFrame, column: str) -> bool:
    if column == "mfu":
        return bool(df[column].notna().any())
    return column not in OPTIONAL or bool((df[column].fillna(1) > 1).any())


def config_label(row: Any) -> str:
    """A configuration in one short label: ``1f1b p=4 v=2 w=2 t=2+sp b=1 m=16 recompute``
    (``v``, ``t``, ``ep``, ``cp`` only where above 1; a row or a record).

    Example:
        >>> config_label({"schedule": "1f1b", "stages": 4, "dp_width": 2, "microbatch_size": 1,
        ...               "microbatches": 16, "memory_policy": "none", "tensor_parallel": 2,
        ...               "sequence_parallel": True})
        '1f1b p=4 w=2 t=2+sp b=1 m=16 none'
    """

    def get(name: str, default: Any = 1) -> Any:
        value = row.get(name, default) if hasattr(row, "get") else getattr(row, name, default)
        return default if value is None or value != value else value

    parts = [str(get("schedule", "")), f"p={int(get('stages'))}"]
    if int(get("virtual_stages")) > 1:
        parts.append(f"v={int(get('virtual_stages'))}")
    parts.append(f"w={int(get('dp_width'))}")
    if int(get("dp_shard")) > 1:
        parts.append(f"shard={int(get('dp_shard'))}")
    if int(get("tensor_parallel")) > 1:
        parts.append(
            f"t={int(get('tensor_parallel'))}{'+sp' if get('sequence_parallel', False) else ''}"
        )
    for name, key in (("ep", "expert_parallel"), ("cp", "context_parallel")):
        if int(get(key)) > 1:
            parts.append(f"{name}={int(get(key))}")
    if get("expert_tensor_parallel", None) is not None:
        parts.append(f"etp={int(get('expert_tensor_parallel'))}")
    parts += [f"b={int(get('microbatch_size'))}", f"m={int(get('microbatches'))}"]
    parts.append(str(get("memory_policy", "")))
    if get("precision", ""):
        parts.append(str(get("precision", "")))
    return " ".join(parts)


def _caption(results_df: pd.DataFrame, shown: pd.DataFrame, compact: bool) -> str:
    """How many configurations there were, are shown and fit; how many were not simulated and
    why; where the band comes from."""
    import pandas as pd  # on first use: `import sim.api` stays fast

    n_fit = int(results_df["fits"].astype(bool).sum())
    errors = results_df["error"].fillna("").astype(str) if "error" in results_df else None
    n_slower = 0 if errors is None else int(errors.str.startswith("pruned: throughput").sum())
    n_over = 0 if errors is None else int(errors.str.startswith("pruned: memory").sum())
    sources = sorted({s for s in shown.get("band_source", pd.Series(dtype=str)).fillna("") if s})
    if compact:
        caption = f"{len(shown)} of {len(results_df)} shown, {n_fit} fit"
        if n_slower or n_over:
            caption += f"; not simulated: {n_over} over memory, {n_slower} slower (by bounds)"
        if sources:
            caption += f"; band: p10–p90 of measured/predicted, {', '.join(sources)}"
        return caption + _outside_band(shown)
    caption = f"showing {len(shown)} of {len(results_df)} configurations; {n_fit} fit in memory"
    if n_slower or n_over:
        caption += (
            f"; not simulated: {n_over} over capacity by the memory lower bound, {n_slower} "
            "slower than the best by the throughput bound (--exhaustive simulates them)"
        )
    if sources:
        caption += (
            "; band: where measured runs fell around predictions of their regime "
            f"(sim/data/bands.csv: {', '.join(sources)})"
        )
    return caption


def _outside_band(shown: pd.DataFrame) -> str:
    """A clause for shown rows whose throughput lies outside their own band (the p10 of their
    regime's measured/predicted above 1 or its p90 below: every run measured slower, or
    faster, than predicted), which a reader would otherwise take for an error; else empty."""
    cols = ("throughput_samples_per_s", "throughput_low_samples_per_s")
    if not all(c in shown for c in (*cols, "throughput_high_samples_per_s")):
        return ""
    tput = shown["throughput_samples_per_s"]
    below = bool((shown["throughput_high_samples_per_s"] < tput).any())
    above = bool((shown["throughput_low_samples_per_s"] > tput).any())
    said = [
        f"a band {side} its prediction: 90 % of that regime's measured runs ran {how} than "
        "predicted"
        for side, how, hit in (("below", "slower", below), ("above", "faster", above))
        if hit
    ]
    return "".join(f"; {x}" for x in said)


def _ranked_shown(results_df: pd.DataFrame, top: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    ranked = _with_band_cell(rank_results(results_df))
    if "error" in ranked:  # rows the planner did not simulate are counted, not listed
        ranked = ranked[~ranked["error"].fillna("").astype(str).str.startswith("pruned: ")]
    return ranked, (ranked.head(top) if top > 0 else ranked)


def shown_values(results_df: pd.DataFrame, top: int, column: str) -> set[str]:
    """The values of ``column`` in the fitting rows among the ``top`` that
    :func:`compact_table` shows (``memory_policy``: the policies whose best is shown)."""
    shown = _ranked_shown(results_df, top)[1]
    return set(shown.loc[shown["fits"].fillna(False).astype(bool), column].astype(str))


def compact_table(results_df: pd.DataFrame, top: int = 5, title: str = "") -> Table:
    """The ``top`` best configurations in six or seven columns that fit 100 terminal columns:
    rank, the configuration (:func:`config_label`), iteration time (ms), throughput
    (samples/s) with its band (p10–p90, :mod:`sim.report.row_bands`), MFU (where some row has
    one: :class:`sim.point.rows.ResultRow`'s ``mfu``), peak memory (GiB) and fits.

    Raises:
        ValueError: the table lacks ``throughput_samples_per_s`` or ``fits``.
    """
    ranked, shown = _ranked_shown(results_df, top)
    table = Table(
        title=title or None,
        caption=_caption(results_df, shown, compact=True),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("configuration", overflow="fold", ratio=1)
    table.add_column("ms/iter", justify="right", no_wrap=True)
    table.add_column("samples/s (band)", justify="right", no_wrap=True)
    mfu = "mfu" in ranked and _shown(ranked, "mfu")
    if mfu:
        table.add_column("MFU", justify="right", no_wrap=True)
    table.add_column("peak GiB", justify="right", no_wrap=True)
    table.add_column("fits", justify="center", no_wrap=True)
    for rank, (_, row) in enumerate(shown.iterrows(), start=1):
        fits = bool(row["fits"])
        tput = _cell(row.get("throughput_samples_per_s"), rate_text)
        band = row.get("throughput_band")
        cells = [
            str(rank),
            escape(config_label(row)),
            _cell(row.get("iteration_time_s"), lambda v: f"{v * 1e3:,.1f}"),
            tput + (f" ({band})" if isinstance(band, str) and band else ""),
        ]
        if mfu:
            cells.append(_cell(row.get("mfu"), lambda v: f"{v * 100:.0f}%"))
        cells += [
            _cell(row.get("peak_memory_bytes"), lambda v: f"{v / GIB:.1f}"),
            "[green]✓[/]" if fits else "[red]✗[/]",
        ]
        table.add_row(*cells, style=None if fits else "dim")
    return table


def summary_table(results_df: pd.DataFrame, top: int = 10) -> Table:
    """The ``top`` best configurations as a rich table with units in the headers, one column
    per knob (``sim run --wide``; the default is :func:`compact_table`).

    Columns (those present in ``results_df``): rank, model, schedule, stages ``p``, DP width
    ``w``, TP ``t`` (EP and CP where some row uses them), micro-batch size ``b`` (samples), micro-batches per iteration ``m``, memory policy,
    iteration time (ms), throughput (samples/s) and its band (where the table has
    :data:`sim.report.row_bands.BAND_COLUMNS`; the caption names the regimes), bubble (% of the iteration), peak memory (GiB),
    fits (✓/✗). The caption says how many configurations there were and how many fit.

    Args:
        results_df: the sweep's results table.
        top: how many rows to show (all if ``top`` <= 0).

    Returns:
        A :class:`rich.table.Table`; print it with ``rich.console.Console().print(table)``.

    Raises:
        ValueError: the table lacks ``throughput_samples_per_s`` or ``fits``.
    """
    ranked, shown = _ranked_shown(results_df, top)
    caption = _caption(results_df, shown, compact=False)
    table = Table(title="Best configurations (fitting ones first, by throughput)", caption=caption)
    columns = [c for c in _COLUMNS if c[0] in ranked.columns and _shown(ranked, c[0])]
    table.add_column("#", justify="right")
    for _, header, _, right in columns:
        table.add_column(header, justify="right" if right else "left")
    table.add_column("fits", justify="center")
    for rank, (_, row) in enumerate(shown.iterrows(), start=1):
        fits = bool(row["fits"])
        cells = [escape(_cell(row[col], fmt)) for col, _, fmt, _ in columns]
        table.add_row(
            str(rank), *cells, "[green]✓[/]" if fits else "[red]✗[/]", style=None if fits else "dim"
        )
    return table

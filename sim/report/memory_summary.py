"""Which memory policy trains which model size, and which is fastest: one table, two plots.

For a sweep over several memory policies and models (e.g. ``experiments/dgx1-memory.yaml``):

* :func:`memory_summary`: one row per model (by parameter count) with the best fitting
  throughput of every policy and the fastest policies (all within 0.1% of the best: where
  nothing needs saving, ``none`` and the policies that then do nothing tie), then a last row
  naming, per policy, the
  largest model that fits: the table answers "fastest policy per model size" (rows) and
  "largest model that fits per policy" (the last row).
* :func:`plot_max_model_per_policy`: the largest trainable model per policy (bars).
* :func:`plot_throughput_vs_size`: best fitting throughput against model size, one line per
  policy.

"Best" is over every other swept knob (schedule, stages, DP width, micro-batch size).

For GPT models generated from a shape (trace provenance ``inputs``), :func:`write_memory_summary`
also writes ``tflops_per_gpu.csv`` and ``tflops_vs_model_size.png``: the best fitting TFLOPS per
GPU (:func:`tflops_per_gpu`) per model and policy with the FLOP count the papers use (Narayanan
et al. SC'21, arXiv:2104.04473, eq. 3, which counts the recompute pass), over every GPU the
configuration uses (pipeline x data x tensor parallel).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from sim.atomic import atomic_write_bytes
from sim.report._common import axes_for, finish, series_style
from sim.report.provenance import footnoted, joined
from sim.report.tables import rank_results

LARGEST = "largest model that fits"
TIE = 1e-3
"""Policies within this fraction of the best throughput share "fastest policy"."""
_NEEDED = ("model", "parameters", "memory_policy", "fits", "throughput_samples_per_s")


def best_fitting(results_df: pd.DataFrame) -> pd.DataFrame:
    """Best fitting throughput per ``(model, parameters, memory_policy)``; no row where nothing
    fits.

    Raises:
        ValueError: a needed column is missing.
    """
    missing = [c for c in _NEEDED if c not in results_df.columns]
    if missing:
        raise ValueError(f"results table lacks column(s) {missing} needed by memory_summary")
    ok = results_df[results_df["fits"].fillna(False).astype(bool)]
    ok = ok.dropna(subset=["throughput_samples_per_s"])
    keys = ["model", "parameters", "memory_policy"]
    best = rank_results(ok).drop_duplicates(keys)  # the best row of each group (sim.point.rows)
    return best[keys + ["throughput_samples_per_s"]].sort_values(keys).reset_index(drop=True)


def memory_summary(results_df: pd.DataFrame) -> pd.DataFrame:
    """The table of the module doc: index = model names (ascending size) and :data:`LARGEST`;
    columns ``parameters``, ``fastest policy``, ``samples/s`` and one per policy (best fitting
    samples/s, NaN if it does not fit)."""
    best = best_fitting(results_df)
    policies = sorted(results_df["memory_policy"].astype(str).unique())
    sizes = results_df.groupby("model")["parameters"].max().sort_values()
    wide = best.pivot(index="model", columns="memory_policy", values="throughput_samples_per_s")
    wide = wide.reindex(index=sizes.index, columns=policies)
    table = pd.DataFrame({"parameters": sizes.astype("int64")}, index=sizes.index)
    top = wide.max(axis=1)
    table["fastest policy"] = [
        ", ".join(p for p in policies if wide.at[m, p] >= top[m] * (1 - TIE))
        if top[m] == top[m]
        else "none fits"
        for m in sizes.index
    ]
    table["samples/s"] = top
    table = pd.concat([table, wide], axis=1)
    last = {
        p: (wide[p].dropna().index[-1] if wide[p].notna().any() else "none fits") for p in policies
    }
    largest = pd.DataFrame(
        [{"parameters": "", "fastest policy": "", "samples/s": "", **last}], index=[LARGEST]
    )
    out = pd.concat([table.astype(object), largest.astype(object)])
    out.index.name = "model"
    return out


def _largest_params(results_df: pd.DataFrame) -> pd.Series:
    best = best_fitting(results_df)
    policies = sorted(results_df["memory_policy"].astype(str).unique())
    return best.groupby("memory_policy")["parameters"].max().reindex(policies).fillna(0)


def plot_max_model_per_policy(
    results_df: pd.DataFrame, path: str | os.PathLike | None = None, *, ax: Any = None
) -> Any:
    """Bars: the largest model (billions of parameters) that fits, per policy. Returns the
    :class:`matplotlib.figure.Figure` (drawn into ``ax`` when given; written to ``path`` when
    given)."""
    largest = _largest_params(results_df).sort_values()
    fig, ax = axes_for(ax, (7.5, 0.45 * len(largest) + 1.6), layout="constrained")
    ax.barh(largest.index, largest.values / 1e9, color="#1f77b4")
    for y, v in enumerate(largest.values):
        ax.text(v / 1e9, y, f" {v / 1e9:.1f} B" if v else " none fits", va="center", fontsize=8)
    ax.set_xlabel("largest model that fits (billions of parameters)")
    ax.set_title("Largest trainable model per memory policy")
    ax.grid(axis="x", alpha=0.3)
    return finish(fig, path)


def plot_throughput_vs_size(
    results_df: pd.DataFrame, path: str | os.PathLike | None = None, *, ax: Any = None
) -> Any:
    """Lines: best fitting throughput (samples/s) against model size, one per policy, each
    with its own marker and dashes. Returns the :class:`matplotlib.figure.Figure`."""
    from matplotlib.ticker import FixedLocator, NullLocator

    best = best_fitting(results_df)
    fig, ax = axes_for(ax, (7.5, 4.8), layout="constrained")
    for i, (policy, rows) in enumerate(best.groupby("memory_policy", sort=True)):
        rows = rows.sort_values("parameters")
        ax.plot(
            rows["parameters"] / 1e9,
            rows["throughput_samples_per_s"],
            label=policy,
            **series_style(i),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = sorted(best["parameters"].unique() / 1e9)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{v:.1f}" for v in sizes], rotation=45)
    ax.set_xlabel("model size (billions of parameters)")
    ax.set_ylabel("best throughput that fits (samples/s)")
    ax.set_title("Throughput vs model size per memory policy")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return finish(fig, path)


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs of one iteration of a GPT with full activation recomputation, Narayanan et al.
    SC'21 (arXiv 2104.04473) eq. (3): ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``."""
    b, s, n, h, v = batch, seq, layers, hidden, vocab
    return 96.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


NARAYANAN_SOURCE = (
    "Narayanan et al. SC'21 (arXiv:2104.04473) eq. 3 FLOPs (recompute pass counted) "
    "/ predicted iteration time / GPUs"
)
"""The ``flops_source`` of :func:`tflops_per_gpu`'s rows (``tflops_per_gpu.csv``)."""
TFLOPS_COLUMNS = ["model", "parameters", "memory_policy", "tflops_per_gpu", "flops_source"]


def tflops_per_gpu(results_df: pd.DataFrame, shapes: dict[str, dict]) -> pd.DataFrame:
    """Best fitting TFLOPS per GPU per ``(model, memory_policy)``: :func:`narayanan_flops` of
    the row's global batch over its iteration time and ``stages * dp_width * tensor_parallel``
    GPUs. ``shapes``:
    per model ``{layers, hidden, seq_len, vocab}`` (a trace's generator inputs); models without
    a shape are left out. Columns: :data:`TFLOPS_COLUMNS` (``flops_source``:
    :data:`NARAYANAN_SOURCE`, which differs from results.csv's Megatron-LM count)."""
    ok = results_df[results_df["fits"].fillna(False).astype(bool)]
    ok = ok.dropna(subset=["iteration_time_s"])
    ok = ok[ok["model"].isin(list(shapes))]
    if ok.empty:
        return pd.DataFrame(columns=TFLOPS_COLUMNS)
    flops = [
        narayanan_flops(
            r.global_batch,
            *(int(shapes[r.model][k]) for k in ("seq_len", "layers", "hidden", "vocab")),
        )
        / (r.iteration_time_s * r.stages * r.dp_width * getattr(r, "tensor_parallel", 1))
        / 1e12
        for r in ok.itertuples()
    ]
    ok = ok.assign(tflops_per_gpu=flops, flops_source=NARAYANAN_SOURCE)
    keys = ["model", "parameters", "memory_policy"]
    best = ok.sort_values("tflops_per_gpu", ascending=False).drop_duplicates(keys)
    return best[TFLOPS_COLUMNS].sort_values(["parameters", "memory_policy"])


def plot_tflops_vs_size(
    table: pd.DataFrame, path: str | os.PathLike | None = None, *, ax: Any = None
) -> Any:
    """Lines: best fitting TFLOP/s per GPU (Narayanan et al.'s formula) against model size,
    one per policy. Returns the :class:`matplotlib.figure.Figure`."""
    fig, ax = axes_for(ax, (7.5, 4.8), layout="constrained")
    for i, (policy, rows) in enumerate(table.groupby("memory_policy", sort=True)):
        ax.plot(rows["parameters"] / 1e9, rows["tflops_per_gpu"], label=policy, **series_style(i))
    ax.set_xlabel("model size (billions of parameters)")
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_title(
        "TFLOP/s per GPU vs model size per memory policy\n"
        "(Narayanan et al. SC'21 eq. 3 FLOPs, recompute pass counted, / time / GPUs)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig, path)


Deferred = list[tuple[Path, Callable[[], object]]]
"""Plots to draw later: each file with the call that draws it (``sim run`` draws them with the
winners' on several processes, :func:`sim.report.drawing.draw`)."""


def _plot(
    later: Deferred | None, path: Path, draw: Callable[..., Any], *args: object, source: str = ""
) -> Path:
    """Draw ``draw(*args, path)`` with ``source`` as its footnote
    (:func:`sim.report.provenance.footnoted`) now, or, with ``later``, add it there; returns
    ``path``."""
    call = partial(footnoted, draw, *args, path=path, text=source)
    if later is None:
        call()
        return path
    later.append((path, call))
    return path


def write_memory_summary(
    results_df: pd.DataFrame,
    out: Path,
    plots: bool = True,
    shapes: dict | None = None,
    later: Deferred | None = None,
    sources: dict[str, str] | None = None,
) -> tuple[pd.DataFrame, list[Path]]:
    """Write ``memory_summary.csv`` and, with ``plots`` and models of more than one size, the
    two PNGs into ``out``; with
    ``shapes`` (model -> GPT shape) also ``tflops_per_gpu.csv`` and its plot. With ``later``
    the plots are added there to draw instead of drawn (their files are listed either way).
    ``sources``: per model, what its figures are predicted with
    (:func:`sim.report.provenance.experiment_sources`): the CSV's ``source`` column and,
    joined, each plot's footnote."""
    table = memory_summary(results_df)
    sources = sources or {}
    source = joined(sources)
    csv = table.assign(source=[sources.get(str(m), "") for m in table.index])
    written = [atomic_write_bytes(out / "memory_summary.csv", csv.to_csv().encode())]
    if plots and results_df["parameters"].nunique() > 1:  # one model: nothing to compare
        name, draw = "max_model_per_policy.png", plot_max_model_per_policy
        written.append(_plot(later, out / name, draw, results_df, source=source))
        name, draw = "throughput_vs_model_size.png", plot_throughput_vs_size
        written.append(_plot(later, out / name, draw, results_df, source=source))
    if shapes:
        written += write_tflops(results_df, out, plots, shapes, later, source)[1]
    return table, written


def write_tflops(
    results_df: pd.DataFrame,
    out: Path,
    plots: bool,
    shapes: dict,
    later: Deferred | None = None,
    source: str = "",
) -> tuple[pd.DataFrame, list[Path]]:
    """:func:`tflops_per_gpu` of ``results_df``, written to ``tflops_per_gpu.csv`` and, with
    ``plots``, ``tflops_vs_model_size.png`` in ``out`` (nothing written when no row has a
    shape; with ``later`` the plot is added there to draw instead of drawn). Returns the
    table and the files written."""
    tf = tflops_per_gpu(results_df, shapes)
    if tf.empty:
        return tf, []
    csv = tf.to_csv(index=False, float_format="%.2f").encode()
    written = [atomic_write_bytes(out / "tflops_per_gpu.csv", csv)]
    if plots and tf["parameters"].nunique() > 1:  # no one-point plot
        name = "tflops_vs_model_size.png"
        written.append(_plot(later, out / name, plot_tflops_vs_size, tf, source=source))
    return tf, written

"""``sim compare RUNS...``: the typer adapter over :func:`sim.compare.compare`."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import typer
from rich.markup import escape
from rich.table import Table

from sim.cli.console import QUIET, VERBOSE, apply_verbosity, friendly, out
from sim.compare import compare, summary
from sim.hardware.overlay import read_overlay
from sim.runs.bridge_recipes import SHIPPED, read_recipes
from sim.runs.readers import read_hf_config

SHOWN = 40
"""Most runs the console table lists (compare.csv has every one)."""


def _f(x: object, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return fmt.format(float(x) * scale)  # type: ignore[arg-type]


def caption(df: pd.DataFrame) -> str:
    """Where the table's figures come from (compare.csv's ``source``, ``hardware``,
    ``trace_origin`` and ``band_source``, each distinct value once).

    Example:
        >>> caption(pd.DataFrame({"hardware": ["h", "h"], "trace_origin": ["analytic"] * 2,
        ...                       "band_source": ["b (n=3)", ""]}))
        'predicted (pipesim, not measured) on h, from analytic traces; band: b (n=3); measured: compare.csv source'
    """  # noqa: E501

    def distinct(col: str) -> str:
        values = [str(v) for v in df.get(col, pd.Series(dtype=str)).fillna("") if str(v)]
        return ", ".join(dict.fromkeys(values)) or "-"

    return (
        f"predicted (pipesim, not measured) on {distinct('hardware')}, from "
        f"{distinct('trace_origin')} traces; band: {distinct('band_source')}; measured: "
        "compare.csv source"
    )


def _table(df: pd.DataFrame) -> Table:
    t = Table(
        title="predicted against measured (errors: predicted / measured - 1)",
        caption=escape(caption(df[df.expressed])),
    )
    for col in (
        "run",
        "GPUs",
        "layout",
        "measured ms",
        "predicted ms",
        "error",
        "in band",
        "measured GiB",
        "predicted GiB",
        "error ",
        "categories (measured vs predicted)",
    ):
        t.add_column(col, overflow="fold")  # fmt: skip
    for rec in df[df.expressed].head(SHOWN).to_dict("records"):
        band = "" if rec["in_band"] is None else ("yes" if rec["in_band"] else "no")
        t.add_row(
            escape(str(rec["name"])[:40]), str(rec["num_gpus"]), rec["layout"],
            _f(rec["measured_time_s"], 1e3), _f(rec["predicted_time_s"], 1e3),
            _f(rec["time_error"], 100, "{:+.1f} %"), band,
            _f(rec["measured_memory_bytes"], 2**-30, "{:.2f}"),
            _f(rec["predicted_memory_bytes"], 2**-30, "{:.2f}"),
            _f(rec["memory_error"], 100, "{:+.1f} %"), escape(str(rec["categories"])),
        )  # fmt: skip
    return t


@friendly
def compare_cmd(
    sources: list[str] = typer.Argument(
        ...,
        metavar="SOURCE",
        help="Measured runs: training logs, functional-test golden JSON, measured-run CSVs "
        "(../shared/data/measured/ or vTrain's layout), configs or launch commands.",
    ),  # fmt: skip
    out_dir: Path = typer.Option(Path("compare"), "--out", "-o", help="Folder for CSV and PNG."),
    gpu: str = typer.Option(
        "",
        help="The GPU the runs used, when their files do not say (e.g. H100, B200, A100-SXM-80GB).",
    ),
    gpus: int = typer.Option(None, "--gpus", min=1, help="GPUs in the job, when not given."),
    config: Path = typer.Option(None, help="Companion file (as for sim import)."),
    command: str = typer.Option(None, help="The launch command of a DeepSpeed log."),
    model_config: Path = typer.Option(None, "--model-config", help="Hugging Face config.json."),
    seq_len: int = typer.Option(None, "--seq-len", min=1, help="Tokens per sample."),
    hardware_overlay: Path = typer.Option(
        None, "--hardware-overlay", help="Predict with this overlay (sim calibrate --from-runs)."
    ),
    plot: bool = typer.Option(True, "--plot/--no-plot", help="Draw compare.png."),
    bridge_recipes: Path = typer.Option(
        None,
        "--bridge-recipes",
        help="Megatron-Bridge recipe table for measured-CSV rows "
        "(default: measurements/megatron-bridge/recipes.csv of the checkout).",
    ),  # fmt: skip
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """Predict measured runs and show predicted against measured iteration time and memory
    (per category where the log has it), the error and the band; write compare.csv and a
    scatter plot. Exit code 1 when no run could be expressed (the reasons are printed).

    The table prints ms and GiB; compare.csv keeps seconds and bytes (measured_time_s,
    predicted_time_s, measured_memory_bytes, ...) and the error as predicted / measured - 1.
    """
    apply_verbosity(verbose, quiet)
    overlay = read_overlay(hardware_overlay) if hardware_overlay else None
    hf = read_hf_config(model_config) if model_config else None
    table = bridge_recipes or (SHIPPED if SHIPPED.is_file() else None)
    df, written = compare(
        sources, out=out_dir, overlay=overlay, plot=plot, gpu=gpu, num_gpus=gpus,
        config=config, command=command, hf_config=hf, seq_len=seq_len,
        recipes=read_recipes(table) if table else None,
    )  # fmt: skip
    if df.expressed.any():  # else an empty table, its caption "on -, from - traces"
        out.print(_table(df))
    missing = df[~df.expressed]
    if len(missing):
        runs = "1 run" if len(missing) == 1 else f"{len(missing)} runs"
        out.print(f"[yellow]{runs} not expressed[/], by first reason:")
        firsts = missing.reason.str.split("; ").str[0].value_counts()
        for why, n in firsts.items():
            out.print(escape(f"  {n:4d}  {why}"), highlight=False)
    s = summary(df)
    out.print(
        f"{s['runs']} run{'' if s['runs'] == 1 else 's'}, {s['expressed']} expressed; time: {s['time_n']} compared, MAPE "
        f"{_pct(s['time_mape'])}, signed {_pct(s['time_signed'], '+')}; memory: "
        f"{s['memory_n']} compared, MAPE {_pct(s['memory_mape'])}, signed "
        f"{_pct(s['memory_signed'], '+')}",
        highlight=False,
    )
    out.print(escape("wrote " + ", ".join(str(p) for p in written)), highlight=False)
    if not df.expressed.any():  # nothing compared: a script must see it (as `sim run`'s 1)
        raise typer.Exit(1)


def _pct(x: float, sign: str = "") -> str:
    """``12.3%`` (``+12.3%`` with ``sign='+'``); ``n/a`` when nothing was compared (NaN).

    Example:
        >>> _pct(0.1234, "+"), _pct(float("nan"))
        ('+12.3%', 'n/a')
    """
    return "n/a" if math.isnan(x) else f"{x:{sign}.1%}"

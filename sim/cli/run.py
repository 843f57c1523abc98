"""``sim run EXPERIMENT``: the typer adapter over :func:`sim.api.run`."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path

import typer

from sim import api
from sim.cli.console import (
    QUIET,
    VERBOSE,
    apply_verbosity,
    err,
    friendly,
    out,
    print_csv_as_json,
    quiet_now,
)
from sim.errors import InputError


class Format(StrEnum):
    """``sim run --format`` choices."""

    table = "table"
    csv = "csv"
    json = "json"


class RunExecutor(StrEnum):
    """``sim run --executor`` choices (:mod:`sim.plan.executors`)."""

    local = "local"
    ray = "ray"


@friendly
def run(
    experiment: Path = typer.Argument(
        ...,
        metavar="EXPERIMENT",
        help="Experiment YAML (e.g. experiments/dgx1.yaml) "
        "or a winner.yaml written by an earlier run.",
    ),
    out_dir: Path = typer.Option(
        None,
        "--out",
        help="Output directory: new, empty, or written "
        "by an earlier `sim run` of the same experiment (its files are replaced as a whole).",
        show_default="results/<experiment name>/",
    ),
    jobs: int = typer.Option(
        0, "--jobs", "-j", min=0, help="Worker processes; 0: one per CPU core."
    ),
    no_cache: bool = typer.Option(
        False,
        "--no-cache",
        help="Recompute every configuration instead of reusing cached rows (OUT/.cache).",
    ),
    plots: bool = typer.Option(
        True,
        "--plots/--no-plots",
        help="Write PNG plots and the Chrome-trace timeline of the winner.",
    ),
    executor: RunExecutor = typer.Option(
        "local",
        "--executor",
        help="Where points are simulated: local (worker processes, --jobs) or ray (Ray "
        "tasks on RAY_ADDRESS, else a local Ray; pip install 'pipesim[ray]').",
    ),
    hardware_overlay: Path = typer.Option(
        None,
        "--hardware-overlay",
        help="A hardware overlay (sim calibrate --from-runs) set over the experiment's "
        "hardware; replaces the experiment's hardware_overlay.",
    ),
    exhaustive: bool = typer.Option(
        False,
        "--exhaustive",
        help="Simulate every configuration: no pruning by the memory and throughput bounds "
        "(as sweep.prune: false; the winner is the same).",
    ),
    wide: bool = typer.Option(
        False, "--wide", help="Every column in the table of best configurations."
    ),
    fmt: Format = typer.Option(
        "table",
        "--format",
        help="table: the best configurations per model; csv: every row of results.csv on "
        'standard output; json: {"rows": every row of results.csv, "notes": every note and '
        "warning the console shows} on standard output (the rest on standard error).",
    ),
    as_json: bool = typer.Option(False, "--json", help="As --format json."),
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """Simulate every configuration of an experiment's grid and report the fastest that fits.

    Writes results.csv (one row per configuration; times in seconds, memory in bytes),
    winner.yaml (re-runnable with `sim run`, accepted by `sim validate`), config.resolved.yaml,
    plots (PNG) and timeline.json (Chrome trace: open in https://ui.perfetto.dev).

    Exit codes: 0 done; 1 some model has no configuration that fits; 2 bad input (nothing
    written); 3 some configurations failed with an internal error (a bug: their rows say
    where; everything else is written); 130 interrupted (Ctrl-C: nothing written).
    """
    apply_verbosity(verbose, quiet)
    if as_json and fmt == Format.csv:
        raise InputError("--json is --format json: give one of them", field="--json")
    fmt = Format.json if as_json else fmt
    table = "none" if fmt != Format.table or quiet_now() else "wide" if wide else "compact"
    try:
        outcome = api.run(
            experiment,
            out=out_dir,
            jobs=jobs or (os.cpu_count() or 1),
            cache=not no_cache,
            plots=plots,
            console=out if fmt == Format.table else err,
            executor=executor.value,
            exhaustive=exhaustive,
            table=table,
            progress=not quiet_now(),
            hardware_overlay=hardware_overlay,
        )
    except KeyboardInterrupt:
        err.print(
            "interrupted: the output folder is unchanged (a run writes its files together, "
            "at its end); "
            + (
                "nothing simulated is kept (--no-cache)"
                if no_cache
                else "the configurations simulated so far are kept in its .cache, which the "
                "next `sim run` of this experiment reuses"
            ),
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    if fmt != Format.table:
        _dump(outcome.out_dir / "results.csv", fmt, outcome.notes)
    raise typer.Exit(outcome.code)


def _dump(results: Path, fmt: Format, notes: list[dict[str, str]]) -> None:
    """results.csv on standard output, as it is (csv) or as JSON: ``{"rows": [one record per
    row], "notes": [{"level": "note" | "warning" | ..., "text": ...}, ...]}`` (the notes the
    console showed: :attr:`sim.report.results.RunOutcome.notes`)."""
    if fmt == Format.csv:
        sys.stdout.write(results.read_text(encoding="utf-8"))
        return
    print_csv_as_json(results, notes)

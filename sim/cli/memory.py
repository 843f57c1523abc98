"""``sim memory EXPERIMENT``: the typer adapter over :func:`sim.api.memory`."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.markup import escape

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
from sim.config import load_experiment
from sim.report.memory_ranks import memory_table


@friendly
def memory(
    experiment: Path = typer.Argument(
        ..., metavar="EXPERIMENT", help="Experiment YAML (e.g. experiments/dgx1.yaml)."
    ),
    out_dir: Path = typer.Option(
        None,
        "--out",
        help="Folder for memory.csv and memory_ranks.png (created; those files replaced).",
        show_default="results/<experiment name>-memory/",
    ),
    advice: bool = typer.Option(
        True,
        "--advice/--no-advice",
        help="For a configuration that does not fit, try dist_opt, recompute, half the "
        "micro-batch, twice tp, twice pp and name the first that fits.",
    ),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write memory_ranks.png."),
    jobs: int = typer.Option(
        0, "--jobs", "-j", min=0, help="Worker processes; 0: one per CPU core."
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print {"rows": every row of memory.csv (bytes), "notes": every warning as '
        '{"level", "text"}} as JSON on standard output instead of the table.',
    ),
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """Peak memory per GPU of every configuration of the grid, per pipeline rank and category,
    without simulating time (the model of the planner's memory bound).

    Prints one line per configuration (its tightest rank: allocated, reserved and device GiB
    against the capacity, and what to change when it does not fit); writes memory.csv (one row
    per configuration and pipeline rank, bytes) and memory_ranks.png (stacked bars). Exit code
    1 when no configuration of some model fits. With -q only the table (no progress, notes or
    summary line). ``--json``: the rows of memory.csv and the warnings as JSON, nothing else on
    standard output.
    """
    apply_verbosity(verbose, quiet)
    name = load_experiment(experiment).name
    folder = out_dir or Path("results") / f"{name}-memory"
    answer = api.memory(
        experiment, out=folder, advice=advice, plots=plots, jobs=jobs or (os.cpu_count() or 1)
    )
    if as_json:  # the notes as sim run --json's
        print_csv_as_json(
            folder / "memory.csv", [{"level": "warning", "text": n} for n in answer.notes]
        )
    else:
        out.print(memory_table(answer.results))
    if not quiet_now():
        for note in answer.notes:  # e.g. a gpu.memory override not used (sim.hardware)
            err.print(f"warning: {escape(note)}", highlight=False)
    if not quiet_now() and not as_json:
        n = len(answer.results)
        many = "configuration" if n == 1 else "configurations"
        out.print(f"{n} {many} in {answer.wall_s:.2f} s; wrote {folder}/")
    fitting = {r.point.model for r in answer.results if r.memory is not None and r.memory.fits}
    models = {r.point.model for r in answer.results}
    raise typer.Exit(0 if models <= fitting else 1)

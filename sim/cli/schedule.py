"""``sim schedule list|show``: schedules as per-rank actions (:mod:`sim.schedules`)."""

from __future__ import annotations

from pathlib import Path

import typer

from sim.atomic import check_writable
from sim.cli.console import friendly, out
from sim.config import MAX_GPUS, MAX_ITERATIONS, MAX_MICROBATCHES
from sim.point.stages import make_schedule
from sim.schedules.csv_io import to_csv
from sim.schedules.grid import format_grid
from sim.schedules.registry import get_schedule, schedule_names

app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Pipeline schedules as per-rank actions."
)


@app.command("list")
def schedule_list() -> None:
    """List schedules."""
    for name in schedule_names():
        out.print(f"{name:15s} {get_schedule(name).description}")


@app.command("show", short_help="A schedule as a step x rank grid of actions.")
@friendly
def schedule_show(
    name: str = typer.Argument(
        ..., metavar="NAME", help="Schedule name (see `sim schedule list`)."
    ),
    stages: int = typer.Option(
        ..., "--stages", "-p", min=1, max=MAX_GPUS, help="Pipeline depth p."
    ),
    microbatches: int = typer.Option(
        ...,
        "--microbatches",
        "-m",
        min=1,
        max=MAX_MICROBATCHES,
        help="Micro-batches per iteration m.",
    ),
    iterations: int = typer.Option(1, min=1, max=MAX_ITERATIONS, help="Optimizer steps to unroll."),
    virtual_stages: int = typer.Option(
        None,
        "--virtual-stages",
        "-v",
        min=1,
        max=64,
        help="Stage chunks per rank v (default: the schedule's smallest, 1 or 2).",
    ),
    csv: Path = typer.Option(
        None, "--csv", help="Write one iteration in torch's compute-only CSV format to this file."
    ),
) -> None:
    """Print a schedule as a step x rank grid of actions like '2F0' (stage 2, forward, mb 0).

    With v stage chunks per rank, stages run 0 .. p*v-1 and each column is a rank; torch's
    OVERLAP_F_B pairs show as '(7F4;0B0)OVERLAP_F_B'."""
    if csv:
        check_writable(csv, option="--csv")
    sched = make_schedule(
        name,
        stages,
        microbatches,
        file="command line",
        field="NAME",
        virtual_stages=virtual_stages,
        shape_field="--microbatches",
    )
    print(format_grid(sched.program(iterations)))
    versions = [sched.weight_versions(s) for s in range(sched.num_stages)]
    out.print(f"weight versions per stage: {versions}; synchronous: {sched.synchronous}")
    if sched.virtual_stages > 1:
        ranks = [sched.rank_stages(r) for r in range(stages)]
        out.print(f"virtual stages: {sched.virtual_stages}; stages per rank: {ranks}")
    if csv:
        to_csv(sched.one_iteration(), csv)
        out.print(f"wrote {csv}")

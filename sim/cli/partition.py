"""``sim partition TRACE -p P``: the typer adapter over :func:`sim.api.partition`."""

from __future__ import annotations

import json

import typer
from rich.markup import escape

from sim import api
from sim.cli.console import err, friendly, out
from sim.config import MAX_GPUS
from sim.parallel.partition import partition_json, partition_table


@friendly
def partition(
    trace_ref: str = typer.Argument(..., metavar="TRACE", help="Trace name or path."),
    stages: int = typer.Option(
        ..., "--stages", "-p", min=1, max=MAX_GPUS, help="Number of stages P."
    ),
    hardware: str = typer.Option(
        None,
        "--hardware",
        help="Preset or YAML: use its GPU "
        "memory as the capacity and its links for boundary transfers.",
        show_default="no capacity, free transfers",
    ),
    microbatch_size: int = typer.Option(
        None,
        "--microbatch-size",
        "-b",
        min=1,
        help="Bring the trace to this micro-batch size in "
        "samples (as `sim run` does: interpolation or the "
        "compute model).",
        show_default="the trace's own",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (seconds, bytes)."),
) -> None:
    """Split a trace's layers into P contiguous stages minimising the slowest stage.

    A stage's time is its forward + backward compute plus 2 x boundary bytes / link bandwidth;
    its memory is 16 B/param (fp16 + Adam) + (P - s) in-flight micro-batches of activations.
    """
    plan = api.partition(trace_ref, stages, hardware=hardware, microbatch_size=microbatch_size)
    for note in plan.notes:
        err.print(f"note: {escape(note)}", highlight=False)
    if as_json:
        print(json.dumps(partition_json(plan.partition, plan.trace), indent=2))
    else:
        out.print(partition_table(plan.partition, plan.trace))

"""``sim partition TRACE -p P``: the typer adapter over :func:`sim.api.partition`."""

from __future__ import annotations

import json

import typer
from rich.markup import escape

from sim import api
from sim.cli.console import QUIET, VERBOSE, apply_verbosity, err, friendly, out
from sim.config import MAX_GPUS
from sim.hardware.loader import load_hardware
from sim.parallel.partition import partition_json, partition_table
from sim.trace.origin import trace_origin
from sim.trace.schema import Trace


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
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """Split a trace's layers into P contiguous stages minimising the slowest stage.

    A stage's time is its forward + backward compute plus 2 x boundary bytes / link bandwidth;
    its memory is 8 x its parameter bytes (16 B per fp16 parameter: weights, gradients, fp32
    master and Adam) + (P - s) in-flight micro-batches of activations.
    """
    apply_verbosity(verbose, quiet)
    plan = api.partition(trace_ref, stages, hardware=hardware, microbatch_size=microbatch_size)
    for note in plan.notes:
        err.print(f"note: {escape(note)}", highlight=False)
    if as_json:
        print(json.dumps(partition_json(plan.partition, plan.trace), indent=2))
    else:
        table = partition_table(plan.partition, plan.trace)
        table.caption = escape(_sources(plan.trace, hardware))
        table.caption_justify = "left"
        out.print(table)


def _sources(trace: Trace, hardware: str | None) -> str:
    """Where the table's figures come from (the model of :func:`sim.api.partition`)."""
    if hardware:
        gib = load_hardware(hardware).gpus[0].memory_bytes / 2**30
        cap = f"against {gib:.2f} GiB per GPU ({hardware}, as CUDA reports it)"
    else:
        cap = "no capacity (no --hardware)"
    b = trace.microbatch_size
    return (
        f"time: forward + backward of one micro-batch ({b} sample{'' if b == 1 else 's'}) "
        f"from trace {trace.name} ({trace_origin(trace)}), plus comm: 2 x the boundary's "
        "bytes / the route's NCCL bandwidth"
        + ("" if hardware else " (0: no --hardware)")
        + "; memory: 8 x the parameter bytes (16 B per 2-byte parameter: fp16 weights and "
        "gradients, fp32 master weights and Adam moments) + the activations of P - s "
        f"micro-batches at stage s (1F1B), {cap}"
    )

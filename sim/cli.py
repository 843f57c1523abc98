"""The ``sim`` command line: run experiments and inspect hardware, traces, schedules, partitions.

Every command turns bad input into one message naming the file and field, exit code 2, and no
traceback. Units: seconds and bytes inside; the tables print ms, GiB, GB/s.
"""

from __future__ import annotations

import json
import os
import sys
from functools import wraps
from pathlib import Path

import typer
from rich.console import Console

from sim.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="pipesim: which pipeline schedule, partition, micro-batching and "
                       "memory policy trains fastest on this server, and does it fit?")
hardware_app = typer.Typer(no_args_is_help=True, help="Hardware presets (GPUs, links, hosts).")
schedule_app = typer.Typer(no_args_is_help=True, help="Pipeline schedules as per-rank actions.")
trace_app = typer.Typer(no_args_is_help=True, help="Per-layer traces (profiles) of models.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(schedule_app, name="schedule")
app.add_typer(trace_app, name="trace")

out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)


def friendly(fn):
    """Run ``fn``; an :class:`InputError` becomes a one-line message and exit code 2."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
    return wrapper


@app.command()
@friendly
def run(
    experiment: Path = typer.Argument(..., help="Experiment YAML (e.g. experiments/dgx1.yaml) "
                                      "or a winner.yaml written by an earlier run."),
    out_dir: Path = typer.Option(None, "--out", help="Output directory "
                                 "[default: results/<experiment name>/]."),
    jobs: int = typer.Option(0, "--jobs", "-j", help="Worker processes [default: CPU count]."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompute every configuration "
                                  "instead of reusing cached rows."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots and the "
                               "Chrome-trace timeline of the winner."),
) -> None:
    """Simulate every configuration of an experiment's grid and report the fastest that fits.

    Writes results.csv (one row per configuration; times in seconds, memory in bytes),
    winner.yaml (re-runnable with `sim run`, accepted by `sim validate`), config.resolved.yaml,
    plots (PNG) and timeline.json (Chrome trace: open in https://ui.perfetto.dev).
    """
    from sim.run import run_experiment

    code = run_experiment(experiment, out_dir=out_dir, jobs=jobs or (os.cpu_count() or 1),
                          use_cache=not no_cache, plots=plots, console=out)
    raise typer.Exit(code)


@hardware_app.command("list")
def hardware_list() -> None:
    """List hardware presets."""
    from sim.hardware.loader import list_presets

    for name in list_presets():
        out.print(name)


@hardware_app.command("show")
@friendly
def hardware_show(
    name: str = typer.Argument(..., help="Preset name or hardware YAML path."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (bytes, bytes/s, seconds)."),
) -> None:
    """Print a hardware description: GPUs (GiB, TFLOPS), links (GB/s, us) and routes."""
    from sim.hardware.describe import describe_topology, topology_to_dict
    from sim.hardware.loader import load_hardware

    topo = load_hardware(name, field="hardware")
    if as_json:
        print(json.dumps(topology_to_dict(topo), indent=2))
    else:
        out.print(describe_topology(topo))


@schedule_app.command("list")
def schedule_list() -> None:
    """List schedules."""
    from sim.schedules.registry import get_schedule, schedule_names

    for name in schedule_names():
        out.print(f"{name:15s} {get_schedule(name).description}")


@schedule_app.command("show")
@friendly
def schedule_show(
    name: str = typer.Argument(..., help="Schedule name (see `sim schedule list`)."),
    stages: int = typer.Option(..., "--stages", "-p", help="Pipeline depth p."),
    microbatches: int = typer.Option(..., "--microbatches", "-m", help="Micro-batches per "
                                     "iteration m."),
    iterations: int = typer.Option(1, help="Optimizer steps to unroll."),
    csv: Path = typer.Option(None, "--csv", help="Write one iteration in torch's compute-only "
                             "CSV format to this file."),
) -> None:
    """Print a schedule as a step x rank grid of actions like '2F0' (stage 2, forward, mb 0)."""
    from sim.point import make_schedule
    from sim.schedules.csv_io import to_csv
    from sim.schedules.grid import format_grid

    sched = make_schedule(name, stages, microbatches, file="command line", field="--stages")
    print(format_grid(sched.program(iterations)))
    versions = [sched.weight_versions(s) for s in range(stages)]
    out.print(f"weight versions per stage: {versions}; synchronous: {sched.synchronous}")
    if csv:
        to_csv(sched.one_iteration(), csv)
        out.print(f"wrote {csv}")


@trace_app.command("list")
def trace_list() -> None:
    """List the traces shipped in traces/."""
    from sim.trace.loader import available_traces

    for name in available_traces():
        out.print(name)


@trace_app.command("show")
@friendly
def trace_show(ref: str = typer.Argument(..., help="Trace name or path.")) -> None:
    """Print a trace's layers (ms, MiB) and provenance."""
    from rich.table import Table

    from sim.trace.loader import load_trace
    from sim.units import fmt_bytes

    trace = load_trace(ref, file="command line", field="TRACE")
    table = Table(title=f"{trace.name}: {len(trace.layers)} layers, {trace.parameters:,} params, "
                        f"micro-batch {trace.microbatch_size}, {trace.dtype}, {trace.device}")
    for col in ("#", "layer", "fwd ms", "bwd ms", "params", "act", "out"):
        table.add_column(col, justify="right" if col != "layer" else "left")
    for i, layer in enumerate(trace.layers):
        table.add_row(str(i), layer.name[:40], f"{layer.fwd_s * 1e3:.3f}",
                      f"{layer.bwd_s * 1e3:.3f}", fmt_bytes(layer.param_bytes),
                      fmt_bytes(layer.act_bytes), fmt_bytes(layer.out_bytes))
    out.print(table)
    out.print(trace.provenance)


@app.command("partition")
@friendly
def partition_cmd(
    trace_ref: str = typer.Argument(..., metavar="TRACE", help="Trace name or path."),
    stages: int = typer.Option(..., "--stages", "-p", help="Number of stages P."),
    hardware: str = typer.Option(None, "--hardware", help="Preset or YAML: use its GPU "
                                 "memory as the capacity and its links for boundary transfers."),
    microbatch_size: int = typer.Option(None, "--microbatch-size", "-b",
                                        help="Scale the trace to this micro-batch size."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (seconds, bytes)."),
) -> None:
    """Split a trace's layers into P contiguous stages minimising the slowest stage.

    A stage's time is its forward + backward compute plus 2 x boundary bytes / link bandwidth;
    its memory is 16 B/param (fp16 + Adam) + (P - s) in-flight micro-batches of activations.
    """
    from sim.partition import partition, partition_json, partition_table
    from sim.placement import place
    from sim.trace.loader import load_trace

    trace = load_trace(trace_ref, file="command line", field="TRACE")
    if microbatch_size:
        trace = trace.scaled_to_microbatch(microbatch_size)
    bw = caps = None
    if hardware:
        from sim.hardware.loader import load_hardware

        topo = load_hardware(hardware, field="--hardware")
        if stages > topo.num_gpus:
            raise InputError(f"{stages} stages but {topo.name} has {topo.num_gpus} GPUs",
                             field="--stages")
        row = place(topo, stages, 1)[0]
        bw = [topo.route_bandwidth_Bps(f"gpu{row[j]}", f"gpu{row[j + 1]}")
              for j in range(stages - 1)] or None
        caps = [topo.gpu(g).memory_bytes for g in row]
    part = partition(trace, stages, bandwidth_Bps=bw, memory_capacity_bytes=caps)
    if as_json:
        print(json.dumps(partition_json(part, trace), indent=2))
    else:
        out.print(partition_table(part, trace))


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())

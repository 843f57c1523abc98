"""``sim hardware list|show``: the hardware presets (:mod:`sim.hardware`)."""

from __future__ import annotations

import json

import typer
from rich.markup import escape

from sim.cli.console import err, friendly, out
from sim.hardware.describe import describe_topology, topology_to_dict
from sim.hardware.loader import list_presets, load_hardware

app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Hardware presets (GPUs, links, hosts)."
)


@app.command("list", short_help="The presets: GPUs per server, GPU model, memory.")
def hardware_list() -> None:
    """List hardware presets: name, GPUs per server (or NVLink domain) and their model and
    memory (GiB as CUDA reports it), then the multi-server forms."""
    for name in list_presets():
        topo = load_hardware(name)
        g = topo.gpus[0]
        out.print(
            f"{name:<18} {topo.num_gpus:>3} x {g.model} ({g.memory_bytes / 2**30:.1f} GiB)",
            highlight=False,
        )
    out.print(
        "'Nx-PRESET': N servers of a preset with a network (e.g. 8x-dgx-h100); "
        "'nvlDxN-GPU': N NVLink domains (e.g. nvl72x4-gb200); details: sim hardware show NAME",
        highlight=False,
    )


@app.command("show", short_help="A hardware description and its figures' sources.")
@friendly
def hardware_show(
    name: str = typer.Argument(..., metavar="NAME", help="Preset name or hardware YAML path."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (bytes, bytes/s, seconds)."),
) -> None:
    """Print a hardware description: GPUs (GiB, TFLOPS), links (GB/s, us) and routes."""
    topo = load_hardware(name, file="command line", field="NAME")
    if as_json:
        print(json.dumps(topology_to_dict(topo), indent=2))
    else:
        out.print(describe_topology(topo))
    for note in topo.notes:  # e.g. a gpu.memory override replaced by the CUDA total
        err.print(f"note: {escape(note)}", highlight=False)

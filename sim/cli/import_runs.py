"""``sim import FILE...``: the typer adapter over :func:`sim.import_runs.import_runs`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sim.cli.console import QUIET, VERBOSE, apply_verbosity, friendly, out
from sim.import_runs import import_runs
from sim.runs.readers import read_hf_config

STYLE = {"mapped": "green", "ignored": "dim", "approximated": "yellow", "unmapped": "red"}


@friendly
def import_cmd(
    sources: list[str] = typer.Argument(
        ...,
        metavar="SOURCE",
        help="Launch commands (a file, or the command in quotes), configs (Megatron-Bridge "
        "YAML, torchtitan TOML, DeepSpeed JSON, a functional test's model_config.yaml) or "
        "training logs (Megatron-LM, torchtitan, DeepSpeed, functional-test golden JSON).",
    ),
    out_dir: Path = typer.Option(Path("imported"), "--out", "-o", help="Folder to write into."),
    gpu: str = typer.Option("", help="The GPU the run used (e.g. H100, B200, A100-SXM-80GB)."),
    gpus: int = typer.Option(None, "--gpus", min=1, help="GPUs in the job (when not given)."),
    config: Path = typer.Option(
        None,
        help="Companion file: the DeepSpeed JSON of a command or log, the torchtitan "
        "TOML of a log, the model_config.yaml of a golden JSON.",
    ),  # fmt: skip
    command: str = typer.Option(None, help="The launch command of a DeepSpeed log or config."),
    model_config: Path = typer.Option(
        None, "--model-config", help="The model's Hugging Face config.json (DeepSpeed jobs)."
    ),
    seq_len: int = typer.Option(
        None, "--seq-len", min=1, help="Tokens per sample, when not given."
    ),
    ignore: list[str] = typer.Option(
        [], "--ignore", help="Run without this unexpressible argument (repeat for several)."
    ),
    sweep: bool = typer.Option(False, "--sweep", help="Write a sweep around the run."),
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """Turn launch arguments, configs and logs into experiments that `sim run` runs, and report
    how every argument was read (mapped, ignored with the reason, approximated).

    Writes into --out, per run: NAME.yaml (the experiment), its trace (CSV of seconds and
    bytes per layer, and YAML provenance), NAME.arguments.csv (every argument and how it was
    read) and, for a log, NAME.measured.csv (the measured iteration time in seconds and memory
    in bytes)."""
    apply_verbosity(verbose, quiet)
    hf = read_hf_config(model_config) if model_config else None
    done = import_runs(
        sources, out=out_dir, ignore=ignore, sweep=sweep, gpu=gpu, num_gpus=gpus,
        config=config, command=command, hf_config=hf, seq_len=seq_len,
    )  # fmt: skip
    for item in done:
        table = Table(title=escape(f"{item.run.source}: {len(item.run.args)} arguments"))
        for col in ("argument", "value", "read as", "reason"):
            table.add_column(col, overflow="fold")
        for a in item.run.args:
            table.add_row(escape(a.name), escape(a.value[:40]),
                          f"[{STYLE[a.status]}]{a.status}[/]", escape(a.reason))  # fmt: skip
        out.print(table)
        for n in item.run.notes:
            out.print(f"[yellow]assumed[/] {escape(n)}", highlight=False)
        paths = ", ".join(str(p) for p in item.files)
        out.print(escape(f"wrote {paths}; run: sim run {item.experiment}"), highlight=False)

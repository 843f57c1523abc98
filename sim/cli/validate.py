"""``sim validate CONFIG``: the typer adapter over :func:`sim.api.validate`.

It hands the torch backend (:class:`backends.torch.replay.replayer.TorchReplayer`) to the validation
pipeline and prints its rows as they are measured: a table of every rank's replays, or one line
per replay of a rank alone (``--single-rank``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import typer
from rich.markup import escape
from rich.table import Table

from backends.torch.devices import check_device_name
from backends.torch.replay.replayer import TorchReplayer
from sim import api
from sim.atomic import check_writable
from sim.cli.console import QUIET, VERBOSE, apply_verbosity, err, friendly, need_torch, out
from sim.config import MAX_GPUS, MAX_ITERATIONS, MAX_MICROBATCHES
from sim.validate import ValidationSpec

COLUMNS = (
    "schedule",
    "runtime",
    "m",
    "measured ms",
    "predicted ms",
    "error",
    "peak MiB (meas/pred)",
    "actions ok",
    "numerics",
)


def _ok(r: dict[str, Any]) -> bool:
    return bool(r["all_actions_done"] and r["losses_finite"] and r.get("losses_match", True))


def numerics_text(r: dict[str, Any]) -> str:
    """``numerics ok (max relative error: gradients 7e-07, losses 0; tolerance 1e-04)``."""
    if r["numerics"] == "skipped":
        return f"numerics skipped: {r.get('numerics_reason', '')}"
    text = (
        f"numerics {r['numerics']} (max relative error vs one process: gradients "
        f"{r['grad_max_error']:.1e}, losses {r['loss_max_error']:.1e}; tolerance "
        f"{r['numerics_tolerance']:.0e})"
    )
    if r["numerics"] != "ok":
        text += f"; worst: {r['grad_worst']}" + (
            f"; {r['numerics_reason']}" if r.get("numerics_reason") else ""
        )
    return text


def print_single_rank(r: dict[str, Any]) -> None:
    """One line per replay of a rank alone."""
    out.print(
        escape(
            f"  {r['schedule']} rank {r['rank']}/{r['stages']} m={r['microbatches']} "
            f"{r['memory_policy']}: measured {r['measured_iteration_s'] * 1e3:.1f} ms, "
            f"predicted {r['predicted_iteration_s'] * 1e3:.1f} ms ({r['error']:+.1%}); peak "
            f"{r['measured_peak_bytes'] / 2**20:.2f} / {r['predicted_peak_bytes'] / 2**20:.2f} "
            f"MiB ({r['memory_error']:+.1%}); actions {'ok' if _ok(r) else 'WRONG'}"
        ),
        highlight=False,
    )


def _unrun(r: dict[str, Any]) -> bool:
    """Print a replay that failed or could not run; True when ``r`` is one."""
    where = f"  {r['schedule']} ({r['runtime']}) m={r['microbatches']}"
    if r["status"] == "failed":
        err.print(f"[bold red]{escape(where)}: replay failed:[/] {escape(r['reason'])}")
        return True
    if r["status"] == "not_run":
        err.print(f"[yellow]{escape(where)}: not run:[/] {escape(r['reason'])}")
        return True
    return False


def table_printer(table: Table):
    """A row callback: one line now, and the row added to ``table`` for the end."""

    def row(r: dict[str, Any]) -> None:
        if _unrun(r):
            return
        if r["mode"] == "single_rank":
            print_single_rank(r)
            return
        out.print(
            escape(
                f"  {r['schedule']} ({r['runtime']}) m={r['microbatches']}: measured "
                f"{r['measured_iteration_s'] * 1e3:.1f} ms, predicted "
                f"{r['predicted_iteration_s'] * 1e3:.1f} ms ({r['error']:+.1%}); "
                + numerics_text(r)
            ),
            highlight=False,
        )
        table.add_row(
            r["schedule"],
            r["runtime"],
            str(r["microbatches"]),
            f"{r['measured_iteration_s'] * 1e3:.1f}",
            f"{r['predicted_iteration_s'] * 1e3:.1f}",
            f"{r['error']:+.1%}",
            f"{r['measured_peak_bytes'] / 2**20:.1f} / {r['predicted_peak_bytes'] / 2**20:.1f}",
            "yes" if _ok(r) else "NO",
            str(r["numerics"]),
        )

    return row


def print_summary(df: pd.DataFrame, dest: Path, table: Table, single_rank: bool) -> None:
    """The table (every rank) or the mean errors (one rank), and where the file went."""
    ran = df[df["status"] == "ok"]
    if single_rank:
        out.print(
            f"mean absolute error: time {ran['error'].abs().mean():.1%}, memory "
            f"{ran['memory_error'].abs().mean():.1%}  -> {escape(str(dest))}",
            highlight=False,
        )
        return
    out.print(table)
    mape = (ran["error"].abs().mean()) * 100
    out.print(f"mean absolute percentage error: {mape:.1f}%  -> {escape(str(dest))}")


def verdict(df: pd.DataFrame, single_rank: bool) -> str | None:
    """Why the command exits 1 (a replay failed, ran wrong actions, lost a loss or failed the
    numerics check), or ``None``."""
    ran = df[df["status"] == "ok"]
    if (df["status"] == "failed").any():
        return f"{int((df['status'] == 'failed').sum())} replay(s) failed (rows kept)"
    if not (ran["all_actions_done"].all() and ran["losses_finite"].all()):
        who = "the rank" if single_rank else "a rank"
        return f"{who} did not run all its actions or a loss was not finite"
    if "losses_match" in ran and not ran["losses_match"].fillna(True).astype(bool).all():
        return "the parallel replay's losses differ from one process's"
    if (ran["numerics"] == "FAILED").any():
        return "a replay's losses or gradients differ from the one-process reference"
    return None


@friendly
def validate(
    config: Path = typer.Argument(
        ...,
        metavar="CONFIG",
        help="A winner.yaml (or any single-configuration "
        "experiment) whose trace was made by `sim profile`.",
    ),
    nproc: int = typer.Option(
        None,
        min=1,
        max=MAX_GPUS,
        help="Ranks; must equal the pipeline depth x tensor_parallel x context_parallel "
        "(x dp_width with expert parallelism).",
        show_default="that product",
    ),
    device: str = typer.Option("cpu", help="cpu (gloo) or cuda (NCCL)."),
    schedule: list[str] = typer.Option(
        None,
        "--schedule",
        "-s",
        help="Replay these schedules instead (repeatable).",
        show_default="CONFIG's",
    ),
    microbatches: list[int] = typer.Option(
        None,
        "--microbatches",
        "-m",
        min=1,
        max=MAX_MICROBATCHES,
        help="Replay these micro-batch counts instead (repeatable).",
        show_default="CONFIG's",
    ),
    iterations: int = typer.Option(
        3, min=1, max=MAX_ITERATIONS, help="Measured iterations (optimizer steps)."
    ),
    warmup: int = typer.Option(1, min=0, max=MAX_ITERATIONS, help="Warm-up iterations."),
    torch_builtin: bool = typer.Option(
        False,
        "--torch-builtin",
        help="Also run torch's ScheduleGPipe / Schedule1F1B on the same model.",
    ),
    out_dir: Path = typer.Option(
        None,
        "--out",
        help="Folder for validation.csv and the timelines.",
        show_default="beside CONFIG",
    ),
    single_rank: int = typer.Option(
        None,
        "--single-rank",
        help="Run only this pipeline rank's actions, alone in one process on one device "
        "(sends and receives become local buffers); compare with that GPU's predicted busy "
        "time and peak memory.",
    ),
    stages: int = typer.Option(
        None,
        "--stages",
        help="With --single-rank: the pipeline depth P the rank belongs to (uniform "
        "partition; the layers must split evenly).",
        show_default="CONFIG's",
    ),
    virtual_stages: int = typer.Option(
        None,
        "--virtual-stages",
        min=1,
        help="Stage chunks per rank for the replayed schedules (interleaved_1f1b, looped_bfs, "
        "interleaved_zero_bubble: 2 or more; zbv_zero_bubble, dualpipe_v: 2); a variant with "
        "another stage count than CONFIG is partitioned afresh.",
        show_default="CONFIG's, else the schedule's smallest",
    ),
    timeout: float = typer.Option(
        600.0,
        "--timeout",
        min=1.0,
        max=7 * 24 * 3600.0,
        help="Seconds each replay (and its numerics run) may take before its processes are "
        "stopped and it is reported as a failed row.",
    ),
    numerics: bool = typer.Option(
        True,
        help="Check each replay's losses and gradients against the same model, seed and data "
        "run in one process (the numerics columns).",
    ),
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """Replay a configuration on real devices with torch and compare with the prediction.

    Prints measured and predicted iteration time (seconds) and peak memory (bytes) per
    configuration with the relative error (predicted - measured) / measured, and the numerics
    check (losses and gradients against the same model in one process), and writes them to
    validation.csv. With --single-rank R, one rank runs alone (see sim/validate/predict.py).
    Exit 1 when a replay failed (its row is kept), ran wrong actions or failed the numerics.
    """
    apply_verbosity(verbose, quiet)
    check_device_name(device)
    spec = ValidationSpec(schedules=tuple(schedule or ()), microbatches=tuple(microbatches or ()),
                          device=device, nproc=nproc, iterations=iterations,
                          warmup_iterations=warmup, torch_builtin=torch_builtin,
                          rank=single_rank, stages=stages, virtual_stages=virtual_stages,
                          numerics=numerics, timeout_s=timeout)  # fmt: skip
    spec.check()
    if out_dir:
        check_writable(out_dir, option="--out", directory=True)
    need_torch()
    table = Table(title="measured vs predicted")
    for col in COLUMNS:
        table.add_column(col, justify="right")
    result = api.validate(config, replayer=TorchReplayer(), out=out_dir,
                          schedules=spec.schedules, microbatches=spec.microbatches,
                          device=device, nproc=nproc, iterations=iterations, warmup=warmup,
                          torch_builtin=torch_builtin, rank=single_rank, stages=stages,
                          virtual_stages=virtual_stages, numerics=numerics,
                          timeout_s=timeout, on_row=table_printer(table),
                          console=out)  # fmt: skip
    print_summary(result.table, result.path, table, single_rank is not None)
    why = verdict(result.table, single_rank is not None)
    if why:
        err.print(f"[bold red]{escape(why)}[/]")
        raise typer.Exit(1)

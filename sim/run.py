"""``sim run``: load, validate, sweep, pick the winner, write everything, print a summary."""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim.config import load_experiment
from sim.executors import open_executor
from sim.hardware.describe import topology_to_dict
from sim.outputs import (
    check_model_names,
    check_out_dir,
    commit_output,
    recover_out_dir,
    staged_output,
    winner_config,
    write_results_csv,
    write_winner_artifacts,
    write_yaml,
)
from sim.planner import PlanStats, plan_points
from sim.point import evaluate, resolve
from sim.rows import ResultRow, pick_winner
from sim.sweep import expand, prepare


def run_experiment(
    path: Path,
    *,
    out_dir: Path | None,
    jobs: int,
    use_cache: bool,
    plots: bool,
    console: Console,
    executor: str = "local",
    exhaustive: bool = False,
) -> int:
    """Run one experiment file; returns the process exit code (0 ok, 1 nothing fits).

    Args:
        executor: ``local`` or ``ray`` (:mod:`sim.executors`).
        exhaustive: simulate every point (no pruning: :mod:`sim.planner`), as
            ``sweep.prune: false`` does.

    Raises:
        InputError: bad experiment, hardware, trace or grid, or ``--executor ray`` without
            ray installed (nothing is written then).
    """
    t0 = time.perf_counter()
    exp = load_experiment(path)
    prep = prepare(exp, str(path))
    points, skipped = expand(prep)
    out = Path(out_dir) if out_dir else Path("results") / exp.name
    check_model_names(exp, str(path))
    check_out_dir(out)
    out = out.resolve()  # the swap renames it: its name and parent must be real
    recover_out_dir(out)
    console.print(
        f"[bold]{exp.name}[/]: {len(points)} configurations on {prep.topology.name}"
        + (f" ({len(skipped)} combinations skipped)" if skipped else "")
    )
    notes = _compute_notes(prep, points)
    for line in (n for model_notes in notes.values() for n in model_notes):
        console.print(f"[yellow]note[/] {escape(line)}", highlight=False)
    jobs = min(jobs, len(points))
    with open_executor(executor, prep, jobs) as pool, _progress(console, len(points)) as on_done:
        rows, stats = plan_points(
            prep,
            points,
            cache_dir=out / ".cache" if use_cache else None,
            executor=pool,
            prune=exp.sweep.prune and not exhaustive,
            jobs=jobs,
            on_done=on_done,
            on_warning=lambda msg: console.print(
                f"[yellow]warning:[/] {escape(msg)}", highlight=False, soft_wrap=True
            ),
        )
    console.print(stats.summary(), highlight=False)
    with staged_output(out) as stage:
        code, written = _write_all(
            exp, prep, points, skipped, rows, path, stage, plots, console, notes, stats
        )
        commit_output(stage, out)
    _print_paths(console, [out / p.relative_to(stage) for p in written], t0)
    return code


def _write_all(
    exp,
    prep,
    points,
    skipped,
    rows,
    path: Path,
    out: Path,
    plots: bool,
    console: Console,
    notes: dict[str, list[str]],
    stats: PlanStats | None = None,
) -> tuple[int, list[Path]]:
    """Write the whole output set into ``out`` (the staging folder); returns the exit code
    (0, or 1 when a model has no fitting configuration) and the files written."""
    df = write_results_csv(rows, out / "results.csv")
    _write_resolved(out, exp, prep, points, skipped, notes, stats)
    written = [out / "results.csv", out / "config.resolved.yaml"]
    if plots and "throughput_samples_per_s" in df:
        from sim.report.plots import plot_throughput

        written.append(plot_throughput(df[df["error"].fillna("") == ""], out / "throughput.png"))
    from sim.report.tables import summary_table

    ok = df[df["error"].fillna("") == ""]
    if "memory_policy" in ok and ok["memory_policy"].nunique() > 1:
        written += _memory_summary(ok, out, plots, console, _gpt_shapes(prep))
    code = 0
    for i, model in enumerate(exp.models):
        console.print(summary_table(df[df["model"] == model.name], top=5))
        winner = pick_winner([r for r in rows if r.model == model.name])
        if winner is None:
            console.print(
                f"[bold red]{model.name}: no configuration fits in memory.[/] See "
                "results.csv (peak_memory_bytes, oom_device); try more stages, a "
                "smaller micro-batch or a memory policy."
            )
            code = 1
            continue
        dirs = [out] if i == 0 else []
        if len(exp.models) > 1:
            dirs.append(out / model.name)
        written += _write_winner(exp, prep, points, winner, path, dirs, plots)
        console.print(
            f"[bold green]{model.name} winner:[/] {winner.schedule} "
            f"p={winner.stages}{_v(winner.virtual_stages)} w={winner.dp_width} "
            + (
                f"t={winner.tensor_parallel}{'+sp' if winner.sequence_parallel else ''} "
                if winner.tensor_parallel > 1
                else ""
            )
            + f"b={winner.microbatch_size} m={winner.microbatches} "
            f"policy={winner.memory_policy}: "
            f"{winner.throughput_samples_per_s:.2f} samples/s, "
            f"{(winner.iteration_time_s or math.nan) * 1e3:.2f} ms/iteration, "
            f"peak {(winner.peak_memory_bytes or math.nan) / 2**30:.2f} GiB",
            highlight=False,
        )
    return code, written


PROGRESS_EVERY_S = 5.0
"""Seconds between the plain progress lines printed when the output is not a terminal."""


@contextmanager
def _progress(console: Console, total: int):
    """A progress callback ``on_done(n)``: a rich bar on a terminal, else a plain line on
    stderr every :data:`PROGRESS_EVERY_S` seconds and at the end (logs and CI see progress)."""
    if console.is_terminal:
        with Progress(
            TextColumn("simulating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("sweep", total=total)
            yield lambda n: bar.update(task, completed=n)
        return
    t0 = last = time.monotonic()

    def line(n: int) -> None:
        nonlocal last
        now = time.monotonic()
        if n >= total or now - last >= PROGRESS_EVERY_S:
            last = now
            print(
                f"simulating: {n}/{total} configurations ({100 * n / max(total, 1):.0f}%), "
                f"{now - t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    yield line


def _gpt_shapes(prep) -> dict[str, dict]:
    """Per model, the GPT shape its trace was generated from (provenance ``inputs``), for
    Narayanan et al.'s FLOP formula; models of other traces are left out."""
    keys = ("layers", "hidden", "seq_len", "vocab")
    out = {}
    for name, t in prep.traces.items():
        inputs = (t.provenance or {}).get("inputs") or {}
        if inputs.get("kind") == "gpt" and all(k in inputs for k in keys):
            out[name] = {k: inputs[k] for k in keys}
    return out


def _memory_summary(df, out: Path, plots: bool, console: Console, shapes=None) -> list[Path]:
    """Largest model per policy and fastest policy per model: table, CSV and two plots (and
    TFLOPS per GPU for GPT models)."""
    from sim.report.memory_summary import write_memory_summary

    table, written = write_memory_summary(df, out, plots, shapes)
    console.print(
        "[bold]Memory policies[/]: best fitting samples/s per model and policy; "
        "last row: the largest model that fits per policy"
    )
    console.print(
        table.to_string(float_format=lambda v: f"{v:,.2f}", na_rep="—"),
        highlight=False,
        soft_wrap=True,
    )
    return written


def _write_winner(
    exp, prep, points, winner: ResultRow, path: Path, dirs: list[Path], plots: bool
) -> list[Path]:
    """winner.yaml and, with ``plots``, the winner's memory plots and timelines in each of
    ``dirs`` (the winner is simulated once)."""
    data = winner_config(exp, str(path), winner)
    written = [write_yaml(d / "winner.yaml", data) for d in dirs]
    if plots:
        point = winner.point()
        res = resolve(exp, point, prep.topology, prep.traces[point.model], file=str(path))
        _, log = evaluate(res)
        title = (
            f"{point.model} {point.schedule} p={point.stages}{_v(point.virtual_stages)} "
            f"w={point.dp_width} t={point.tensor_parallel} "
            f"b={point.microbatch_size} m={point.microbatches}"
        )
        for d in dirs:
            written += write_winner_artifacts(d, log, title)
    return written


def _compute_notes(prep, points) -> dict[str, list[str]]:
    """Per model, how its trace is brought to each micro-batch size and to this GPU."""
    from sim.compute.adapt import grid_notes
    from sim.point import split_note
    from sim.schedules.registry import get_schedule

    gpu = prep.topology.gpus[0].compute
    out = {
        name: grid_notes(t, [p.microbatch_size for p in points if p.model == name], gpu)
        for name, t in prep.traces.items()
    }
    for name, t in prep.traces.items():  # the I/W split assumption (sim.engine.inputs)
        if any(x.bwd_input_s is None or x.bwd_weight_s is None for x in t.layers):
            split = sorted(
                {
                    p.schedule
                    for p in points
                    if p.model == name and get_schedule(p.schedule).splits_backward
                }
            )
            out[name] += [f"{name}: {split_note(s)}" for s in split]
    return out


def _write_resolved(out: Path, exp, prep, points, skipped, notes, stats=None) -> None:
    data = {
        "experiment": exp.model_dump(mode="json"),
        "hardware": topology_to_dict(prep.topology),
        "traces": {
            name: {
                "layers": len(t.layers),
                "parameters": t.parameters,
                "microbatch_size": t.microbatch_size,
                "dtype": t.dtype,
                "device": t.device,
                "provenance": json.loads(json.dumps(t.provenance, default=str)),
            }
            for name, t in prep.traces.items()
        },
        "compute_notes": notes,
        "points": len(points),
        "skipped": [{"config": d, "reason": r} for d, r in skipped],
    }
    if stats is not None:
        data["planner"] = stats.as_dict()
    write_yaml(out / "config.resolved.yaml", data)


def _print_paths(console: Console, paths, t0: float) -> None:
    console.print(
        escape(f"wrote {len(paths)} files in {paths[0].parent} ({time.perf_counter() - t0:.1f} s):")
    )
    for p in paths:
        console.print(escape(f"  {p}"), highlight=False)


def _v(virtual_stages: int) -> str:
    """`` v=2`` for a point with stage chunks per rank; nothing for one stage per rank."""
    return f" v={virtual_stages}" if virtual_stages > 1 else ""

"""``sim run``: load, validate, sweep, pick the winner, write everything, print a summary."""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim.config import ExperimentConfig, load_experiment
from sim.events import EventLog
from sim.hardware.describe import topology_to_dict
from sim.plan.executors import open_executor
from sim.plan.planner import PlanStats, plan_points
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import Prepared, prepare
from sim.point.rows import BestRows, ResultRow, pick_winner
from sim.point.simulate import evaluate, resolve, split_note
from sim.report.memory_summary import write_memory_summary, write_tflops
from sim.report.outputs import (
    Drawing,
    check_model_names,
    check_out_dir,
    commit_output,
    copy_files,
    draw,
    recover_out_dir,
    staged_output,
    winner_artifacts,
    winner_config,
    write_results_csv,
    write_yaml,
)
from sim.report.plots import plot_throughput
from sim.report.row_bands import bands_for, winner_bands
from sim.report.tables import summary_table


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
    exp: ExperimentConfig | None = None,
) -> int:
    """Run one experiment file; returns the process exit code (0 ok, 1 nothing fits).

    Args:
        exp: the experiment ``path`` holds, when the caller has parsed it already (it is then
            not read again).
        executor: ``local`` or ``ray`` (:mod:`sim.plan.executors`).
        exhaustive: simulate every point (no pruning: :mod:`sim.plan.planner`), as
            ``sweep.prune: false`` does.

    Raises:
        InputError: bad experiment, hardware, trace or grid, or ``--executor ray`` without
            ray installed (nothing is written then).
    """
    t0 = time.perf_counter()
    exp = exp or load_experiment(path)
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
    best = BestRows()  # each model's best row, with its event log for the winner's plots
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
            winners=best if plots else None,
        )
    console.print(stats.summary(), highlight=False)
    with staged_output(out) as stage:
        code, written = _write_all(
            exp, prep, points, skipped, rows, path, stage, plots, console, notes, stats, best, jobs
        )
        commit_output(stage, out)
    _print_paths(console, [out / p.relative_to(stage) for p in written], t0)
    return code


def _write_all(
    exp: ExperimentConfig,
    prep: Prepared,
    points: list[PointConfig],
    skipped: list[tuple[str, str]],
    rows: list[ResultRow],
    path: Path,
    out: Path,
    plots: bool,
    console: Console,
    notes: dict[str, list[str]],
    stats: PlanStats | None = None,
    best: BestRows | None = None,
    jobs: int = 1,
) -> tuple[int, list[Path]]:
    """Write the whole output set into ``out`` (the staging folder); returns the exit code
    (0, or 1 when a model has no fitting configuration) and the files written. ``best`` holds
    the winners' event logs from the sweep (a winner without one, read from the cache, is
    simulated here); the plots are drawn on ``jobs`` processes (:func:`sim.report.outputs.draw`)."""
    bands_here = bands_for(g.model for g in prep.topology.gpus)
    df = write_results_csv(rows, out / "results.csv", bands_here)
    _write_resolved(out, exp, prep, points, skipped, notes, stats)
    written = [out / "results.csv", out / "config.resolved.yaml"]
    pending = _Pending()
    ok = df[df["error"].fillna("") == ""]
    if plots and "throughput_samples_per_s" in df:
        pending.drawings.append(
            (out / "throughput.png", partial(plot_throughput, ok, out / "throughput.png"))
        )
        written.append(out / "throughput.png")
    if "memory_policy" in ok and ok["memory_policy"].nunique() > 1:
        written += _memory_summary(ok, out, plots, console, _gpt_shapes(prep), pending)
    elif _gpt_shapes(prep):
        written += _tflops(ok, out, plots, console, _gpt_shapes(prep), pending)
    code = 0
    bands = winner_bands(df)
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
        log = best.log_of(winner) if best is not None else None
        band = bands.get(model.name, {})
        written += _write_winner(exp, prep, winner, band, log, path, dirs, plots, pending)
        console.print(
            f"[bold green]{model.name} winner:[/] {winner.schedule} "
            f"p={winner.stages}{_v(winner.virtual_stages)} w={winner.dp_width} "
            + (
                f"t={winner.tensor_parallel}{'+sp' if winner.sequence_parallel else ''} "
                if winner.tensor_parallel > 1
                else ""
            )
            + f"b={winner.microbatch_size} m={winner.microbatches} "
            f"policy={winner.memory_policy}"
            + (f" precision={winner.precision}" if winner.precision else "")
            + f": {winner.throughput_samples_per_s:.2f} samples/s, "
            f"{(winner.iteration_time_s or math.nan) * 1e3:.2f} ms/iteration, "
            f"peak {(winner.peak_memory_bytes or math.nan) / 2**30:.2f} GiB",
            highlight=False,
        )
        _print_band(console, model.name, band)
    pending.finish(jobs)
    return code, written


@dataclass
class _Pending:
    """Files to draw (on several processes, :func:`sim.report.outputs.draw`) and, once drawn, to copy
    into other folders."""

    drawings: list[Drawing] = field(default_factory=list)
    copies: list[tuple[list[Path], Path]] = field(default_factory=list)

    def finish(self, jobs: int) -> None:
        draw(self.drawings, jobs)
        for files, dest in self.copies:
            copy_files(files, dest)


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


def _memory_summary(
    df, out: Path, plots: bool, console: Console, shapes: dict, pending: _Pending
) -> list[Path]:
    """Largest model per policy and fastest policy per model: table, CSV and two plots (and
    TFLOPS per GPU for GPT models), the plots added to ``pending``."""
    table, written = write_memory_summary(df, out, plots, shapes, pending.drawings)
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


def _tflops(
    df, out: Path, plots: bool, console: Console, shapes: dict, pending: _Pending
) -> list[Path]:
    """TFLOP/s per GPU of the GPT models (Narayanan et al. SC'21 eq. 3): printed, CSV, plot
    (added to ``pending``)."""
    table, written = write_tflops(df, out, plots, shapes, pending.drawings)
    if not table.empty:
        console.print(
            "[bold]TFLOP/s per GPU[/] (best fitting; 96 B s l h^2 (1 + s/6h + V/16lh) / "
            "(iteration time x GPUs), Narayanan et al. SC'21 eq. 3)"
        )
        console.print(table.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    return written


def _write_winner(
    exp: ExperimentConfig,
    prep: Prepared,
    winner: ResultRow,
    band: dict,
    log: EventLog | None,
    path: Path,
    dirs: list[Path],
    plots: bool,
    pending: _Pending,
) -> list[Path]:
    """winner.yaml in each of ``dirs`` and, with ``plots``, the winner's memory plots and
    timelines: drawn once (into the last folder, added to ``pending``) and copied into the
    others. ``log`` is the winner's event log from the sweep; without one (a cached row) the
    winner is simulated here; ``band`` (:func:`sim.report.row_bands.winner_bands`) goes into its
    ``prediction``. Returns the files, those still pending included."""
    data = winner_config(exp, str(path), winner, band)
    written = [write_yaml(d / "winner.yaml", data) for d in dirs]
    if not plots:
        return written
    point = winner.point()
    if log is None:
        res = resolve(exp, point, prep.topology, prep.traces[point.model], file=str(path))
        log = evaluate(res)[1]
    title = (
        f"{point.model} {point.schedule} p={point.stages}{_v(point.virtual_stages)} "
        f"w={point.dp_width} t={point.tensor_parallel} "
        f"b={point.microbatch_size} m={point.microbatches}"
    )
    drawings = winner_artifacts(dirs[-1], log, title)
    pending.drawings += drawings
    drawn = [f for f, _ in drawings]
    for d in dirs[:-1]:
        pending.copies.append((drawn, d))
        written += [d / f.name for f in drawn]
    return written + drawn


def _print_band(console: Console, model: str, band: dict) -> None:
    """The winner's band and the configurations within it (:mod:`sim.report.row_bands`)."""
    if not band:
        return
    near = band["within_band"]
    console.print(
        f"  band: {band['throughput_low_samples_per_s']:.2f}–"
        f"{band['throughput_high_samples_per_s']:.2f} samples/s, "
        f"{band['iteration_time_low_s'] * 1e3:.2f}–{band['iteration_time_high_s'] * 1e3:.2f} "
        f"ms/iteration (p10–p90 of measured/predicted, {band['band_source']}; sim/data/bands.csv)",
        highlight=False,
    )
    if near["count"]:
        console.print(
            f"  [yellow]note[/] {model}: {near['count']} other configurations are within "
            f"each other's band with the winner (results.csv within_winner_band), so the pick "
            f"is not clearly faster than them; best: {'; '.join(near['best'])}",
            highlight=False,
        )


def _compute_notes(prep: Prepared, points: list[PointConfig]) -> dict[str, list[str]]:
    """Per model, how its trace is brought to each micro-batch size and to this GPU."""
    out: dict[str, list[str]] = {}
    for name in prep.traces:
        notes = out.setdefault(name, [])
        pairs = sorted({(p.microbatch_size, p.precision) for p in points if p.model == name})
        for b, precision in pairs:
            notes += [n for n in prep.adapted(name, b, precision)[1] if n not in notes]
    for name, t in prep.traces.items():  # the I/W split assumption (sim.engine.inputs)
        if any(x.bwd_input_s is None or x.bwd_weight_s is None for x in t.layers):
            split = sorted(
                {p.schedule for p in points if p.model == name and p.schedule_class.splits_backward}
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

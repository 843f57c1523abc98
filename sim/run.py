"""``sim run``: load, validate, sweep, pick the winner, write everything, print a summary."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from rich.console import Console

from sim.config import ExperimentConfig, load_experiment
from sim.errors import EXIT_NOTHING_FITS
from sim.events import EventLog
from sim.plan.executors import LocalExecutor, RayExecutor, open_executor
from sim.plan.planner import PlanStats, plan_points
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import Prepared, prepare
from sim.point.rows import BestRows, ResultRow, pick_winner
from sim.point.simulate import evaluate, resolve
from sim.progress import progress
from sim.report.console import TOP, Reporter
from sim.report.drawing import Drawing, sharing
from sim.report.outputs import (
    check_model_names,
    check_out_dir,
    commit_output,
    copy_files,
    recover_out_dir,
    results_frame,
    staged_output,
    winner_artifacts,
    winner_config,
    write_frame_csv,
    write_yaml,
)
from sim.report.prefetch import PLOT_MODULES, TABLE_MODULES, Prefetch
from sim.report.provenance import META_KEY, experiment_sources, footnoted, joined, prediction_source
from sim.report.resolved import compute_notes, unused_gpus_note, write_resolved
from sim.report.row_bands import bands_for, winner_bands
from sim.report.tables import config_label

log = logging.getLogger(__name__)


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
    table: str = "compact",
    progress_shown: bool | None = None,
    said: list[dict[str, str]] | None = None,
) -> int:
    """Run one experiment file; returns the process exit code (:data:`sim.errors.EXIT_OK`;
    1 when some model has no configuration that fits; 3 when some points failed with an
    internal error: their rows say why, the others are written as usual).

    Args:
        exp: the experiment ``path`` holds, when the caller has parsed it already (it is then
            not read again).
        executor: ``local`` or ``ray`` (:mod:`sim.plan.executors`).
        exhaustive: simulate every point (no pruning: :mod:`sim.plan.planner`), as
            ``sweep.prune: false`` does.
        table: how each model's best configurations are printed
            (:data:`sim.report.console.TABLES`).
        progress_shown: show progress (None: when the ``sim`` logger shows notes;
            :func:`sim.progress.shown`).
        said: where the notes the console prints besides the log's are appended (the
            winners' reserve and MFU lines: :class:`sim.report.console.Reporter`).

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
    check_out_dir(out, experiment=exp.name)
    out = out.resolve()  # the swap renames it: its name and parent must be real
    recover_out_dir(out)
    say = Reporter(console, table, progress_shown, said)
    say.start(exp.name, len(points), prep.topology.name, skipped)
    idle = unused_gpus_note(prep, points)
    if idle:
        log.info("%s", idle)
    notes = compute_notes(prep, points)
    say.notes(notes, prep)
    jobs = min(jobs, len(points))
    if jobs > 1 and executor == "local":
        gc.freeze()  # the workers fork next: their collections skip what they inherit (sim.cli)
    best = BestRows()  # each model's best row, with its event log for the winner's plots
    bar = progress(len(points), "simulating", "configurations", console=console,
                   enabled=progress_shown)  # fmt: skip
    with open_executor(executor, prep, jobs) as pool, bar as on_done:
        rows, stats = plan_points(
            prep,
            points,
            cache_dir=out / ".cache" if use_cache else None,
            executor=pool,
            prune=exp.sweep.prune and not exhaustive,
            jobs=jobs,
            on_done=_prefetching(on_done, plots, pool),
            on_warning=lambda msg: log.warning("%s", msg),
            winners=best if plots else None,
        )
    say.planned(stats)
    with staged_output(out) as stage:
        code, written = _write_all(
            exp, prep, points, skipped, rows, path, stage, plots, say, notes, stats, best, jobs
        )
        commit_output(stage, out, experiment=exp.name)
    say.wrote([out / p.relative_to(stage) for p in written], t0)
    return say.failed(rows) or code


def _prefetching(
    on_done: Callable[[int], None], plots: bool, pool: LocalExecutor | RayExecutor
) -> Callable[[int], None]:
    """``on_done`` that also starts importing pandas and, with ``plots``, the plot modules
    (:mod:`sim.report.prefetch`) at the first row done once the points run elsewhere
    (``pool``'s forked workers, or Ray's): this process only waits for them meanwhile."""
    if isinstance(pool, LocalExecutor) and pool.jobs <= 1:
        return on_done
    prefetch = Prefetch(TABLE_MODULES + (PLOT_MODULES if plots else ()))

    def done(n: int) -> None:
        if n > 0 and getattr(pool, "forked", True):
            prefetch.start()
        on_done(n)

    return done


def _write_all(
    exp: ExperimentConfig,
    prep: Prepared,
    points: list[PointConfig],
    skipped: list[tuple[str, str]],
    rows: list[ResultRow],
    path: Path,
    out: Path,
    plots: bool,
    say: Reporter,
    notes: dict[str, list[str]],
    stats: PlanStats | None = None,
    best: BestRows | None = None,
    jobs: int = 1,
) -> tuple[int, list[Path]]:
    """Write the whole output set into ``out`` (the staging folder); returns the exit code
    (0, or 1 when a model has no fitting configuration) and the files written. ``best`` holds
    the winners' event logs from the sweep (a winner without one, read from the cache, is
    simulated here); the plots are drawn on ``jobs`` processes (:mod:`sim.report.drawing`),
    which start once every drawing is known: results.csv, config.resolved.yaml and the
    console's answer are written while they draw."""
    bands_here = bands_for(g.model for g in prep.topology.gpus)
    df = results_frame(rows, bands_here)
    written = [out / "results.csv", out / "config.resolved.yaml"]
    pending = _Pending()
    ok = df[df["error"].fillna("") == ""]
    sources = experiment_sources(prep)
    source = joined(sources)
    if plots and "throughput_samples_per_s" in df and ok["throughput_samples_per_s"].count() > 1:
        from sim.report.plots import plot_throughput  # matplotlib on first use

        png = out / "throughput.png"  # not `path`: that is the experiment's, for winner.yaml
        draw = partial(footnoted, plot_throughput, ok, path=png, text=source)
        pending.drawings.append((png, draw))
        written.append(png)
    if "memory_policy" in ok and ok["memory_policy"].nunique() > 1:
        written += _memory_summary(ok, out, plots, say, _gpt_shapes(prep), pending, sources)
    elif _gpt_shapes(prep):
        written += _tflops(ok, out, plots, _gpt_shapes(prep), pending, source)
    code = 0
    bands = winner_bands(df)
    answers: list[tuple[str, ResultRow | None, dict]] = []
    for i, model in enumerate(exp.models):
        winner = pick_winner([r for r in rows if r.model == model.name])
        band = bands.get(model.name, {})
        answers.append((model.name, winner, band))
        if winner is None:
            code = EXIT_NOTHING_FITS
            continue
        dirs = [out] if i == 0 else []
        if len(exp.models) > 1:
            dirs.append(out / model.name)
        log_ = best.log_of(winner) if best is not None else None
        written += _write_winner(exp, prep, winner, band, log_, path, dirs, plots, pending)

    def meanwhile() -> None:
        write_frame_csv(df, out / "results.csv")
        write_resolved(out, exp, prep, points, skipped, notes, stats)
        for name, winner, band in answers:
            say.table(df[df["model"] == name], name)
            if winner is None:
                say.no_fit(name, str(path))
            else:
                say.winner(winner, band)

    pending.finish(jobs, say, meanwhile)
    return code, written


@dataclass
class _Pending:
    """Files to draw (on several processes, :mod:`sim.report.drawing`)."""

    drawings: list[Drawing] = field(default_factory=list)

    def finish(
        self, jobs: int, say: Reporter | None = None, meanwhile: Callable[[], None] | None = None
    ) -> None:
        """Draw the files on ``jobs`` processes, this one after ``meanwhile()`` (the others
        draw while it runs)."""
        with sharing(self.drawings, jobs) as share:
            if meanwhile is not None:
                meanwhile()
            bar = progress(len(self.drawings), "drawing", "files",
                           console=say.console if say else None,
                           enabled=say.progress if say else None)  # fmt: skip
            with bar as on_done:
                share.join_in(on_done)


def _draw_and_copy(call: Callable[[], object], file: Path, dests: list[Path]) -> None:
    """``call()``, which writes ``file``, then copies of it into each of ``dests`` (by the
    process that drew it, not one after all are drawn)."""
    call()
    for dest in dests:
        copy_files([file], dest)


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
    df, out: Path, plots: bool, say: Reporter, shapes: dict, pending: _Pending, sources: dict
) -> list[Path]:
    """Largest model per policy and fastest policy per model: table, CSV and two plots (and
    TFLOPS per GPU for GPT models), the plots added to ``pending``. The console's table
    (:mod:`sim.report.policy_table`) is left out for one model whose table of best
    configurations already shows each policy's best."""
    from sim.report.memory_summary import write_memory_summary  # matplotlib on first use
    from sim.report.policy_table import policies_shown, policy_table

    table, written = write_memory_summary(df, out, plots, shapes, pending.drawings, sources)
    if say.style == "none" or (df["model"].nunique() == 1 and policies_shown(df, TOP)):
        return written  # one model whose table of best configurations shows every policy's best
    say.console.print(policy_table(table))
    return written


def _tflops(df, out: Path, plots: bool, shapes: dict, pending: _Pending, source: str) -> list[Path]:
    """TFLOP/s per GPU of the GPT models as Narayanan et al. (SC'21 eq. 3, the recompute pass
    counted) report them, for comparison with the paper: CSV and plot (added to ``pending``).
    The console shows each winner's model-FLOPs TFLOP/s and MFU instead (:func:`sim.report.console.flops_text`)."""
    from sim.report.memory_summary import write_tflops  # matplotlib on first use

    return write_tflops(df, out, plots, shapes, pending.drawings, source)[1]


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
    trace = prep.traces[point.model]
    log.meta[META_KEY] = prediction_source(prep.topology.name, trace.name, winner.trace_origin)
    title = f"{point.model} winner: {config_label(winner)}"  # as the console's table names it
    drawings = winner_artifacts(dirs[-1], log, title)
    others = dirs[:-1]
    pending.drawings += [(f, partial(_draw_and_copy, call, f, others)) for f, call in drawings]
    drawn = [f for f, _ in drawings]
    for d in others:
        written += [d / f.name for f in drawn]
    return written + drawn


__all__ = ["run_experiment", "unused_gpus_note"]  # unused_gpus_note: sim.report.resolved

"""What ``sim run`` says while it works and when it is done: :class:`Reporter`.

Two channels, so that the answer reads at any width and logs stay greppable:

* the answer (the best configurations per model, each winner, its band, the files written) on
  the :class:`rich.console.Console` given (standard output for the command);
* everything about the work (the grid, skipped combinations summarised by kind, how traces were
  adapted, where a trace's times come from, the planner's counts, cache warnings, internal
  errors) through :mod:`logging` (logger ``sim.report.console``): notes at INFO, warnings at
  WARNING, details at DEBUG; ``sim -v``/``-q`` choose what is shown (:mod:`sim.cli.console`).

Units: the tables print ms, GiB, samples/s and TFLOP/s; the files keep seconds and bytes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement

from sim.errors import EXIT_INTERNAL, EXIT_OK
from sim.plan.planner import PlanStats
from sim.plan.sweep import skip_kinds
from sim.point.experiment import Prepared
from sim.point.rows import INTERNAL, ResultRow
from sim.report.note_merge import merge_by_microbatch
from sim.report.row_bands import describe
from sim.report.tables import compact_table, config_label, rate_text, summary_table
from sim.trace.origin import ROOFLINE, origin_warning, trace_origin

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

TABLES = ("compact", "wide", "none")
"""How :meth:`Reporter.table` prints each model's best configurations: :func:`compact_table`,
:func:`~sim.report.tables.summary_table` (``--wide``) or not at all (``--format csv|json``)."""
TOP = 5
"""Configurations per model in the table."""
KINDS_SHOWN = 3
"""Kinds of skipped combinations named (each with its count and an example); the rest at DEBUG
and all of them in config.resolved.yaml."""
FAILED_SHOWN = 5
"""Points of an internal error named (all are in results.csv)."""


LEVELS = {logging.INFO: "note", logging.WARNING: "warning"}
"""The level of a note (:class:`NoteSink`) by its logging level (``error`` above WARNING,
``debug`` below INFO), as the console labels it (:mod:`sim.cli.console`)."""


class NoteSink(logging.Handler):
    """Keeps every message the ``sim`` logger shows (at its level: ``-q`` keeps warnings and
    errors, ``-v`` adds details) as ``{"level": "note" | "warning" | ..., "text": ...}`` in
    :attr:`notes`, so that ``sim run --format json`` carries what the console said."""

    def __init__(self, notes: list[dict[str, str]]) -> None:
        super().__init__()
        self.notes = notes

    def emit(self, record: logging.LogRecord) -> None:
        level = LEVELS.get(record.levelno, "error" if record.levelno > logging.WARNING else "debug")
        self.notes.append({"level": level, "text": record.getMessage()})


@contextmanager
def noting(notes: list[dict[str, str]] | None) -> Iterator[None]:
    """While open, every message the ``sim`` logger shows is appended to ``notes`` too
    (:class:`NoteSink`; nothing when ``notes`` is None)."""
    if notes is None:
        yield
        return
    logger, sink = logging.getLogger("sim"), NoteSink(notes)
    logger.addHandler(sink)
    try:
        yield
    finally:
        logger.removeHandler(sink)


class Reporter:
    """``sim run``'s console (module doc).

    Args:
        console: where the answer goes.
        table: one of :data:`TABLES`.
        progress: show progress bars (None: :func:`sim.progress.shown`).
        notes: where the winners' notes printed on the console (the reserve at the peak, the
            MFU and its source) and a model with nothing that fits are also appended
            (``{"level": ..., "text": ...}``, as :class:`NoteSink`'s).
    """

    def __init__(
        self,
        console: Console,
        table: str = "compact",
        progress: bool | None = None,
        notes: list[dict[str, str]] | None = None,
    ) -> None:
        if table not in TABLES:
            raise ValueError(f"table must be one of {TABLES}, got {table!r}")
        self.console, self.style, self.progress = console, table, progress
        self.said = notes if notes is not None else []

    def start(self, name: str, points: int, hardware: str, skipped: list[tuple[str, str]]) -> None:
        """The grid: how many configurations, and the skipped ones by kind."""
        tail = f" ({len(skipped)} combinations skipped)" if skipped else ""
        many = "configuration" if points == 1 else "configurations"
        log.info("%s: %d %s on %s%s", name, points, many, hardware, tail)
        kinds = skip_kinds(skipped)
        for i, (n, example) in enumerate(kinds):
            level = logging.INFO if i < KINDS_SHOWN else logging.DEBUG
            log.log(level, "%d skipped like: %s", n, example)
        if len(kinds) > KINDS_SHOWN:
            log.info(
                "... %d more kinds of skipped combinations (sim -v run, or config.resolved.yaml)",
                len(kinds) - KINDS_SHOWN,
            )

    def notes(self, notes: dict[str, list[str]], prep: Prepared) -> None:
        """How each trace is brought to the grid, and where its times come from (on the GPU
        its times are computed for): a warning when a roofline estimate stands in for a
        measurement (:mod:`sim.trace.origin`)."""
        for line in prep.topology.notes:  # e.g. a gpu.memory override not used (sim.hardware)
            log.warning("%s", line)
        for model_notes in notes.values():  # one line for the micro-batch sizes alike
            for line in merge_by_microbatch(model_notes):
                log.info("%s", line)
        refs = {m.name: str(m.trace) for m in prep.exp.models}
        for name, shipped in prep.traces.items():
            # as timed here: a generated trace is regenerated on this hardware's GPU
            trace = prep.adapted(name, shipped.microbatch_size)[0]
            text = origin_warning(name, trace, refs.get(name))
            if text is not None:
                log.log(logging.WARNING if trace_origin(trace) == ROOFLINE else logging.INFO, text)

    def planned(self, stats: PlanStats) -> None:
        log.info("%s", stats.summary())

    def table(self, df: pd.DataFrame, model: str) -> None:
        """The best configurations of ``model`` (``df``: its rows of results.csv)."""
        if self.style == "compact":
            self.console.print(compact_table(df, top=TOP, title=f"[bold]{escape(model)}[/]"))
        elif self.style == "wide":  # every column at its natural width: wider than the screen
            table = summary_table(df, top=TOP)
            options = self.console.options.update_width(1000)
            natural = Measurement.get(self.console, options, table).maximum
            if natural <= self.console.width:
                self.console.print(table)
                return
            Console(
                file=self.console.file,
                width=natural,
                force_terminal=self.console.is_terminal,
                color_system=self.console.color_system,  # type: ignore[arg-type]
            ).print(table)

    def no_fit(self, model: str, experiment: str = "EXPERIMENT") -> None:
        """``model`` has no configuration that fits: where to look, and the command that
        names, per configuration, the category over capacity and the smallest change that
        fits (``sim memory``'s advice)."""
        text = (
            f"{model}: no configuration fits in memory. See results.csv "
            f"(peak_memory_bytes, oom_device); `sim memory {experiment}` names each "
            "configuration's category over capacity and the first of dist_opt, recompute, half "
            "the micro-batch, twice tp or twice pp that fits."
        )
        self.said.append({"level": "warning", "text": text})
        head, rest = text.split(" See ", 1)
        self.console.print(f"[bold red]{escape(head)}[/] See {escape(rest)}")

    def winner(self, row: ResultRow, band: dict) -> None:
        """The winner in one line (with its band when it has one), the source of its peak's
        reserve (:func:`reserve_text`) and its MFU in the next, and how many configurations are
        within its band."""
        wrap = not self.console.is_terminal  # logs: one line each, however long
        self.console.print(
            f"[bold green]{escape(row.model)} winner:[/] {escape(config_label(row))}",
            highlight=False,
            soft_wrap=wrap,
        )
        text = f"  {rate_text(row.throughput_samples_per_s or math.nan, 2)} samples/s"
        if band:  # where the band comes from, also when -q hides the table's caption
            source = band.get("band_source")
            source = f": p10–p90 of measured/predicted, {source}" if source else ""
            text += (
                f" (band {rate_text(band['throughput_low_samples_per_s'])}–"
                f"{rate_text(band['throughput_high_samples_per_s'])}{source})"
            )
        text += (
            f", {(row.iteration_time_s or math.nan) * 1e3:,.2f} ms/iteration, "
            f"peak {(row.peak_memory_bytes or math.nan) / 2**30:.2f} GiB"
        )
        self.console.print(text, highlight=False, soft_wrap=wrap)
        reserve = reserve_text(row)
        if reserve:
            self.console.print(f"  {escape(reserve)}", highlight=False, soft_wrap=wrap)
            self.said.append({"level": "note", "text": f"{row.model} winner: {reserve}"})
            log.debug("%s reserve: %s", row.model, row.peak_reserve_source)
        flops = flops_text(row)
        if flops:
            self.console.print(f"  {escape(flops)}", highlight=False, soft_wrap=wrap)
            self.said.append({"level": "note", "text": f"{row.model} winner: {flops}"})
        if band:
            log.debug(
                "%s band: p10–p90 of measured/predicted iteration times of %s "
                "(sim/data/bands.csv): %.2f–%.2f ms/iteration",
                row.model,
                band["band_source"],
                band["iteration_time_low_s"] * 1e3,
                band["iteration_time_high_s"] * 1e3,
            )
            near = band["within_band"]
            if near["count"]:
                count = near["count"]
                log.info(
                    "%s: %d other configuration%s within each other's band with the "
                    "winner (results.csv within_winner_band), so the pick is not clearly "
                    "faster than %s; best: %s",
                    row.model,
                    count,
                    " is" if count == 1 else "s are",
                    "it" if count == 1 else "them",
                    "; ".join(near["best"]),
                )

    def failed(self, rows: Sequence[ResultRow]) -> int:
        """Name the points whose simulation raised an unexpected exception (a bug); returns
        :data:`~sim.point.rows.EXIT_INTERNAL` when there are any, else 0."""
        failed = [r for r in rows if r.failed]
        if not failed:
            return EXIT_OK
        log.error(
            "%d of %d configurations failed with an internal error (a bug in pipesim, not in "
            "the experiment; their rows in results.csv say where; please report it with "
            "config.resolved.yaml):",
            len(failed),
            len(rows),
        )
        for r in failed[:FAILED_SHOWN]:
            log.error(
                "  %s %s: %s", r.model, describe(r.model_dump()), r.error.removeprefix(INTERNAL)
            )
        if len(failed) > FAILED_SHOWN:
            log.error("  ... and %d more", len(failed) - FAILED_SHOWN)
        return EXIT_INTERNAL

    def wrote(self, paths: Iterable[Path], t0: float) -> None:
        """Where the files went (the list itself at DEBUG: ``sim -v``)."""
        paths = list(paths)
        self.console.print(
            escape(
                f"wrote {len(paths)} files in {paths[0].parent} ({time.perf_counter() - t0:.1f} s)"
            ),
            highlight=False,
        )
        for p in paths:
            log.debug("  %s", p)


def reserve_text(row: ResultRow) -> str:
    """``reserve at gpu7's peak (the tightest GPU) 1.38 GiB: runtime reserve, allocator margin and
    framework buffers; their sources and assumptions: results.csv peak_reserve_source``: the
    winner's ``peak_reserve_bytes`` and where its source is written (the full text,
    :func:`sim.plan.point_row.peak_reserve_source`, runs to about 1,000 characters: the console
    shows it with ``-v``), else ``""``."""
    if row.peak_reserve_bytes is None or not row.peak_reserve_source:
        return ""
    return (
        f"reserve at {row.tightest_gpu}'s peak (the tightest GPU) "
        f"{row.peak_reserve_bytes / 2**30:.2f} GiB: runtime reserve, allocator margin and "
        "framework buffers; their sources and assumptions: results.csv peak_reserve_source"
    )


def flops_text(row: ResultRow) -> str:
    """``25.8 TFLOP/s per GPU, MFU 20.6 % (Megatron-LM's ...; peak: V100-SXM2-16GB's 125 TFLOP/s
    fp16 dense peak (datasheet, ...)); analytic trace`` for a row with model FLOPs (its
    ``flops_source``, set with them: :func:`sim.plan.point_row.flops_figures`), else ``""``."""
    if row.flops_per_s_per_gpu is None or row.mfu is None:
        return ""
    return (
        f"{row.flops_per_s_per_gpu / 1e12:,.1f} TFLOP/s per GPU, MFU {row.mfu * 100:.1f} % "
        f"({row.flops_source}); {row.trace_origin} trace"
    )

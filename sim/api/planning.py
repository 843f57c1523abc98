"""Planning an experiment's grid: :func:`run` (``sim run``: the output set written),
:func:`plan` (the same planning in memory) and :func:`simulate` (one configuration of the grid:
its metrics and event log).

Units: seconds and bytes, samples per second. Bad input raises :class:`sim.errors.InputError`
naming the file (or argument) and field; nothing is written then.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rich.console import Console

from sim.api.experiment import Experiment, check_flags, folder_arg, load, parse
from sim.errors import InputError, expect_int, expect_type
from sim.hardware.overlay import read_overlay
from sim.plan.executors import open_executor
from sim.plan.planner import plan_points
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.rows import pick_winner
from sim.point.simulate import evaluate, resolve
from sim.report.console import TABLES, noting
from sim.report.results import Plan, RunOutcome, Simulation
from sim.report.row_bands import bands_for
from sim.run import run_experiment


def run(
    experiment: Experiment,
    *,
    out: str | os.PathLike[str] | None = None,
    jobs: int = 1,
    cache: bool = True,
    plots: bool = True,
    executor: str = "local",
    exhaustive: bool = False,
    console: Console | None = None,
    table: str = "compact",
    progress: bool = True,
    hardware_overlay: str | os.PathLike[str] | None = None,
) -> RunOutcome:
    """Plan an experiment's grid and write its output set (:mod:`sim.run`): ``sim run``.

    Args:
        experiment: the experiment YAML (or a ``winner.yaml``), a mapping with its content or
            a parsed :class:`~sim.config.ExperimentConfig` (:data:`Experiment`).
        out: output folder: new, empty or an earlier run's (default ``results/<name>/``).
        jobs: worker processes.
        cache: reuse the rows cached in ``out/.cache``.
        plots: write the PNG plots and the winner's Chrome-trace timeline.
        executor: ``local`` or ``ray`` (:mod:`sim.plan.executors`).
        exhaustive: simulate every configuration (no pruning by bounds: :mod:`sim.plan.planner`).
        console: where the summary and progress go (default: standard output).
        table: the best configurations per model as ``compact`` (six columns), ``wide``
            (every column) or ``none`` (:data:`sim.report.console.TABLES`).
        progress: show the progress of the sweep and the drawings (time remaining).
        hardware_overlay: an overlay file set over the hardware (:mod:`sim.hardware.overlay`),
            instead of the experiment's ``hardware_overlay``.

    Returns:
        The exit code, the folder written and the notes shown (:class:`RunOutcome`).

    Raises:
        InputError: bad experiment, hardware, trace, grid or folder, or an argument of the
            wrong type (naming it; nothing is written).
    """
    exp, file = parse(experiment)
    out_dir = folder_arg(out) or Path("results") / exp.name
    expect_int(jobs, "jobs", 1)
    check_flags(cache=cache, plots=plots, exhaustive=exhaustive, progress=progress)
    expect_type(executor, str, "executor", "'local' or 'ray'")
    if table not in TABLES:
        raise InputError(f"{table!r} is not one of {', '.join(TABLES)}", field="table")
    if hardware_overlay is not None:
        folder_arg(hardware_overlay, "hardware_overlay")
        if not Path(hardware_overlay).exists():
            raise InputError(
                f"{hardware_overlay} not found (`sim calibrate --from-runs` writes one)",
                field="--hardware-overlay",
            )
        read_overlay(Path(hardware_overlay))  # a bad overlay is refused before anything runs
        exp = exp.model_copy(update={"hardware_overlay": str(Path(hardware_overlay).resolve())})
    notes: list[dict[str, str]] = []
    with noting(notes):  # what the `sim` logger shows, and the winners' notes
        code = run_experiment(
            Path(file),
            exp=exp,
            out_dir=out_dir,
            jobs=jobs,
            use_cache=cache,
            plots=plots,
            console=console or Console(),
            executor=executor,
            exhaustive=exhaustive,
            table=table,
            progress_shown=progress,
            said=notes,
        )
    return RunOutcome(code, out_dir, notes)


def plan(
    experiment: Experiment, *, jobs: int = 1, executor: str = "local", exhaustive: bool = False
) -> Plan:
    """Plan an experiment's grid in memory (the planning of ``sim run``; no file, no cache).

    Args:
        experiment: see :data:`Experiment`.
        jobs: worker processes (1: this process).
        executor: ``local`` or ``ray``.
        exhaustive: simulate every configuration instead of pruning by bounds.

    Raises:
        InputError: bad experiment, hardware, trace or grid, or an argument of the wrong type.

    Example:
        >>> exp = {"name": "b", "hardware": "dgx1-v100-16gb",
        ...        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
        ...        "sweep": {"schedule": ["gpipe", "1f1b"], "stages": 4, "microbatch_size": 4}}
        >>> p = plan(exp)
        >>> len(p.rows), p.winners["bert"].schedule
        (2, '1f1b')
    """
    expect_int(jobs, "jobs", 1)
    check_flags(exhaustive=exhaustive)
    expect_type(executor, str, "executor", "'local' or 'ray'")
    prep = load(experiment)
    points, skipped = expand(prep)
    with open_executor(executor, prep, jobs) as pool:
        rows, stats = plan_points(
            prep,
            points,
            cache_dir=None,
            executor=pool,
            prune=prep.exp.sweep.prune and not exhaustive,
            jobs=jobs,
        )
    winners = {m.name: pick_winner([r for r in rows if r.model == m.name]) for m in prep.exp.models}
    bands = bands_for(g.model for g in prep.topology.gpus)
    return Plan(rows, winners, skipped, stats, bands)


def simulate(experiment: Experiment, **choose: Any) -> Simulation:
    """Simulate one configuration of ``experiment``'s grid.

    Args:
        experiment: see :data:`Experiment`.
        **choose: :class:`sim.point.config.PointConfig` fields picking one configuration of the
            grid (``schedule="1f1b", stages=4``); none needed when the grid has one.

    Raises:
        InputError: bad experiment, an unknown field, or not exactly one configuration chosen.
    """
    prep = load(experiment)
    unknown = sorted(set(choose) - set(PointConfig.model_fields))
    if unknown:
        raise InputError(f"{unknown} are not fields of a configuration "
                         f"({', '.join(PointConfig.model_fields)})")  # fmt: skip
    points = [p for p in expand(prep)[0] if all(getattr(p, k) == v for k, v in choose.items())]
    if len(points) != 1:
        raise InputError(
            f"{len(points)} configurations match {choose or 'the grid'}; choose one with "
            "keyword arguments (schedule=..., stages=..., microbatch_size=...)",
            file=prep.file,
            field="sweep",
        )
    res = resolve(prep.exp, points[0], prep.topology, prep.traces[points[0].model], file=prep.file)
    metrics, log = evaluate(res)
    return Simulation(points[0], metrics, log, res)

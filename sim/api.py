"""pipesim's Python API: what the ``sim`` command does, callable from a notebook or a script.

Each ``sim`` command is a thin adapter over one of these functions, so the command line and a
notebook run the same code:

==============  ================================================================  ==============
function        does                                                              command
==============  ================================================================  ==============
:func:`run`     plan an experiment's grid and write results, winner, plots        ``sim run``
:func:`plan`    the same planning, nothing written: rows and winners in memory   (none)
:func:`simulate`  one configuration: metrics and the event log                    (none)
:func:`validate`  replay a configuration on real devices, compare, write          ``sim validate``
:func:`partition` split a trace's layers into pipeline stages                     ``sim partition``
:func:`memory`  every configuration's peak memory per pipeline rank, no simulation  ``sim memory``
==============  ================================================================  ==============

An experiment is a YAML path, a mapping with the YAML's content, or a parsed
:class:`sim.config.ExperimentConfig`. Units: seconds and bytes, samples per second. Bad input
raises :class:`sim.errors.InputError` naming the file (or option) and field; nothing is written
then.

Example (a 4-GPU pipeline of BERT-Large on a DGX-1, one configuration):
    >>> import sim.api
    >>> exp = {"name": "b", "hardware": "dgx1-v100-16gb",
    ...        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
    ...        "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 4}}
    >>> one = sim.api.simulate(exp)
    >>> one.point.microbatches, one.metrics.fits
    (8, True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from sim.atomic import atomic_write_text, check_writable
from sim.config import ExperimentConfig, load_experiment, parse_experiment
from sim.errors import InputError, expect_int, expect_type
from sim.hardware.loader import load_hardware
from sim.hardware.overlay import read_overlay
from sim.hardware.provenance import reserve_source
from sim.parallel.partition import partition as split_layers
from sim.parallel.placement import place
from sim.plan.executors import open_executor
from sim.plan.memory_grid import grid_memory
from sim.plan.planner import plan_points
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import Prepared, prepare
from sim.point.rows import pick_winner
from sim.point.simulate import evaluate, resolve
from sim.progress import progress as progress_bar
from sim.replay import Replayer
from sim.report.console import TABLES
from sim.report.provenance import experiment_sources, joined
from sim.report.results import MemoryAnswer, PartitionPlan, Plan, RunOutcome, Simulation
from sim.report.row_bands import bands_for
from sim.run import run_experiment
from sim.trace.adapt import adapt_trace
from sim.trace.loader import load_trace
from sim.trace.schema import Trace
from sim.validate import Validation, ValidationSpec, run_validation
from sim.validate.spec import check_arguments

__all__ = [
    "Experiment",
    "PartitionPlan",
    "Plan",
    "RunOutcome",
    "Simulation",
    "MemoryAnswer",
    "load",
    "memory",
    "parse",
    "partition",
    "plan",
    "run",
    "simulate",
    "validate",
]

Experiment = str | os.PathLike[str] | Mapping[str, Any] | ExperimentConfig
"""A YAML path, the YAML's content as a mapping, or a parsed experiment."""


MAPPING = "<experiment>"
"""The file name a mapping or a parsed experiment goes by in messages (paths in it resolve
against the working folder)."""


def parse(experiment: Experiment) -> tuple[ExperimentConfig, str]:
    """The parsed experiment and the file it came from (:data:`MAPPING` for a mapping or an
    object).

    Raises:
        InputError: not one of :data:`Experiment` (naming ``experiment``), or a bad file or
            field.
    """
    expect_type(experiment, (str, os.PathLike, Mapping, ExperimentConfig), "experiment",
                "a YAML path, a mapping with the YAML's content or an ExperimentConfig")  # fmt: skip
    if isinstance(experiment, ExperimentConfig):
        return experiment, MAPPING
    if isinstance(experiment, Mapping):
        return parse_experiment(dict(experiment)), MAPPING
    return load_experiment(Path(experiment)), str(experiment)


def load(experiment: Experiment) -> Prepared:
    """Parse ``experiment`` and load its hardware and traces.

    Relative trace paths resolve against the YAML's folder (a mapping's: the working one).

    Raises:
        InputError: a bad file, preset, trace or field, or an argument of the wrong type.
    """
    exp, file = parse(experiment)
    return prepare(exp, file)


def _folder(out: object, field: str = "out") -> Path | None:
    """``out`` as a path (None stays None).

    Raises:
        InputError: not a path (naming ``field``).
    """
    if out is None:
        return None
    expect_type(out, (str, os.PathLike), field, "a folder path")
    return Path(out)  # type: ignore[arg-type]


def _flags(**flags: object) -> None:
    """Every flag must be a bool.

    Raises:
        InputError: naming the flag.
    """
    for name, value in flags.items():
        expect_type(value, bool, name, "True or False")


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
        The exit code and the folder written.

    Raises:
        InputError: bad experiment, hardware, trace, grid or folder, or an argument of the
            wrong type (naming it; nothing is written).
    """
    exp, file = parse(experiment)
    out_dir = _folder(out) or Path("results") / exp.name
    expect_int(jobs, "jobs", 1)
    _flags(cache=cache, plots=plots, exhaustive=exhaustive, progress=progress)
    expect_type(executor, str, "executor", "'local' or 'ray'")
    if table not in TABLES:
        raise InputError(f"{table!r} is not one of {', '.join(TABLES)}", field="table")
    if hardware_overlay is not None:
        _folder(hardware_overlay, "hardware_overlay")
        if not Path(hardware_overlay).exists():
            raise InputError(
                f"{hardware_overlay} not found (`sim calibrate --from-runs` writes one)",
                field="--hardware-overlay",
            )
        read_overlay(Path(hardware_overlay))  # a bad overlay is refused before anything runs
        exp = exp.model_copy(update={"hardware_overlay": str(Path(hardware_overlay).resolve())})
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
    )
    return RunOutcome(code, out_dir)


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
    _flags(exhaustive=exhaustive)
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


def validate(
    config: str | os.PathLike[str],
    *,
    replayer: Replayer,
    out: str | os.PathLike[str] | None = None,
    schedules: tuple[str, ...] = (),
    microbatches: tuple[int, ...] = (),
    device: str = "cpu",
    nproc: int | None = None,
    iterations: int = 3,
    warmup: int = 1,
    torch_builtin: bool = False,
    rank: int | None = None,
    stages: int | None = None,
    timeout_s: float = 600.0,
    virtual_stages: int | None = None,
    numerics: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    console: Console | None = None,
) -> Validation:
    """Replay a configuration on real devices and compare with the prediction: ``sim validate``.

    Writes ``validation.csv`` (seconds, bytes, ``error = (predicted - measured) / measured``),
    ``validation_breakdown.csv`` and the timelines into ``out`` as one set
    (:mod:`sim.validate`).

    Args:
        config: a single-configuration experiment (a ``winner.yaml`` of ``sim run``) whose
            trace ``sim profile`` made.
        replayer: the backend, e.g. ``backends.torch.replay.replayer.TorchReplayer()``.
        out: folder to write into (default: beside ``config``).
        schedules: replay these schedules instead of the file's.
        microbatches: replay these micro-batch counts instead of the file's.
        device: ``cpu`` (gloo) or ``cuda`` (NCCL).
        nproc: ranks (default ``stages x tensor_parallel``; must equal it).
        iterations: measured iterations.
        warmup: warm-up iterations.
        torch_builtin: also run torch's own ScheduleGPipe / Schedule1F1B.
        rank: run only this pipeline stage, alone in one process.
        stages: with ``rank``, the depth of the pipeline it belongs to.
        timeout_s: limit per replay, seconds.
        virtual_stages: stage chunks per rank for every replayed schedule (default: the
            file's where the schedule takes it, else the schedule's smallest).
        numerics: check each replay's losses and gradients against the same model run in one
            process (``numerics`` columns).
        on_row: called with each row as it is measured.
        console: where the progress of the replays goes on a terminal (the one ``on_row``
            prints to; default: standard error).

    Raises:
        InputError: bad options, file or configuration, or an argument of the wrong type
            (naming it; before any replay starts).

    A replay that fails is a row with ``status`` ``failed`` (the others still run).

    Example (needs torch; a few seconds on a CPU)::

        from backends.torch.replay.replayer import TorchReplayer
        v = sim.api.validate("results/cpu-gpt-tiny/winner.yaml", replayer=TorchReplayer(),
                             nproc=2, schedules=("gpipe", "1f1b"))
        v.table[["schedule", "measured_iteration_s", "predicted_iteration_s", "error"]]
    """
    check_arguments(locals())
    spec = ValidationSpec(
        schedules=tuple(schedules),
        microbatches=tuple(microbatches),
        device=device,
        nproc=nproc,
        iterations=iterations,
        warmup_iterations=warmup,
        torch_builtin=torch_builtin,
        timeout_s=timeout_s,
        rank=rank,
        stages=stages,
        virtual_stages=virtual_stages,
        numerics=numerics,
    )
    return run_validation(Path(config), spec, replayer, Path(out) if out else None, on_row, console)


def partition(
    trace: str | Trace,
    stages: int,
    *,
    hardware: str | None = None,
    microbatch_size: int | None = None,
) -> PartitionPlan:
    """Split a trace's layers into ``stages`` contiguous stages minimising the slowest stage.

    A stage's time is its forward + backward compute plus 2 x boundary bytes / link bandwidth
    (links of ``hardware``'s first pipeline, NCCL bandwidth); its memory is 16 B/param
    (fp16 + Adam) + (P - s) in-flight micro-batches of activations, checked against the GPUs'
    capacity (:func:`sim.parallel.partition.partition`).

    Args:
        trace: a trace name or path, or a loaded trace.
        stages: number of stages ``P``.
        hardware: a preset or hardware YAML (default: no capacity, free transfers).
        microbatch_size: bring the trace to this many samples (as ``sim run`` does).

    Raises:
        InputError: bad trace or hardware; more stages than layers or GPUs.

    Example (4 equal layers of 1 s forward + 2 s backward: 2 layers per stage, 6 s each):
        >>> from sim.trace.schema import LayerProfile, Trace
        >>> layers = (LayerProfile("l", 1.0, 2.0, 10, 1, 0),) * 4
        >>> p = partition(Trace("four", layers, 1, "fp32", "cpu"), 2).partition
        >>> p.boundaries, p.bottleneck_s
        ((0, 2), 6.0)
    """
    expect_type(trace, (str, Trace), "trace", "a trace name or path, or a Trace")
    expect_int(stages, "stages", 1)
    if hardware is not None:
        expect_type(hardware, str, "hardware", "a hardware preset or YAML path")
    if isinstance(trace, str):
        trace = load_trace(trace, file="command line", field="TRACE")
    if stages > len(trace.layers):
        raise InputError(
            f"{stages} stages but {trace.name} has {len(trace.layers)} layers", field="--stages"
        )
    if microbatch_size is not None and microbatch_size < 1:
        raise InputError(f"must be >= 1, got {microbatch_size}", field="--microbatch-size")
    topo = load_hardware(hardware, field="--hardware") if hardware else None
    notes: list[str] = []
    if microbatch_size or topo is not None:
        gpu = topo.gpus[0].compute if topo else None
        trace, notes = adapt_trace(trace, microbatch_size or trace.microbatch_size, gpu)
    if topo is None:
        return PartitionPlan(trace, split_layers(trace, stages), tuple(notes))
    if stages > topo.num_gpus:
        raise InputError(
            f"{stages} stages but {topo.name} has {topo.num_gpus} GPUs", field="--stages"
        )
    row = place(topo, stages, 1)[0]
    bandwidth = [
        topo.route_bandwidth_Bps(f"gpu{row[j]}", f"gpu{row[j + 1]}", nccl=True)
        for j in range(stages - 1)
    ]
    capacity = [topo.gpu(g).memory_bytes for g in row]
    part = split_layers(
        trace, stages, bandwidth_Bps=bandwidth or None, memory_capacity_bytes=capacity
    )
    return PartitionPlan(trace, part, tuple(notes))


def memory(
    experiment: Experiment,
    *,
    out: str | os.PathLike[str] | None = None,
    advice: bool = True,
    plots: bool = True,
) -> MemoryAnswer:
    """Every configuration's peak memory per pipeline rank, by category, without simulating
    time (:func:`sim.plan.memory_grid.grid_memory`, the model of the planner's memory bound):
    ``sim memory``. With ``out``, writes ``memory.csv`` (one row per configuration and
    pipeline rank, bytes) and ``memory_ranks.png`` (stacked bars per pipeline rank).

    Args:
        experiment: see :data:`Experiment`.
        out: folder to write into (created; files of the same names replaced atomically).
        advice: for configurations that do not fit, find the first single change that fits.
        plots: write the PNG.

    Raises:
        InputError: bad experiment, hardware, trace, grid or output folder (nothing written).

    Example:
        >>> exp = {"name": "b", "hardware": "dgx1-v100-16gb",
        ...        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
        ...        "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 4}}
        >>> a = memory(exp)
        >>> a.results[0].memory.fits, len(a.results[0].memory.ranks)
        (True, 4)
    """
    import time

    from sim.report.memory_ranks import memory_frame, plot_memory_ranks  # pandas, matplotlib

    _flags(advice=advice, plots=plots)
    if out is not None:
        _folder(out)
        check_writable(out, option="--out", directory=True)
    prep = load(experiment)
    points, skipped = expand(prep)
    t0 = time.perf_counter()
    with progress_bar(len(points), "computing memory", "configurations") as on_done:
        results = grid_memory(prep, points, advice=advice, on_done=on_done)
    wall = time.perf_counter() - t0
    if out is None:
        return MemoryAnswer(results, skipped, None, wall)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    sources = experiment_sources(prep)
    frame = memory_frame(results, sources, reserve_source(prep.topology.gpus[0].reserve))
    atomic_write_text(folder / "memory.csv", frame.to_csv(index=False))
    if plots and any(r.memory is not None for r in results):
        plot_memory_ranks(results, folder / "memory_ranks.png", source=joined(sources))
    return MemoryAnswer(results, skipped, folder, wall)

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from sim.bands import Bands
from sim.config import ExperimentConfig, load_experiment, parse_experiment
from sim.errors import InputError
from sim.events import EventLog
from sim.hardware.loader import load_hardware
from sim.hardware.overlay import read_overlay
from sim.metrics import Metrics
from sim.parallel.partition import Partition
from sim.parallel.partition import partition as split_layers
from sim.parallel.placement import place
from sim.plan.executors import open_executor
from sim.plan.planner import PlanStats, plan_points
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import Prepared, prepare
from sim.point.rows import ResultRow, pick_winner
from sim.point.simulate import Resolved, evaluate, resolve
from sim.replay import Replayer
from sim.report.outputs import results_frame
from sim.report.row_bands import bands_for
from sim.run import run_experiment
from sim.trace.adapt import adapt_trace
from sim.trace.loader import load_trace
from sim.trace.schema import Trace
from sim.validate import Validation, ValidationSpec, run_validation

Experiment = str | os.PathLike[str] | Mapping[str, Any] | ExperimentConfig
"""A YAML path, the YAML's content as a mapping, or a parsed experiment."""


def load(experiment: Experiment) -> Prepared:
    """Parse ``experiment`` and load its hardware and traces.

    Relative trace paths resolve against the YAML's folder (a mapping's: the working one).

    Raises:
        InputError: a bad file, preset, trace or field.
    """
    if isinstance(experiment, ExperimentConfig):
        return prepare(experiment, "<experiment>")
    if isinstance(experiment, Mapping):
        return prepare(parse_experiment(dict(experiment)), "<experiment>")
    return prepare(load_experiment(Path(experiment)), str(experiment))


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run` wrote.

    Attributes:
        code: the command's exit code: 0, or 1 when a model has no configuration that fits.
        out_dir: the output folder (``results.csv``, ``winner.yaml``, plots, timeline).
    """

    code: int
    out_dir: Path

    @property
    def results(self) -> pd.DataFrame:
        """``results.csv``: one row per configuration (:class:`sim.point.rows.ResultRow`)."""
        return pd.read_csv(self.out_dir / "results.csv")


def run(
    experiment: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    jobs: int = 1,
    cache: bool = True,
    plots: bool = True,
    executor: str = "local",
    exhaustive: bool = False,
    console: Console | None = None,
    hardware_overlay: str | os.PathLike[str] | None = None,
) -> RunOutcome:
    """Plan an experiment's grid and write its output set (:mod:`sim.run`): ``sim run``.

    Args:
        experiment: the experiment YAML (or a ``winner.yaml``).
        out: output folder: new, empty or an earlier run's (default ``results/<name>/``).
        jobs: worker processes.
        cache: reuse the rows cached in ``out/.cache``.
        plots: write the PNG plots and the winner's Chrome-trace timeline.
        executor: ``local`` or ``ray`` (:mod:`sim.plan.executors`).
        exhaustive: simulate every configuration (no pruning by bounds: :mod:`sim.plan.planner`).
        console: where the summary and progress go (default: standard output).
        hardware_overlay: an overlay file set over the hardware (:mod:`sim.hardware.overlay`),
            instead of the experiment's ``hardware_overlay``.

    Returns:
        The exit code and the folder written.

    Raises:
        InputError: bad experiment, hardware, trace, grid or folder (nothing is written).
    """
    path = Path(experiment)
    exp = load_experiment(path)
    if hardware_overlay is not None:
        read_overlay(Path(hardware_overlay))  # a bad overlay is refused before anything runs
        exp = exp.model_copy(update={"hardware_overlay": str(Path(hardware_overlay).resolve())})
    out_dir = Path(out) if out else Path("results") / exp.name
    code = run_experiment(
        path,
        exp=exp,
        out_dir=out_dir,
        jobs=jobs,
        use_cache=cache,
        plots=plots,
        console=console or Console(),
        executor=executor,
        exhaustive=exhaustive,
    )
    return RunOutcome(code, out_dir)


@dataclass(frozen=True)
class Plan:
    """The planned grid of :func:`plan`.

    Attributes:
        rows: one per configuration, in grid order (pruned ones say why in ``error``).
        winners: per model, the fastest configuration that fits (``None``: none fits).
        skipped: ``(configuration, reason)`` of the combinations that are not valid.
        stats: how many were simulated, pruned, cached.
    """

    rows: list[ResultRow]
    winners: dict[str, ResultRow | None]
    skipped: list[tuple[str, str]]
    stats: PlanStats
    bands: Bands | None = None

    def table(self) -> pd.DataFrame:
        """The rows as ``results.csv`` has them (prediction bands included: ``bands``, the
        hardware's, :func:`sim.report.row_bands.bands_for`)."""
        return results_frame(self.rows, self.bands)


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
        InputError: bad experiment, hardware, trace or grid.

    Example:
        >>> exp = {"name": "b", "hardware": "dgx1-v100-16gb",
        ...        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
        ...        "sweep": {"schedule": ["gpipe", "1f1b"], "stages": 4, "microbatch_size": 4}}
        >>> p = plan(exp)
        >>> len(p.rows), p.winners["bert"].schedule
        (2, '1f1b')
    """
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


@dataclass(frozen=True)
class Simulation:
    """One configuration simulated by :func:`simulate`.

    Attributes:
        point: the configuration.
        metrics: iteration time (s), throughput (samples/s), bubble fraction, peak memory
            (bytes), whether it fits.
        log: the event log (compute, transfers, memory); ``sim.report`` draws it.
        resolved: the partition, placement and schedule it ran.
    """

    point: PointConfig
    metrics: Metrics
    log: EventLog
    resolved: Resolved


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

    Raises:
        InputError: bad options, file or configuration (before any replay starts).

    A replay that fails is a row with ``status`` ``failed`` (the others still run).

    Example (needs torch; a few seconds on a CPU)::

        from backends.torch.replay.replayer import TorchReplayer
        v = sim.api.validate("results/cpu-gpt-tiny/winner.yaml", replayer=TorchReplayer(),
                             nproc=2, schedules=("gpipe", "1f1b"))
        v.table[["schedule", "measured_iteration_s", "predicted_iteration_s", "error"]]
    """
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
    return run_validation(Path(config), spec, replayer, Path(out) if out else None, on_row)


@dataclass(frozen=True)
class PartitionPlan:
    """A trace split into stages by :func:`partition`.

    Attributes:
        trace: the trace as partitioned (brought to the micro-batch size and GPU).
        partition: the stages (:class:`sim.parallel.partition.Partition`).
        notes: how the trace was brought to that micro-batch size and GPU.
    """

    trace: Trace
    partition: Partition
    notes: tuple[str, ...]


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

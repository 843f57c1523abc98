"""``sim validate``: replay a configuration on real devices and compare with the simulator.

One pipeline for every mode (:class:`sim.validate.spec.Mode`): **check** everything (the file,
the variants, what the replayer can run, the device, the output folder) before the first
process starts; **replay** each variant with each runtime through a :class:`sim.replay.Replayer`
and simulate it once; **write** ``validation.csv`` (one row per replay,
:mod:`sim.validate.table`), ``validation_breakdown.csv`` (per rank and op, when our runtime
ran every rank: :mod:`sim.validate.breakdown`) and the measured and predicted timelines
(:mod:`sim.validate.measured`) as one staged set (:mod:`sim.validate.staging`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from sim.atomic import atomic_write_text, check_writable
from sim.config import load_experiment
from sim.errors import InputError
from sim.point.config import PointConfig
from sim.point.experiment import Prepared, prepare
from sim.point.simulate import Resolved, resolve
from sim.progress import progress
from sim.replay import Replayer, ReplayFailed, ReplayRequest
from sim.validate.breakdown import breakdown_rows
from sim.validate.measured import write_timelines
from sim.validate.predict import Prediction, predict
from sim.validate.spec import Mode, ValidationSpec, mode_of
from sim.validate.staging import commit_validation, staged_validation
from sim.validate.table import failed_row, not_run_row, validation_row
from sim.validate.variants import variants

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

FIELDS = {
    "memory_policy": "sweep.memory_policy",
    "schedule": "sweep.schedule",
    "stages": "sweep.stages",
    "virtual_stages": "sweep.virtual_stages",
    "tensor_parallel": "sweep.tensor_parallel",
    "sequence_parallel": "sweep.sequence_parallel",
    "dp_width": "sweep.dp_width",
    "expert_parallel": "sweep.expert_parallel",
    "context_parallel": "sweep.context_parallel",
    "context_parallel_comm": "sweep.context_parallel_comm",
    "microbatch_size": "sweep.microbatch_size",
    "nproc": "--nproc",
    "single_rank": "--single-rank",
    "device": "--device",
}
"""The experiment field (or option) named for a :class:`sim.replay.ReplayProblem`'s field;
``model`` names the model's trace."""


@dataclass(frozen=True)
class Planned:
    """One variant, checked and resolved, with a request per runtime."""

    point: PointConfig
    mode: Mode
    resolved: Resolved
    requests: tuple[ReplayRequest, ...]
    missing: tuple[tuple[str, str], ...] = ()
    """Runtimes asked for but not available: ``(runtime, why)``."""
    numerics_skipped: str | None = None
    prediction: Prediction | None = None
    """The simulator's numbers, computed while planning (before the first replay)."""


@dataclass(frozen=True)
class Validation:
    """What a validation wrote.

    Attributes:
        table: ``validation.csv``'s rows.
        path: where ``validation.csv`` is.
        breakdown: ``validation_breakdown.csv``'s rows (empty when none was written).
        files: every file of the set.
    """

    table: pd.DataFrame
    path: Path
    breakdown: pd.DataFrame
    files: tuple[Path, ...]

    def to_frame(self) -> pd.DataFrame:
        """:attr:`table`: ``validation.csv``'s rows."""
        return self.table


def model_spec(prep: Prepared, point: PointConfig) -> dict[str, Any]:
    """The real model of ``point``'s trace (``provenance.model``, written by ``sim profile``).

    Raises:
        InputError: the trace has none.
    """
    trace = prep.traces[point.model]
    spec = trace.provenance.get("model")
    if not isinstance(spec, dict):
        raise InputError(
            f"trace {trace.name!r} has no model description (provenance.model), "
            "so there is no real model to replay; make the trace with `sim profile`",
            file=prep.file,
            field=f"models.{_model_index(prep, point)}.trace",
        )
    return spec


def _model_index(prep: Prepared, point: PointConfig) -> int:
    return next(i for i, m in enumerate(prep.exp.models) if m.name == point.model)


def _check_ranks(prep: Prepared, point: PointConfig, spec: ValidationSpec) -> None:
    """A run of every rank replays one pipeline on ``stages x tensor_parallel x
    context_parallel`` ranks, times ``dp_width`` with expert parallelism (its ranks are the
    replicas; the replayer says which widths it runs)."""
    if point.dp_width != 1 and point.expert_parallel == 1:
        raise InputError(
            "replays run one pipeline (dp_width 1) unless expert parallelism makes the "
            "replicas its ranks",
            file=prep.file,
            field="sweep.dp_width",
        )
    ranks = _ranks(point)
    if spec.nproc is not None and spec.nproc != ranks:
        raise InputError(
            f"--nproc {spec.nproc} but the configuration has {point.stages} "
            + (
                f"stage(s) x tensor_parallel {point.tensor_parallel} x context_parallel "
                f"{point.context_parallel} x dp_width {point.dp_width} = {ranks} ranks"
                if ranks != point.stages
                else "stages; the replay runs one stage per rank"
            ),
            field="--nproc",
        )


NUMERICS_MAX_PARAM_BYTES = 2 * 2**30
"""Largest model (parameter bytes) the numerics check runs for: its reference holds the whole
model, its weight versions and its gradients in one process (an assumption: a few GiB on the
device the replay uses)."""


def numerics_skip(prep: Prepared, res: Resolved, mode: Mode, spec: ValidationSpec) -> str | None:
    """Why ``res`` gets no numerics check, or ``None`` when it does."""
    if not spec.numerics:
        return "not asked (--no-numerics)"
    if mode in (Mode.EXPERT_PARALLEL, Mode.CONTEXT_PARALLEL):
        return f"an {mode} replay checks its losses only (losses_match)"
    if mode in (Mode.SINGLE_RANK, Mode.TENSOR_PARALLEL):
        return f"a {mode} replay has no one-process reference yet"
    size = prep.traces[res.point.model].param_bytes
    if size > NUMERICS_MAX_PARAM_BYTES:
        return (
            f"the model's {size / 2**30:.1f} GiB of parameters exceed the one-process "
            f"reference's {NUMERICS_MAX_PARAM_BYTES / 2**30:.0f} GiB"
        )
    return None


def _ranks(point: PointConfig) -> int:
    return point.stages * point.tensor_parallel * point.context_parallel * point.dp_width


def request_for(prep: Prepared, res: Resolved, spec: ValidationSpec) -> ReplayRequest:
    """The replay of ``res`` as ``spec`` asks (runtime ``ours``; threads: the cores shared by
    every rank of the pipeline, also when one runs alone)."""
    point, trace = res.point, prep.traces[res.point.model]
    return ReplayRequest(
        model=model_spec(prep, point),
        boundaries=tuple(res.boundaries),
        schedule=point.schedule,
        stages=point.stages,
        microbatches=point.microbatches,
        microbatch_size=point.microbatch_size,
        memory_policy=point.memory_policy,
        dtype=trace.dtype,
        device=spec.device,
        iterations=spec.iterations,
        warmup_iterations=spec.warmup_iterations,
        tensor_parallel=point.tensor_parallel,
        sequence_parallel=point.sequence_parallel,
        dp_width=point.dp_width,
        expert_parallel=point.expert_parallel,
        context_parallel=point.context_parallel,
        context_parallel_comm=point.context_parallel_comm,
        virtual_stages=point.virtual_stages,
        single_rank=spec.rank,
        attention=trace.provenance.get("attention_kernel") if spec.rank is not None else None,
        threads=max(1, (os.cpu_count() or 1) // _ranks(point)),
        timeout_s=spec.timeout_s,
    )


def plan(prep: Prepared, point: PointConfig, spec: ValidationSpec, replayer: Replayer) -> Planned:
    """Resolve ``point``, check every replay of it and simulate it.

    Raises:
        InputError: the point does not resolve, has no real model, has the wrong number of
            ranks, or the replayer cannot run it (naming the experiment field).
    """
    res = resolve(prep.exp, point, prep.topology, prep.traces[point.model], file=prep.file)
    mode = mode_of(point, spec, res.schedule.virtual_stages)
    if mode != Mode.SINGLE_RANK:
        _check_ranks(prep, point, spec)
    skip = numerics_skip(prep, res, mode, spec)
    base = dataclasses.replace(request_for(prep, res, spec), numerics=skip is None)
    runtimes = replayer.runtimes(base, builtin=spec.torch_builtin)
    requests = tuple(dataclasses.replace(base, runtime=r) for r in runtimes)
    missing: tuple[tuple[str, str], ...] = ()
    if spec.torch_builtin and "torch" not in runtimes and mode != Mode.SINGLE_RANK:
        missing = (
            (
                "torch",
                f"torch.distributed.pipelining has no {point.schedule} schedule (it runs "
                "gpipe, 1f1b and, from our CSV, the multi-stage schedules)",
            ),
        )
    for req in requests:
        problems = replayer.problems(req)
        if problems:
            first = problems[0]
            field = FIELDS.get(first.field, first.field)
            if first.field in ("model", "dtype"):
                field = f"models.{_model_index(prep, point)}.trace"
            raise InputError(f"cannot be replayed: {first.reason}", file=prep.file, field=field)
    prediction = predict(res, spec.rank)
    return Planned(point, mode, res, requests, missing, skip, prediction)


def run_validation(
    path: Path,
    spec: ValidationSpec,
    replayer: Replayer,
    out: Path | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    console: Console | None = None,
) -> Validation:
    """Replay every variant of the configuration in ``path``; write the staged set.

    Args:
        path: a single-configuration experiment (a ``winner.yaml``).
        spec: what to replay.
        replayer: the backend (``backends.torch.replay.replayer.TorchReplayer``).
        out: folder to write into (default: beside ``path``).
        on_row: called with each ``validation.csv`` row as soon as it is measured.
        console: where the progress bar goes on a terminal (:func:`sim.progress.progress`;
            the one ``on_row`` prints to, so the two do not garble each other).

    Raises:
        InputError: bad options, file, variant, device or folder (nothing has run then).

    A replay that fails (a rank raised or crashed, the run timed out) is a row with ``status``
    ``failed`` and its reason; the other replays still run and every row is written.
    """
    import pandas as pd  # on first use: `import sim.api` stays fast

    spec.check()
    pairs = variants(prepare(load_experiment(path), str(path)), spec)
    planned = [plan(prep, p, spec, replayer) for prep, p in pairs]  # all before the replays
    replayer.check_device(spec.device, max(r.ranks for p in planned for r in p.requests))
    dest = Path(out) if out else Path(path).parent
    check_writable(dest, option="--out", directory=True)
    rows: list[dict[str, Any]] = []
    breakdown: list[dict[str, Any]] = []
    total = sum(len(p.requests) + len(p.missing) for p in planned)
    bar = progress(total, "replaying", "replays", console=console)
    with staged_validation(dest) as stage, bar as on_done:
        for item in planned:
            for row, parts in _replay(item, spec, replayer, stage):
                rows.append(row)
                breakdown += parts
                if on_row:
                    on_row(row)
                on_done(len(rows))
        table, parts_df = pd.DataFrame(rows), pd.DataFrame(breakdown)
        if breakdown:
            atomic_write_text(stage / "validation_breakdown.csv", parts_df.to_csv(index=False))
        atomic_write_text(stage / "validation.csv", table.to_csv(index=False))
        files = commit_validation(stage, dest)
    return Validation(table, dest / "validation.csv", parts_df, tuple(files))


def _replay(item: Planned, spec: ValidationSpec, replayer: Replayer, stage: Path):
    """Yield ``(row, breakdown rows)`` per runtime of ``item`` (a failed replay: its row, and
    the next runtime still runs); our runtime's replay of every rank also writes its timelines
    into ``stage``."""
    pred = item.prediction or predict(item.resolved, spec.rank)
    for req in item.requests:
        log.info(
            "replaying %s p=%d m=%d with %s's runtime on %d %s rank(s) ...",
            req.schedule, req.stages, req.microbatches, req.runtime, req.ranks, spec.device,
        )  # fmt: skip
        try:
            result = replayer.replay(req)
        except ReplayFailed as exc:
            yield failed_row(item.mode, item.point, req.runtime, spec.device, pred, exc), []
            continue
        row = validation_row(
            item.mode, item.point, req.runtime, spec.device, result, pred, spec.rank,
            item.numerics_skipped,
        )  # fmt: skip
        parts: list[dict[str, Any]] = []
        if req.runtime == "ours" and item.mode != Mode.SINGLE_RANK:
            write_timelines(stage, item.point, req.runtime, result.action_spans, pred.log)
            if result.action_spans:
                parts = breakdown_rows(
                    item.resolved,
                    result.action_spans,
                    result.iteration_time_s,
                    pred.log,
                    pred.iteration_s,
                    warmup_iterations=spec.warmup_iterations,
                    measured_iterations=spec.iterations,
                )
        yield row, parts
    for runtime, why in item.missing:
        yield not_run_row(item.mode, item.point, runtime, spec.device, pred, why), []

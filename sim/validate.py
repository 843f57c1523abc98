"""``sim validate``: replay a configuration on real devices and compare with the simulator.

For each configuration (the winner, or the winner with other schedules / micro-batch counts),
the torch backend replays the same per-rank action lists on ``stages`` processes (gloo on CPU,
NCCL on GPUs) and measures the median iteration time and each rank's peak memory; the simulator
simulates the same configuration on the experiment's (calibrated) hardware. Both go side by side
into ``validation.csv`` with the relative error ``(predicted - measured) / measured``, and each
configuration's measured and predicted timelines go into ``measured-<schedule>-m<m>.json`` and
``predicted-<schedule>-m<m>.json`` (Chrome traces: open both in Perfetto).

torch is imported only when a replay starts (``backends.torch``).
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.atomic import atomic_write_text, check_writable, pid_alive
from sim.config import PointConfig, load_experiment
from sim.errors import InputError
from sim.events import Event, EventLog
from sim.framework.registry import DEFAULT_FRAMEWORK
from sim.metrics import steady_window
from sim.point import evaluate, resolve
from sim.schedules.action import STEP, Action
from sim.sweep import Prepared, expand, prepare


@dataclass(frozen=True)
class ValidationSpec:
    """What to replay and how.

    Attributes:
        schedules: schedules to replay (default: the file's).
        microbatches: micro-batch counts to replay (default: the file's); the global batch
            follows as ``m * b * w``.
        device: ``cpu`` or ``cuda``.
        nproc: ranks; must equal the pipeline depth (one stage per rank).
        iterations: measured iterations (optimizer steps).
        warmup_iterations: iterations run before measuring.
        torch_builtin: also run torch's own ScheduleGPipe / Schedule1F1B where they apply.
        timeout_s: hard limit per replay.
    """

    schedules: tuple[str, ...] = ()
    microbatches: tuple[int, ...] = ()
    device: str = "cpu"
    nproc: int | None = None
    iterations: int = 3
    warmup_iterations: int = 1
    torch_builtin: bool = False
    timeout_s: float = 600.0


def variants(prep: Prepared, spec: ValidationSpec) -> list[PointConfig]:
    """The configurations to replay: the file's single point, varied as ``spec`` asks.

    Raises:
        InputError: the file is not a single configuration, names a framework profile other
            than the runtime the replay runs (``pipesim``), or the variation is invalid.
    """
    if prep.exp.framework != DEFAULT_FRAMEWORK:
        raise InputError(
            f"validate replays pipesim's own torch runtime, not {prep.exp.framework}; its "
            f"prediction must be of the same runtime: set framework: {DEFAULT_FRAMEWORK} "
            "(or remove the key)",
            file=prep.file,
            field="framework",
        )
    points, _ = expand(prep)
    if len(points) != 1:
        raise InputError(
            f"describes {len(points)} configurations; validate takes one (a "
            "winner.yaml written by `sim run`)",
            file=prep.file,
            field="sweep",
        )
    base = points[0]
    out = []
    for sched in spec.schedules or (base.schedule,):
        for m in spec.microbatches or (base.microbatches,):
            gb = m * base.microbatch_size * base.dp_width
            out.append(
                base.model_copy(update=dict(schedule=sched, microbatches=m, global_batch=gb))
            )
    return out


def _model_spec(prep: Prepared, point: PointConfig) -> dict:
    trace = prep.traces[point.model]
    spec = trace.provenance.get("model")
    if not isinstance(spec, dict):
        raise InputError(
            f"trace {trace.name!r} has no model description (provenance.model), "
            "so there is no real model to replay; make the trace with `sim profile`",
            file=prep.file,
            field="models.0.trace",
        )
    if spec.get("kind") == "user":  # a user's model (sim profile --model): torch-free check
        from backends.torch.user_spec import UserModelSpec

        problem = UserModelSpec.from_dict(spec).replay_problem(point.microbatch_size)
        if problem:
            raise InputError(problem, file=prep.file, field="microbatch_size")
    return spec


def _job(prep: Prepared, point: PointConfig, res, spec: ValidationSpec, backend: str):
    from backends.torch.job import SCHEDULES_TORCH_CSV, ReplayJob, policy_problems

    problems = policy_problems(point.memory_policy, point.stages)  # the same parser as the sim
    if problems:
        raise InputError(
            f"cannot be replayed: {problems[0]}", file=prep.file, field="sweep.memory_policy"
        )
    if point.tensor_parallel > 1:
        _check_tp(prep, point)
    for size, field in ((point.expert_parallel, "expert"), (point.context_parallel, "context")):
        if size > 1:
            raise InputError(
                f"{field} parallelism is not replayed by sim validate yet; its CPU replay and "
                "comparison are benchmarks/bench_moe_replay.py (backends/torch/ep_replay.py, "
                "cp_replay.py)",
                file=prep.file,
                field=f"sweep.{field}_parallel",
            )
    return ReplayJob(
        model=_model_spec(prep, point),
        boundaries=list(res.boundaries),
        schedule=point.schedule,
        stages=point.stages,
        microbatches=point.microbatches,
        microbatch_size=point.microbatch_size,
        iterations=spec.iterations,
        warmup_iterations=spec.warmup_iterations,
        memory_policy=point.memory_policy,
        device=spec.device,
        backend=backend,
        dtype=prep.traces[point.model].dtype,
        threads=max(1, (os.cpu_count() or 1) // (point.stages * point.tensor_parallel)),
        timeout_s=spec.timeout_s,
        tensor_parallel=point.tensor_parallel,
        sequence_parallel=point.sequence_parallel,
        virtual_stages=point.virtual_stages,
        torch_csv=point.schedule in SCHEDULES_TORCH_CSV,
    )


def _check_tp(prep: Prepared, point: PointConfig) -> None:
    """The tensor-parallel replay's limits (:func:`backends.torch.job.tp_problems`)."""
    from backends.torch.job import SCHEDULES_TORCH

    model = prep.traces[point.model].provenance.get("model") or {}
    for ok, field, why in (
        (point.stages == 1, "sweep.stages", "runs one pipeline stage (stages 1)"),
        (point.schedule in SCHEDULES_TORCH, "sweep.schedule", f"runs {SCHEDULES_TORCH}"),
        (point.memory_policy == "none", "sweep.memory_policy", "runs memory_policy none"),
        (model.get("kind") == "gpt", "models.0.trace", "runs GPT models"),
        (
            int(model.get("vocab", 0)) % point.tensor_parallel == 0,
            "models.0.trace",
            "splits the vocabulary, so tensor_parallel must divide it",
        ),
    ):
        if not ok:
            raise InputError(
                f"tensor_parallel {point.tensor_parallel}: the tensor-parallel replay {why}",
                file=prep.file,
                field=field,
            )


def measured_log(spans: list[list[tuple[str, float, float, float]]]) -> EventLog:
    """An :class:`EventLog` of a replay's measured per-rank actions (rank ``r`` is ``gpu<r>``).

    Each action becomes a ``stall`` span while it waited for its input and a ``compute`` (or
    ``optimizer``) span for the rest, so the measured timeline reads like the simulated one.
    """
    log = EventLog()
    for rank, rank_spans in enumerate(spans):
        for name, start, ready, end in rank_spans:
            action = Action.from_str(name)
            meta: dict[str, Any] = dict(
                stage=action.stage, microbatch=None if action.op == STEP else action.microbatch
            )
            if ready > start:
                log.events.append(
                    Event("stall", f"gpu{rank}", "compute", f"wait {name}", start, ready, **meta)
                )
            kind = "optimizer" if action.op == STEP else "compute"
            log.events.append(Event(kind, f"gpu{rank}", "compute", name, ready, end, **meta))
    return log


def _write_timelines(dest: Path, point: PointConfig, backend: str, result, sim_log) -> None:
    from sim.report.chrome_trace import write_chrome_trace

    tag = f"{point.schedule}-m{point.microbatches}"
    if result.action_spans:
        write_chrome_trace(
            measured_log(result.action_spans),
            dest / f"measured-{tag}.json",
            title=f"measured {tag} ({backend} runtime)",
        )
    write_chrome_trace(sim_log, dest / f"predicted-{tag}.json", title=f"predicted {tag}")


def validate_point(
    prep: Prepared,
    point: PointConfig,
    spec: ValidationSpec,
    timelines: Path | None = None,
    breakdown: list[dict] | None = None,
) -> list[dict]:
    """Rows (ours, and torch's built-in schedule if asked) for one configuration; our
    runtime's per-action breakdown (:func:`sim.validate_breakdown.action_breakdown`) is
    appended to ``breakdown`` when given.

    Raises:
        InputError: the configuration cannot be replayed (data parallelism, ranks != stages,
            unsupported policy, trace without a model).
        backends.torch.ReplayError: a rank failed or hung.
    """
    if point.dp_width != 1:
        raise InputError(
            "replays run one pipeline (dp_width 1)", file=prep.file, field="sweep.dp_width"
        )
    ranks = point.stages * point.tensor_parallel
    if spec.nproc is not None and spec.nproc != ranks:
        raise InputError(
            f"--nproc {spec.nproc} but the configuration has {point.stages} "
            + (
                f"stage(s) x tensor_parallel {point.tensor_parallel} = {ranks} ranks"
                if point.tensor_parallel > 1
                else "stages; the replay runs one stage per rank"
            ),
            field="--nproc",
        )
    res = resolve(prep.exp, point, prep.topology, prep.traces[point.model], file=prep.file)
    metrics, sim_log = evaluate(res)
    from backends.torch.job import SCHEDULES_TORCH_CSV

    if point.schedule in SCHEDULES_TORCH_CSV:  # stage chunks per rank: torch's runtime only
        backends = ["torch"]
    else:
        backends = ["ours"] + (
            ["torch"] if spec.torch_builtin and point.schedule in ("gpipe", "1f1b") else []
        )
    from backends.torch.launch import replay

    rows = []
    for backend in backends:
        result = replay(_job(prep, point, res, spec, backend))
        if timelines is not None and backend == "ours":
            _write_timelines(timelines, point, backend, result, sim_log)
        measured = result.iteration_time_s
        if breakdown is not None and backend == "ours" and result.action_spans:
            breakdown += _breakdown_rows(point, res, spec, result, sim_log, metrics)
        mem = max(result.peak_memory_bytes)
        rows.append(
            dict(
                mode="pipeline",
                model=point.model,
                schedule=point.schedule,
                runtime=backend,
                stages=point.stages,
                tensor_parallel=point.tensor_parallel,
                sequence_parallel=point.sequence_parallel,
                microbatch_size=point.microbatch_size,
                microbatches=point.microbatches,
                memory_policy=point.memory_policy,
                device=spec.device,
                device_name=result.device_name,
                measured_iteration_s=measured,
                predicted_iteration_s=metrics.iteration_time_s,
                error=(metrics.iteration_time_s - measured) / measured,
                measured_peak_bytes=mem,
                predicted_peak_bytes=metrics.peak_memory_bytes,
                memory_error=(metrics.peak_memory_bytes - mem) / mem if mem else math.nan,
                all_actions_done=result.all_actions_done,
                losses_finite=bool(result.losses) and all(math.isfinite(x) for x in result.losses),
                measured_iterations_s=" ".join(f"{t:.4f}" for t in result.iteration_times_s),
                notes="; ".join(result.notes),
            )
        )
    return rows


def _breakdown_rows(point: PointConfig, res, spec: ValidationSpec, result, sim_log, metrics):
    from sim.validate_breakdown import action_breakdown

    ends = sim_log.iteration_ends_s
    start_s, _, steps = steady_window(
        ends, point.stages, point.microbatches, res.schedule.synchronous
    )
    first = ends.index(start_s) + 1 if start_s in ends else 0
    rows = action_breakdown(
        measured_log(result.action_spans),
        result.iteration_time_s,
        sim_log,
        metrics.iteration_time_s,
        microbatches=point.microbatches,
        warmup_iterations=spec.warmup_iterations,
        measured_iterations=spec.iterations,
        predicted_window=(first, steps),
    )
    head = dict(schedule=point.schedule, runtime="ours", microbatches=point.microbatches)
    return [{**head, **r} for r in rows]


def run_validation(
    path: Path, spec: ValidationSpec, out: Path | None, on_row=None
) -> tuple[pd.DataFrame, Path]:
    """Validate every variant of the configuration in ``path``; write ``validation.csv``.

    Returns:
        The table and the path written (default: next to ``path``).

    Raises:
        InputError: as :func:`validate_point`, or a bad file.
    """
    prep = prepare(load_experiment(path), str(path))
    points = variants(prep, spec)
    for p in points:  # validate every variant before the (slow) replays start
        resolve(prep.exp, p, prep.topology, prep.traces[p.model], file=prep.file)
        _model_spec(prep, p)
        if p.tensor_parallel > 1:
            _check_tp(prep, p)
    dest_dir = Path(out) if out else Path(path).parent
    check_writable(dest_dir, option="--out", directory=True)
    remove_stale_stages(dest_dir)
    stage = dest_dir / f"{STAGE_PREFIX}{os.getpid()}"
    stage.mkdir(parents=True, exist_ok=True)
    try:
        rows: list[dict] = []
        breakdown: list[dict] = []
        for p in points:
            new = validate_point(prep, p, spec, timelines=stage, breakdown=breakdown)
            rows += new
            if on_row:
                for row in new:
                    on_row(row)
        df = pd.DataFrame(rows)
        if breakdown:
            atomic_write_text(
                stage / "validation_breakdown.csv", pd.DataFrame(breakdown).to_csv(index=False)
            )
        atomic_write_text(stage / "validation.csv", df.to_csv(index=False))
        for f in sorted(stage.iterdir(), key=lambda f: f.name == "validation.csv"):
            os.replace(f, dest_dir / f.name)  # validation.csv last: it marks a complete set
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return df, dest_dir / "validation.csv"


STAGE_PREFIX = ".validation.new-"
"""A replay's files are written into ``<out>/.validation.new-<pid>/`` and moved out at the
end, so a killed ``sim validate`` leaves no partial set (the next one removes the folder)."""


def remove_stale_stages(folder: Path) -> None:
    """Remove the staging folders of ``sim validate`` runs that are dead."""
    if not folder.is_dir():
        return
    for p in folder.glob(f"{STAGE_PREFIX}*"):
        pid = p.name[len(STAGE_PREFIX) :]
        if p.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)

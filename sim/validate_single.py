"""``sim validate --single-rank R [--stages P]``: one pipeline rank alone, measured vs predicted.

Rank ``R`` of a ``P``-stage pipeline runs its own action list in one process on one device,
with sends and receives replaced by local buffers (:mod:`backends.torch.single_rank`). Nothing
waits on another rank, so what is measured is that GPU's own work; the prediction is read from
the simulator's event log of the whole ``P``-stage configuration:

* **time**: GPU ``R``'s busy time per steady-state iteration (:func:`busy_per_iteration_s`):
  its compute-stream spans (forward and backward, recompute, optimizer step, stalls on its
  own swaps) inside :func:`sim.metrics.steady_window`, divided by the window's optimizer steps.
  Waits for other ranks are idle gaps in the log, not spans, so they are not counted. Caveat:
  in the pipeline a swap-in can hide behind such a wait; alone it cannot, so the prediction
  may under-state ``cpu_swap`` stalls.
* **memory**: GPU ``R``'s peak (:func:`sim.memory.peak.device_peaks`). ``predicted_peak_bytes``
  is the tensor part (the peak without the ``reserve``, i.e. CUDA context, cuBLAS, NCCL, and
  without the ``allocator`` margin), which ``torch.cuda.max_memory_allocated`` measures;
  ``predicted_device_peak_bytes`` is the whole peak; ``measured_reserved_bytes`` is
  ``max_memory_reserved`` (CUDA only).

With ``--stages P`` other than the file's, stages are cut by the uniform partition
(``sim.partition.uniform_partition``), which needs the chain's layers to split evenly into
``P``; the file's own depth keeps the file's partition.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.atomic import atomic_write_text, check_writable
from sim.config import PointConfig, load_experiment
from sim.errors import InputError
from sim.events import EventKind, EventLog, MemCategory, Stream
from sim.memory.peak import device_peaks
from sim.metrics import steady_window
from sim.point import Resolved, evaluate, resolve
from sim.sweep import Prepared, expand, prepare

BUSY_KINDS = (
    EventKind.COMPUTE,
    EventKind.RECOMPUTE,
    EventKind.OPTIMIZER,
    EventKind.STALL,
    EventKind.HOST_WAIT,
)
"""Compute-stream spans that are a GPU's own work (``stall``: waiting on its own swaps;
``host_wait``: on its own host issuing ops)."""
NOT_TENSORS = (MemCategory.RESERVE, MemCategory.ALLOCATOR, MemCategory.FRAMEWORK)
"""Peak categories that ``torch.cuda.max_memory_allocated`` does not see (a framework's share
is memory it keeps out of its own reach, :mod:`sim.memory.memtracer`)."""


@dataclass(frozen=True)
class SingleRankSpec:
    """What to run alone.

    Attributes:
        rank: the pipeline stage ``R`` (``0 .. P-1``).
        stages: pipeline depth ``P`` (``None``: the file's).
        schedules: schedules to run (default: the file's).
        microbatches: micro-batch counts (default: the file's).
        device: ``cpu`` or ``cuda``.
        iterations: measured iterations (optimizer steps; ``m`` micro-batches each).
        warmup_iterations: iterations run before measuring.
        timeout_s: hard limit per run, seconds.
    """

    rank: int
    stages: int | None = None
    schedules: tuple[str, ...] = ()
    microbatches: tuple[int, ...] = ()
    device: str = "cpu"
    iterations: int = 3
    warmup_iterations: int = 1
    timeout_s: float = 600.0


def with_depth(prep: Prepared, stages: int | None) -> tuple[Prepared, list[PointConfig]]:
    """The file's single configuration at depth ``stages`` (uniform partition if it changes).

    Raises:
        InputError: not one configuration (field ``sweep``); ``stages`` below 1, above the
            hardware's GPUs, or not dividing the chain's layers evenly (``--stages``).
    """
    points, _ = expand(prep)
    if len(points) != 1:
        raise InputError(
            f"describes {len(points)} configurations; validate takes one (a winner.yaml "
            "written by `sim run`)",
            file=prep.file,
            field="sweep",
        )
    base = points[0]
    if stages is None or stages == base.stages:
        return prep, [base]
    layers = len(prep.traces[base.model].layers)
    if stages < 1 or layers % stages:
        raise InputError(
            f"{stages} stages: the model's {layers} layers (embedding, blocks, head) do not "
            "split evenly into that many stages",
            field="--stages",
        )
    if stages > prep.topology.num_gpus:
        raise InputError(
            f"{stages} stages, but {prep.topology.name} has {prep.topology.num_gpus} GPUs (the "
            "prediction simulates the whole pipeline)",
            field="--stages",
        )
    options = prep.exp.options.model_copy(update=dict(partition="uniform", boundaries=None))
    exp = prep.exp.model_copy(update=dict(options=options))
    return dataclasses.replace(prep, exp=exp), [base.model_copy(update=dict(stages=stages))]


def variants(prep: Prepared, spec: SingleRankSpec) -> tuple[Prepared, list[PointConfig]]:
    """The configurations to run: the file's, at ``spec.stages``, varied by schedule and m.

    Raises:
        InputError: as :func:`with_depth`, or ``spec.rank`` outside ``0 .. P-1``
            (``--single-rank``).
    """
    prep, (base,) = with_depth(prep, spec.stages)
    if not 0 <= spec.rank < base.stages:
        raise InputError(
            f"rank {spec.rank} is not a stage of the {base.stages}-stage pipeline (0 .. "
            f"{base.stages - 1})",
            field="--single-rank",
        )
    out = []
    for sched in spec.schedules or (base.schedule,):
        for m in spec.microbatches or (base.microbatches,):
            gb = m * base.microbatch_size * base.dp_width
            out.append(
                base.model_copy(update=dict(schedule=sched, microbatches=m, global_batch=gb))
            )
    return prep, out


def busy_per_iteration_s(log: EventLog, gpu: str, stages: int, m: int, synchronous: bool) -> float:
    """Seconds ``gpu``'s compute stream is busy (:data:`BUSY_KINDS`) per steady iteration.

    Spans are clipped to :func:`sim.metrics.steady_window`; the sum is divided by its steps.
    """
    t0, t1, steps = steady_window(log.iteration_ends_s, stages, m, synchronous)
    busy = 0.0
    for e in log.events:
        if e.device == gpu and e.stream == Stream.COMPUTE and e.kind in BUSY_KINDS:
            busy += max(0.0, min(e.end_s, t1) - max(e.start_s, t0))
    return busy / steps


def predict_single_rank(res: Resolved, rank: int) -> dict[str, Any]:
    """The simulator's numbers for stage ``rank`` of ``res`` (module docstring).

    Returns:
        ``gpu``, ``predicted_iteration_s`` (busy seconds per iteration),
        ``predicted_peak_bytes`` (tensors), ``predicted_device_peak_bytes`` (with reserve and
        allocator margin) and ``pipeline_iteration_s`` (the whole pipeline's iteration).
    """
    metrics, log = evaluate(res)
    gpu = f"gpu{res.placement[0][rank]}"
    p = res.point
    busy = busy_per_iteration_s(log, gpu, p.stages, p.microbatches, res.schedule.synchronous)
    peak = device_peaks(log.memory, log.capacity_bytes)[gpu]
    hidden = sum(peak.by_category.get(c, 0.0) for c in NOT_TENSORS)
    return dict(
        gpu=gpu,
        predicted_iteration_s=busy,
        predicted_peak_bytes=peak.peak_bytes - hidden,
        predicted_device_peak_bytes=peak.peak_bytes,
        pipeline_iteration_s=metrics.iteration_time_s,
    )


def single_rank_job(prep: Prepared, point: PointConfig, res: Resolved, spec: SingleRankSpec):
    """The :class:`backends.torch.job.ReplayJob` running stage ``spec.rank`` alone.

    Raises:
        InputError: as :func:`sim.validate._job` (policy the replay cannot run, no model).
    """
    from backends.torch.job import ReplayJob
    from sim.validate import ValidationSpec, _job

    vspec = ValidationSpec(
        device=spec.device,
        iterations=spec.iterations,
        warmup_iterations=spec.warmup_iterations,
        timeout_s=spec.timeout_s,
    )
    job = _job(prep, point, res, vspec, "ours").to_dict()
    attention = prep.traces[point.model].provenance.get("attention_kernel")
    return ReplayJob.from_dict(
        {**job, "single_rank": spec.rank, "nproc": 1, "attention": attention}
    )


def single_rank_row(
    point: PointConfig, rank: int, device: str, result: Any, pred: dict[str, Any]
) -> dict[str, Any]:
    """One ``validation.csv`` row (``mode = single_rank``) from a result and its prediction."""
    measured = result.iteration_time_s
    mem = result.peak_memory_bytes[0]
    reserved = result.memory[0].get("cuda_max_reserved", math.nan)
    return dict(
        mode="single_rank",
        rank=rank,
        model=point.model,
        schedule=point.schedule,
        runtime="ours",
        stages=point.stages,
        microbatch_size=point.microbatch_size,
        microbatches=point.microbatches,
        memory_policy=point.memory_policy,
        device=device,
        device_name=result.device_name,
        gpu=pred["gpu"],
        measured_iteration_s=measured,
        predicted_iteration_s=pred["predicted_iteration_s"],
        error=(pred["predicted_iteration_s"] - measured) / measured,
        measured_peak_bytes=mem,
        predicted_peak_bytes=pred["predicted_peak_bytes"],
        memory_error=(pred["predicted_peak_bytes"] - mem) / mem if mem else math.nan,
        measured_reserved_bytes=reserved,
        predicted_device_peak_bytes=pred["predicted_device_peak_bytes"],
        pipeline_iteration_s=pred["pipeline_iteration_s"],
        all_actions_done=result.all_actions_done,
        losses_finite=all(math.isfinite(x) for x in result.losses),
        measured_iterations_s=" ".join(f"{t:.4f}" for t in result.iteration_times_s),
        notes="; ".join(result.notes),
    )


def run_single_rank_validation(
    path: Path, spec: SingleRankSpec, out: Path | None, on_row=None
) -> tuple[pd.DataFrame, Path]:
    """Run stage ``spec.rank`` alone for every variant; write ``validation.csv``.

    Returns:
        The table and the path written (default: next to ``path``).

    Raises:
        InputError: as :func:`variants` and :func:`single_rank_job` (all checked before the
            first run starts).
        backends.torch.launch.ReplayError: a run failed or timed out.
    """
    from backends.torch.launch import replay

    prep, points = variants(prepare(load_experiment(path), str(path)), spec)
    planned = []
    for p in points:  # check every variant before the (slow) runs start
        res = resolve(prep.exp, p, prep.topology, prep.traces[p.model], file=prep.file)
        planned.append((p, res, single_rank_job(prep, p, res, spec)))
    dest = Path(out) if out else Path(path).parent
    check_writable(dest, option="--out", directory=True)
    rows = []
    for p, res, job in planned:
        row = single_rank_row(
            p, spec.rank, spec.device, replay(job), predict_single_rank(res, spec.rank)
        )
        rows.append(row)
        if on_row:
            on_row(row)
    df = pd.DataFrame(rows)
    atomic_write_text(dest / "validation.csv", df.to_csv(index=False))
    return df, dest / "validation.csv"

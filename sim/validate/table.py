"""One ``validation.csv`` row: a replay's measurement beside the simulator's prediction.

Columns (seconds, bytes): ``mode`` (:class:`sim.validate.spec.Mode`), ``rank`` (single rank
only), the configuration (``model, schedule, runtime, stages, tensor_parallel,
sequence_parallel, microbatch_size, microbatches, memory_policy``), ``device, device_name``,
``measured_iteration_s, predicted_iteration_s, error`` with ``error = (predicted - measured) /
measured``, ``measured_peak_bytes, predicted_peak_bytes, memory_error`` (same sign), the mode's
own columns (single rank: ``gpu, measured_reserved_bytes, predicted_device_peak_bytes,
pipeline_iteration_s``; expert and context parallel: ``dp_width, expert_parallel,
context_parallel, context_parallel_comm, loss_max_rel_diff, losses_match``, the largest
relative difference between the replay's losses and one process's on the same data, and
whether it is within :data:`LOSS_RTOL`), ``counted_peak_bytes`` (CPU: the counted peak beside
the measured one), then ``all_actions_done, losses_finite``, the numerics check against the
one-process reference (``numerics``: ``ok``, ``FAILED`` or ``skipped``; ``loss_max_error``,
``grad_max_error``: relative, worst over iterations and parameters; ``grad_worst``;
``numerics_tolerance``; ``numerics_reason`` when skipped), ``status`` (``ok``; ``failed``: the
replay raised, crashed or timed out; ``not_run``: the runtime has no such schedule) with its
``reason``, ``measured_iterations_s, notes``. A row that did not run has NaN measurements.
"""

from __future__ import annotations

import math
from typing import Any

from sim.point.config import PointConfig
from sim.replay import Measurement
from sim.validate.predict import Prediction
from sim.validate.spec import Mode

LOSS_RTOL = 1e-4
"""Relative tolerance of a parallel replay's losses against one process's (an assumption:
fp32 sums in another order; the tolerance of torch's own ``assert_close`` for fp32 is 1.3e-6,
looser here because the losses go through several SGD steps, as tests/test_ep_cp_replay.py)."""


def loss_max_rel_diff(losses: list[float], reference: list[float]) -> float:
    """Largest ``|loss - reference| / |reference|`` over the micro-batches; NaN without a
    reference or when the counts differ (``inf``).

    Example:
        >>> loss_max_rel_diff([2.0, 3.03], [2.0, 3.0])
        0.009999999999999934
    """
    if not reference:
        return math.nan
    if len(losses) != len(reference):
        return math.inf
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=True))


def _group_columns(point: PointConfig, result: Measurement) -> dict[str, Any]:
    diff = loss_max_rel_diff(result.losses, result.reference_losses)
    return dict(
        dp_width=point.dp_width,
        expert_parallel=point.expert_parallel,
        context_parallel=point.context_parallel,
        context_parallel_comm=point.context_parallel_comm,
        loss_max_rel_diff=diff,
        losses_match=bool(diff <= LOSS_RTOL),
    )


def relative_error(predicted: float, measured: float) -> float:
    """``(predicted - measured) / measured``; NaN when nothing was measured.

    Example:
        >>> relative_error(1.1, 1.0)
        0.10000000000000009
    """
    return (predicted - measured) / measured if measured else math.nan


NUMERICS = ("numerics", "loss_max_error", "grad_max_error", "grad_worst", "numerics_tolerance")


def numerics_columns(check: dict[str, Any], skipped: str | None) -> dict[str, Any]:
    """The numerics columns from a :attr:`sim.replay.Measurement.numerics` result.

    Example:
        >>> numerics_columns({}, "not asked")["numerics_reason"]
        'not asked'
    """
    if skipped or not check or check.get("numerics") == "skipped":
        reason = skipped or check.get("reason", "not run")
        return dict.fromkeys(NUMERICS, math.nan) | {
            "numerics": "skipped",
            "numerics_reason": reason,
        }
    return dict(
        numerics=check["numerics"],
        loss_max_error=check["loss_max_error"],
        grad_max_error=check["grad_max_error"],
        grad_worst=check["grad_worst"],
        numerics_tolerance=check["tolerance"],
        numerics_reason="; ".join(f"missing gradient: {x}" for x in check.get("missing", [])),
    )


def validation_row(
    mode: Mode,
    point: PointConfig,
    runtime: str,
    device: str,
    result: Measurement,
    pred: Prediction,
    rank: int | None = None,
    numerics_skipped: str | None = None,
) -> dict[str, Any]:
    """The row of one replay of ``point`` (module docstring).

    ``measured_peak_bytes`` and ``counted_peak_bytes`` are the largest rank's; ``losses_finite``
    needs at least one loss unless one rank ran alone (only the last stage computes the loss).
    """
    measured = result.iteration_time_s
    mem = max(result.peak_memory_bytes)
    counted = max(m.get("counted_peak_bytes", math.nan) for m in result.memory)
    alone = mode == Mode.SINGLE_RANK
    head: dict[str, Any] = dict(mode=str(mode)) | ({"rank": rank} if alone else {})
    extra: dict[str, Any] = {}
    if alone:
        extra = dict(
            measured_reserved_bytes=result.memory[0].get("cuda_max_reserved", math.nan),
            predicted_device_peak_bytes=pred.columns["predicted_device_peak_bytes"],
            pipeline_iteration_s=pred.columns["pipeline_iteration_s"],
        )
    elif mode in (Mode.EXPERT_PARALLEL, Mode.CONTEXT_PARALLEL):
        extra = _group_columns(point, result)
    return dict(
        **head,
        **_point_columns(point, runtime, device),
        device_name=result.device_name,
        **({"gpu": pred.columns["gpu"]} if alone else {}),
        measured_iteration_s=measured,
        predicted_iteration_s=pred.iteration_s,
        error=relative_error(pred.iteration_s, measured),
        measured_peak_bytes=mem,
        predicted_peak_bytes=pred.peak_bytes,
        memory_error=relative_error(pred.peak_bytes, mem),
        **extra,
        counted_peak_bytes=counted,
        counted_memory_error=relative_error(pred.peak_bytes, counted),
        all_actions_done=result.all_actions_done,
        losses_finite=(alone or bool(result.losses))
        and all(math.isfinite(x) for x in result.losses),
        **numerics_columns(result.numerics, numerics_skipped),
        status="ok",
        reason="",
        measured_iterations_s=" ".join(f"{t:.4f}" for t in result.iteration_times_s),
        notes="; ".join(result.notes),
    )


def _point_columns(point: PointConfig, runtime: str, device: str) -> dict[str, Any]:
    """The columns naming what was replayed, in the table's order (module docstring)."""
    return dict(
        model=point.model,
        schedule=point.schedule,
        runtime=runtime,
        stages=point.stages,
        tensor_parallel=point.tensor_parallel,
        sequence_parallel=point.sequence_parallel,
        microbatch_size=point.microbatch_size,
        microbatches=point.microbatches,
        memory_policy=point.memory_policy,
        device=device,
    )


def _unmeasured(
    mode: Mode, point: PointConfig, runtime: str, device: str, pred: Prediction
) -> dict[str, Any]:
    return dict(
        mode=str(mode),
        **_point_columns(point, runtime, device),
        device_name="",
        measured_iteration_s=math.nan,
        predicted_iteration_s=pred.iteration_s,
        error=math.nan,
        measured_peak_bytes=math.nan,
        predicted_peak_bytes=pred.peak_bytes,
        memory_error=math.nan,
        counted_peak_bytes=math.nan,
        counted_memory_error=math.nan,
        all_actions_done=False,
        losses_finite=False,
    )


def failed_row(
    mode: Mode, point: PointConfig, runtime: str, device: str, pred: Prediction, exc: Exception
) -> dict[str, Any]:
    """The row of a replay that failed (``status`` ``failed``, the error's first line as
    ``reason``; the full error is in ``notes``)."""
    text = str(exc).strip()
    return (
        _unmeasured(mode, point, runtime, device, pred)
        | numerics_columns({}, "replay failed")
        | dict(
            status="failed",
            reason=text.splitlines()[0][:300] if text else type(exc).__name__,
            measured_iterations_s="",
            notes=" | ".join(text.splitlines()[-12:]),
        )
    )


def not_run_row(
    mode: Mode, point: PointConfig, runtime: str, device: str, pred: Prediction, why: str
) -> dict[str, Any]:
    """The row of a runtime asked for that has no such schedule (``status`` ``not_run``)."""
    return (
        _unmeasured(mode, point, runtime, device, pred)
        | numerics_columns({}, "not run")
        | dict(status="not_run", reason=why, measured_iterations_s="", notes="")
    )

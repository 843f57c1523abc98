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
whether it is within :data:`LOSS_RTOL`), then ``all_actions_done, losses_finite,
measured_iterations_s, notes``.
"""

from __future__ import annotations

import math
from typing import Any

from sim.point_config import PointConfig
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


def validation_row(
    mode: Mode,
    point: PointConfig,
    runtime: str,
    device: str,
    result: Measurement,
    pred: Prediction,
    rank: int | None = None,
) -> dict[str, Any]:
    """The row of one replay of ``point`` (module docstring).

    ``measured_peak_bytes`` is the largest rank's peak; ``losses_finite`` needs at least one
    loss unless one rank ran alone (only the last stage computes the loss).
    """
    measured = result.iteration_time_s
    mem = max(result.peak_memory_bytes)
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
        device_name=result.device_name,
        **({"gpu": pred.columns["gpu"]} if alone else {}),
        measured_iteration_s=measured,
        predicted_iteration_s=pred.iteration_s,
        error=relative_error(pred.iteration_s, measured),
        measured_peak_bytes=mem,
        predicted_peak_bytes=pred.peak_bytes,
        memory_error=relative_error(pred.peak_bytes, mem),
        **extra,
        all_actions_done=result.all_actions_done,
        losses_finite=(alone or bool(result.losses))
        and all(math.isfinite(x) for x in result.losses),
        measured_iterations_s=" ".join(f"{t:.4f}" for t in result.iteration_times_s),
        notes="; ".join(result.notes),
    )

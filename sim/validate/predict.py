"""The simulator's side of ``sim validate``: what it predicts for the run being measured.

For a run of every rank (modes ``pipeline``, ``tensor_parallel``, ``multi_stage``) the
prediction is the configuration's iteration time and its largest per-GPU peak
(:class:`sim.metrics.Metrics`). For one rank alone (``single_rank``) it is read from the event
log of the whole ``P``-stage configuration:

* **time**: GPU ``R``'s busy time per steady-state iteration (:func:`busy_per_iteration_s`):
  its compute-stream spans (forward and backward, recompute, optimizer step, stalls on its
  own swaps) inside :func:`sim.metrics.steady_window`, divided by the window's optimizer steps.
  Waits for other ranks are idle gaps in the log, not spans, so they are not counted. Caveat:
  in the pipeline a swap-in can hide behind such a wait; alone it cannot, so the prediction
  may under-state ``cpu_swap`` stalls.
* **memory**: GPU ``R``'s peak (:func:`sim.memory.peak.device_peaks`). ``predicted_peak_bytes``
  is the tensor part (the peak without the ``reserve``, i.e. CUDA context, cuBLAS, NCCL, and
  without the ``allocator`` margin), which ``torch.cuda.max_memory_allocated`` measures;
  ``predicted_device_peak_bytes`` is the whole peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.events import EventKind, EventLog, MemCategory, Stream
from sim.memory.peak import device_peaks
from sim.metrics import Metrics, steady_window
from sim.point.simulate import Resolved, evaluate

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
class Prediction:
    """What the simulator predicts for one replayed run.

    Attributes:
        iteration_s: seconds per iteration (one rank alone: its busy seconds).
        peak_bytes: peak memory the replay's measurement compares with, bytes.
        metrics: the whole configuration's metrics.
        log: its event log (the predicted timeline).
        columns: further ``validation.csv`` columns of this mode (single rank: ``gpu``,
            ``predicted_device_peak_bytes``, ``pipeline_iteration_s``).
    """

    iteration_s: float
    peak_bytes: float
    metrics: Metrics
    log: EventLog
    columns: dict[str, Any] = field(default_factory=dict)


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


def single_rank_numbers(
    res: Resolved, rank: int, metrics: Metrics, log: EventLog
) -> dict[str, Any]:
    """Stage ``rank``'s numbers from ``res``'s simulation (module docstring).

    Returns:
        ``gpu``, ``predicted_iteration_s`` (busy seconds per iteration),
        ``predicted_peak_bytes`` (tensors), ``predicted_device_peak_bytes`` (with reserve and
        allocator margin) and ``pipeline_iteration_s`` (the whole pipeline's iteration).
    """
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


def predict_single_rank(res: Resolved, rank: int) -> dict[str, Any]:
    """Simulate ``res`` and return :func:`single_rank_numbers` of stage ``rank``."""
    metrics, log = evaluate(res)
    return single_rank_numbers(res, rank, metrics, log)


def predict(res: Resolved, rank: int | None = None) -> Prediction:
    """Simulate ``res`` once: the whole run's prediction, or stage ``rank``'s alone."""
    metrics, log = evaluate(res)
    if rank is None:
        return Prediction(metrics.iteration_time_s, metrics.peak_memory_bytes, metrics, log)
    numbers = single_rank_numbers(res, rank, metrics, log)
    return Prediction(
        numbers.pop("predicted_iteration_s"),
        numbers.pop("predicted_peak_bytes"),
        metrics,
        log,
        numbers,
    )

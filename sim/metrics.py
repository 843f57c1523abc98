"""From an event log to the numbers a user compares: iteration time, throughput, bubble, memory.

Steady state: the engine runs several optimizer steps; :func:`steady_window` picks the span
between two step boundaries that excludes the pipeline fill of the first steps and the drain
of the last ones, and every rate is measured over it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sim.events import (
    COLLECTIVE_KINDS,
    GROUP_KINDS,
    MEMORY_MOVE_KINDS,
    Event,
    EventKind,
    EventLog,
    Stream,
)


def iterations_needed(
    stages: int, microbatches: int, synchronous: bool, fill_microbatches: int | None = None
) -> int:
    """Iterations to simulate (or unroll) so that every steady-state pattern occurs on every
    stage: the one rule behind the engine's measuring window (:func:`steady_window`) and
    :meth:`sim.schedules.base.Schedule.steady_state_iterations` (staleness from a program).

    A flushed schedule repeats identically after one iteration, so 2 suffice (the second is
    measured). An asynchronous one fills for ``ceil(p/m)`` iterations (the first micro-batch's
    backward reaches stage 0 only after ``p`` forwards) and drains as long, around a 2-iteration
    window: ``2 ceil(p/m) + 2``. A schedule whose stage 0 runs more warm-up forwards than ``p``
    (PipeMare: ``2p + 2``) passes them as ``fill_microbatches``
    (:meth:`sim.schedules.base.Schedule.fill_microbatches`).

    Raises:
        ValueError: ``stages`` or ``microbatches`` below 1.
    """
    if stages < 1 or microbatches < 1:
        raise ValueError(f"stages and microbatches must be >= 1, got {stages}, {microbatches}")
    if synchronous:
        return 2
    fill = math.ceil((fill_microbatches or stages) / microbatches)
    return 2 * fill + 2


def steady_window(
    ends_s: list[float],
    stages: int,
    microbatches: int,
    synchronous: bool,
    fill_microbatches: int | None = None,
) -> tuple[float, float, int]:
    """``(start_s, end_s, steps)``: the measured span and how many optimizer steps it holds
    (``fill_microbatches`` as in :func:`iterations_needed`).

    Raises:
        ValueError: no optimizer step ended.
    """
    if not ends_s:
        raise ValueError("no optimizer step ended; nothing to measure")
    if synchronous or len(ends_s) < 4:
        if len(ends_s) == 1:
            return 0.0, ends_s[0], 1
        return ends_s[-2], ends_s[-1], 1
    fill = math.ceil((fill_microbatches or stages) / microbatches)
    a, b = fill - 1, len(ends_s) - 1 - fill
    if b <= a:
        a, b = 0, len(ends_s) - 1
    return ends_s[a], ends_s[b], b - a


@dataclass(frozen=True)
class Metrics:
    """What one configuration achieved.

    Attributes:
        iteration_time_s: seconds per optimizer step in steady state.
        throughput_samples_per_s: global batch / iteration time.
        bubble_fraction: share of GPU-time in the window not spent on F/B/recompute.
        peak_memory_bytes: max over GPUs of the peak bytes in use.
        peak_by_device: peak bytes per device (GPUs and hosts).
        fits: every device's peak is within its capacity.
        oom: ``(device, peak, capacity)`` for the devices that do not fit.
        swap_bytes: bytes moved by swaps and chunk moves per optimizer step.
        recompute_s: recompute seconds per optimizer step, summed over GPUs.
        stall_s: seconds compute waited on late swaps or fetches per step, summed over GPUs.
        comm_bytes: bytes of stage-boundary and collective traffic per step (a collective's
            buffer counted once per communicator: data-parallel collectives on replica 0,
            tensor-parallel ones once per group).

    A mirrored log (``meta["mirrored"]``, :mod:`sim.engine.symmetry`) holds one replica's
    tensor rank 0: the sums over GPUs (transfers, recompute, stalls) count it once per replica
    and tensor rank it stands for; times, the bubble and peaks are its own.
    """

    iteration_time_s: float
    throughput_samples_per_s: float
    bubble_fraction: float
    peak_memory_bytes: float
    peak_by_device: dict
    fits: bool
    oom: list
    swap_bytes: float
    recompute_s: float
    stall_s: float
    comm_bytes: float

    def to_frame(self) -> Any:
        """One row of a :class:`pandas.DataFrame`: every scalar metric (seconds, bytes,
        samples/s), ``fits`` and ``oom_devices`` (the devices that do not fit, comma-joined);
        the peak of each device is ``log.memory_frame()``'s to read."""
        import pandas as pd  # on first use: `import sim` stays fast

        row = {k: v for k, v in self.__dict__.items() if k not in ("peak_by_device", "oom")}
        row["oom_devices"] = ",".join(str(o[0]) for o in self.oom)
        return pd.DataFrame([row])


def compute_metrics(
    log: EventLog,
    *,
    stages: int,
    microbatches: int,
    synchronous: bool,
    samples_per_step: int,
    tensor_parallel: int = 1,
    fill_microbatches: int | None = None,
    repeated: tuple[Sequence[Event], int] | None = None,
) -> Metrics:
    """Metrics of ``log`` (see :class:`Metrics`).

    Args:
        log: the engine's event log.
        stages: pipeline depth p.
        microbatches: micro-batches per step m.
        synchronous: whether the schedule flushes each step.
        samples_per_step: global batch (m * b * w).
        tensor_parallel: ``t``: each tensor-parallel collective is logged on its ``t`` GPUs.
        fill_microbatches: stage 0's warm-up forwards when more than ``stages``
            (:func:`iterations_needed`).
        repeated: ``(events, count)``: the steady-state periods a periodic run left out of
            ``log`` (:class:`sim.engine.periodic.Repeated`): ``events`` are counted ``count`` times, inside the
            window (``log``'s iteration ends already include them).
    """
    t0, t1, steps = steady_window(
        log.iteration_ends_s, stages, microbatches, synchronous, fill_microbatches
    )
    span = max(t1 - t0, 1e-30)
    gpus = sorted({e.device for e in log.events if e.stream == Stream.COMPUTE})
    busy: dict[str, float] = {
        EventKind.COMPUTE: 0.0,
        EventKind.RECOMPUTE: 0.0,
        EventKind.STALL: 0.0,
    }
    moved = {"swap": 0.0, "comm": 0.0}
    mirror = log.meta.get("mirrored")  # sim.engine.symmetry: one replica, one tensor rank ran
    copies = mirror["replicas"] * mirror["tensor_ranks"] if mirror else 1
    tp_logged = 1 if mirror else tensor_parallel
    dp_copies = mirror["tensor_ranks"] if mirror else 1  # one DP communicator per tensor rank
    weights = (copies, tp_logged, dp_copies)
    for e in log.events:
        lo, hi = max(e.start_s, t0), min(e.end_s, t1)
        if hi <= lo and not (e.start_s == e.end_s and t0 <= e.start_s < t1):
            continue
        _account(
            e, hi - lo, (hi - lo) / e.duration_s if e.duration_s > 0 else 1.0, busy, moved, weights
        )
    if repeated is not None:  # sim.engine.periodic: whole steady-state periods left out of the log
        events, count = repeated
        for e in events:
            _account(e, e.duration_s * count, float(count), busy, moved, weights)
    n = max(len(gpus), 1)
    bubble = 1.0 - (busy[EventKind.COMPUTE] + busy[EventKind.RECOMPUTE]) / (n * span)
    peaks = dict(log.meta.get("peak_bytes", {}))
    gpu_peaks = [v for k, v in peaks.items() if k.startswith("gpu")]
    oom = list(log.meta.get("over_capacity", []))
    it = span / steps
    return Metrics(
        iteration_time_s=it,
        throughput_samples_per_s=samples_per_step / it,
        bubble_fraction=max(0.0, bubble),
        peak_memory_bytes=max(gpu_peaks, default=0.0),
        peak_by_device=peaks,
        fits=not oom,
        oom=oom,
        swap_bytes=moved["swap"] / steps,
        recompute_s=busy[EventKind.RECOMPUTE] * copies / steps,
        stall_s=busy[EventKind.STALL] * copies / steps,
        comm_bytes=moved["comm"] / steps,
    )


def _account(e: Event, busy_s: float, frac: float, busy: dict, moved: dict, weights: tuple) -> None:
    """Add ``e``'s ``busy_s`` seconds (in the window) and ``frac`` of its bytes to ``busy`` and
    ``moved`` (:func:`compute_metrics`); ``weights``: ``(copies, tp_logged, dp_copies)``."""
    copies, tp_logged, dp_copies = weights
    if e.kind in busy:
        busy[e.kind] += busy_s
    elif e.kind in MEMORY_MOVE_KINDS:
        moved["swap"] += e.nbytes * frac
    elif e.kind == EventKind.TRANSFER:
        moved["comm"] += e.nbytes * frac * copies
    elif e.kind in COLLECTIVE_KINDS and e.replica == 0:
        moved["comm"] += e.nbytes * frac * (1 / tp_logged if e.stream == Stream.TP else dp_copies)
    elif e.kind in GROUP_KINDS and e.replica == 0:  # what replica 0's tensor ranks send
        moved["comm"] += e.nbytes * frac * dp_copies  # mirrored: tensor rank 0 for all t

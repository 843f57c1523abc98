"""One point's row of ``results.csv`` and its cache key.

:func:`point_row` is the pure function the executors (:mod:`sim.plan.executors`) map over the grid:
resolve the point, simulate it, turn the metrics into a :class:`~sim.point.rows.ResultRow`. It never
raises for a point that cannot run (its row says why). :func:`point_cache_key` hashes everything
the row depends on, so the row cache (:mod:`sim.plan.rowcache`) reuses a row only when none of it
changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from functools import cache
from pathlib import Path

import sim
from sim.config import config_hash
from sim.errors import InputError
from sim.events import EventLog
from sim.memory.peak import device_peaks, row_breakdown
from sim.plan.bounds import resolved_memory_excess
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.rows import PRUNED, ROW_FORMAT, ResultRow
from sim.point.simulate import evaluate, placement_json, resolve
from sim.schedules.analysis import delay_steps
from sim.schedules.base import Schedule


@cache
def model_code_hash() -> str:
    """Hash of the simulator's own source (every ``sim/**/*.py``), part of every cache key: a
    row cached by another version of the model (engine, memory, compute) is never reused."""
    root = Path(sim.__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def point_cache_key(prep: Prepared, point: PointConfig) -> str:
    """Hash of everything the row of ``point`` depends on: the point, the trace's content, the
    hardware, the training and option settings, the row format and the simulator's code."""
    trace = prep.traces[point.model]
    exp = prep.exp
    return config_hash(
        {
            "version": sim.__version__,
            "model_code": model_code_hash(),
            "row_format": ROW_FORMAT,
            "point": point.model_dump(),
            "trace": [asdict(layer) for layer in trace.layers],
            "mb": trace.microbatch_size,
            "hardware": repr(prep.topology.gpus)
            + repr(prep.topology.links)
            + repr(prep.topology.hosts),
            "training": exp.training.model_dump(),
            "options": exp.options.model_dump(),
        }
    )


def staleness_steps(schedule: Schedule) -> int:
    """The most optimizer steps between a micro-batch's F and B on any stage (0 for a flushed
    schedule; :func:`sim.schedules.analysis.delay_steps` over the steady-state program),
    computed once per schedule class, ``p``, ``m`` and ``v``."""
    key = (type(schedule), schedule.stages, schedule.microbatches, schedule.virtual_stages)
    if key not in _STALENESS:
        program = schedule.shared_program(schedule.steady_state_iterations())
        _STALENESS[key] = max(delay_steps(program, s) for s in range(schedule.num_stages))
    return _STALENESS[key]


_STALENESS: dict[tuple, int] = {}


def pruned_row(prep: Prepared, point: PointConfig, reason: str) -> ResultRow:
    """The row of a point the planner did not simulate: no measurements, ``fits = False``,
    ``error = "pruned: " + reason``."""
    trace = prep.traces[point.model]
    return ResultRow(
        **point.model_dump(), parameters=trace.parameters, fits=False, error=PRUNED + reason
    )


def point_row(
    prep: Prepared, point: PointConfig, *, screen: bool = False
) -> tuple[ResultRow, EventLog | None]:
    """The result row of one point and the event log of its simulation (None when it was not
    simulated). Never raises for a point that cannot run: see the row's ``error``.

    With ``screen``, a point whose resolved memory lower bound exceeds a GPU's capacity
    (:func:`sim.plan.bounds.resolved_memory_excess`) is not simulated: its row has the error
    ``pruned: memory lower bound ...`` (the planner's, :mod:`sim.plan.planner`)."""
    trace = prep.traces[point.model]
    base = dict(point.model_dump(), parameters=trace.parameters)
    try:
        res = resolve(prep.exp, point, prep.topology, trace, file=prep.file, shared=prep)
        excess = resolved_memory_excess(res) if screen else None
        if excess is not None:
            gpu, need, cap = excess
            reason = (
                f"memory lower bound {need / 2**30:.2f} GiB > capacity "
                f"{cap / 2**30:.2f} GiB ({gpu}, as partitioned)"
            )
            return pruned_row(prep, point, reason), None
        met, log = evaluate(res)
    except (InputError, ValueError) as exc:
        return ResultRow(**base, fits=False, error=str(exc)), None
    oom = met.oom[0] if met.oom else None
    row = ResultRow(
        **base,
        iteration_time_s=met.iteration_time_s,
        throughput_samples_per_s=met.throughput_samples_per_s,
        bubble_fraction=met.bubble_fraction,
        peak_memory_bytes=met.peak_memory_bytes,
        fits=met.fits,
        oom_device=oom[0] if oom else "",
        oom_peak_bytes=oom[1] if oom else None,
        oom_capacity_bytes=oom[2] if oom else None,
        swap_bytes=met.swap_bytes,
        recompute_s=met.recompute_s,
        stall_s=met.stall_s,
        comm_bytes=met.comm_bytes,
        boundaries=json.dumps(list(res.boundaries)),
        placement=json.dumps(placement_json(res)),
        error="",
        policy_notes=json.dumps(log.meta.get("policy_notes", {}), default=str),
        staleness_steps=staleness_steps(res.schedule),
        attention=trace.provenance.get("attention", ""),
        **row_breakdown(device_peaks(log.memory, log.capacity_bytes)),
    )
    return row, log

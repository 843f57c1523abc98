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
import traceback
from dataclasses import asdict
from functools import cache
from pathlib import Path

import sim
from sim.compute.model_flops import FORMULA, model_flops
from sim.errors import InputError
from sim.events import EventLog
from sim.hardware.capacity import RuntimeReserve
from sim.hardware.parts import GPU
from sim.hardware.provenance import reserve_source
from sim.memory.peak import device_peaks, row_breakdown
from sim.memory.rank_memory import BUFFERS_SOURCE
from sim.memory.tensor_program import MARGIN_SOURCE
from sim.parallel.shard import model_shape
from sim.plan.bounds import resolved_memory_excess
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.rows import INTERNAL, PRUNED, ROW_FORMAT, ResultRow
from sim.point.simulate import evaluate, placement_json, resolve
from sim.schedules.analysis import delay_steps
from sim.schedules.base import Schedule
from sim.trace.origin import trace_origin


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
    hardware, the training, memory and option settings, the row format and the simulator's code (its
    source, not the package version, which changes with every commit).

    :func:`sim.config.config_hash` of those fields; all but the point are the same for every
    point of a model, so their JSON text is made once per model (:func:`_key_text_around`)
    and the point's put in its place: the same text, so the same key, at 0.1 instead of 1.8 ms
    a point (the trace's layers turned into dictionaries and JSON each time; a planner's
    batch waits for its points' keys)."""
    before, after = prep.once(
        ("cache key text", point.model), lambda: _key_text_around(prep, point.model)
    )
    point_text = json.dumps(point.model_dump(), sort_keys=True, default=str)
    return hashlib.sha256((before + point_text + after).encode()).hexdigest()


_POINT_SLOT = "\x00point\x00"
"""Stands for the point in the cache key's fields (no field holds a NUL character)."""


def _key_text_around(prep: Prepared, model: str) -> tuple[str, str]:
    """The JSON text that :func:`sim.config.config_hash` hashes for a point of ``model``, cut
    where the point's own text goes: ``(before, after)``."""
    trace = prep.traces[model]
    exp = prep.exp
    fields = {
        "model_code": model_code_hash(),
        "row_format": ROW_FORMAT,
        "point": _POINT_SLOT,
        "trace": [asdict(layer) for layer in trace.layers],
        "mb": trace.microbatch_size,
        "hardware": repr(prep.topology.gpus)
        + repr(prep.topology.links)
        + repr(prep.topology.hosts),
        "training": exp.training.model_dump(),
        "memory": exp.memory.model_dump(),
        "options": exp.options.model_dump(),
    }
    text = json.dumps(fields, sort_keys=True, default=str)
    before, after = text.split(f'"point": {json.dumps(_POINT_SLOT)}', 1)
    return before + '"point": ', after


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
        **point.model_dump(),
        parameters=trace.parameters,
        trace_origin=trace_origin(trace),
        fits=False,
        error=PRUNED + reason,
    )


def point_row(
    prep: Prepared, point: PointConfig, *, screen: bool = False
) -> tuple[ResultRow, EventLog | None]:
    """The result row of one point and the event log of its simulation (None when it was not
    simulated). Never raises for a point that cannot run: see the row's ``error``; an
    unexpected exception (a bug, not bad input) becomes a row whose error starts with
    :data:`~sim.point.rows.INTERNAL` (:func:`failed_row`), so one point never ends a sweep.

    With ``screen``, a point whose resolved memory lower bound exceeds a GPU's capacity
    (:func:`sim.plan.bounds.resolved_memory_excess`) is not simulated: its row has the error
    ``pruned: memory lower bound ...`` (the planner's, :mod:`sim.plan.planner`)."""
    try:
        return _point_row(prep, point, screen)
    except Exception as exc:  # noqa: BLE001 - a bug in one point must not end the sweep
        return failed_row(prep, point, exc), None


def failed_row(prep: Prepared, point: PointConfig, exc: BaseException) -> ResultRow:
    """The row of a point whose simulation raised ``exc`` unexpectedly: no measurements,
    ``fits = False``, ``error = "internal error: <type>: <message> (<file>:<line> in <function>)"``
    on one line (the innermost frame of the traceback, for a bug report)."""
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        frame = tb[-1]
        where = f" ({Path(frame.filename).name}:{frame.lineno} in {frame.name})"
    message = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
    trace = prep.traces.get(point.model)
    return ResultRow(
        **point.model_dump(),
        parameters=trace.parameters if trace is not None else 0,
        trace_origin=trace_origin(trace) if trace is not None else "",
        fits=False,
        error=INTERNAL + message + where,
    )


def _point_row(
    prep: Prepared, point: PointConfig, screen: bool
) -> tuple[ResultRow, EventLog | None]:
    """:func:`point_row` without the guard against unexpected exceptions."""
    trace = prep.traces[point.model]
    base = dict(point.model_dump(), parameters=trace.parameters, trace_origin=trace_origin(trace))
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
    breakdown = row_breakdown(device_peaks(log.memory, log.capacity_bytes))
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
        **breakdown,
        peak_reserve_source=_tightest_reserve_source(prep, breakdown["tightest_gpu"]),
        **flops_figures(prep, point, met.iteration_time_s),
        simulated_as=simulated_as(res.sim_input.mirrored, point.layout.gpus, log),
    )
    return row, log


def simulated_as(mirrored: bool, gpus: int, log: EventLog) -> str:
    """How the engine ran a point of ``gpus`` GPUs: ``"every GPU"`` or ``"mirrored: replica
    0, tensor rank 0 of N GPUs"`` (:mod:`sim.engine.symmetry`; ``options.simulation``, ``auto``
    mirrors above 64 GPUs), then ``"; steady state once"`` where steady-state periods were
    inserted into the log (its ``periodic_gaps_s``, :mod:`sim.engine.periodic`).

    >>> simulated_as(True, 256, EventLog(meta={"periodic_gaps_s": [[1.0, 2.0]]}))
    'mirrored: replica 0, tensor rank 0 of 256 GPUs; steady state once'
    >>> simulated_as(False, 8, EventLog())
    'every GPU'
    """
    out = f"mirrored: replica 0, tensor rank 0 of {gpus} GPUs" if mirrored else "every GPU"
    if "periodic_gaps_s" in log.meta:
        out += "; steady state once"
    return out


def peak_flops(gpu: GPU, dtype: str) -> float:
    """A GPU's dense peak FLOP/s at ``dtype`` (datasheet): the fp32 (non-tensor-core) peak for
    fp32, else the fp16/bf16 tensor peak (:attr:`~sim.hardware.parts.GPU.peak_flops`)."""
    if dtype == "fp32" and gpu.compute is not None:
        return gpu.compute.fp32_flops
    return gpu.peak_flops


def flops_figures(
    prep: Prepared, point: PointConfig, iteration_s: float
) -> dict[str, float | str | None]:
    """``iteration_flops``, ``flops_per_s_per_gpu``, ``mfu`` and ``flops_source`` of a simulated point
    (:class:`~sim.point.rows.ResultRow`): Megatron-LM's model FLOPs of the global batch
    (:func:`sim.compute.model_flops.model_flops`) over the iteration time and the point's GPUs,
    and that over the peak of its first GPU at the trace's dtype (:func:`peak_flops`). None
    for a trace without a transformer shape."""
    trace = prep.traces[point.model]
    shape = model_shape(trace)
    flops = model_flops(shape, point.global_batch) if shape else None
    if flops is None or not iteration_s > 0:
        none = {"flops_per_s_per_gpu": None, "mfu": None}
        return {"iteration_flops": flops, **none, "flops_source": ""}
    gpus = point.layout.gpus
    per_gpu = flops / iteration_s / gpus
    gpu = prep.topology.gpus[0]
    peak = peak_flops(gpu, trace.dtype)
    return {
        "iteration_flops": flops,
        "flops_per_s_per_gpu": per_gpu,
        "mfu": per_gpu / peak,
        "flops_source": flops_source(gpu, trace.dtype),
    }


def flops_source(gpu: GPU, dtype: str) -> str:
    """Where a row's ``iteration_flops`` and ``mfu`` come from: the FLOP count's formula
    (:data:`sim.compute.model_flops.FORMULA`) and the peak MFU divides by, e.g. ``"...; peak:
    V100-SXM2-16GB's 125 TFLOP/s fp16 dense peak (datasheet, the hardware description)"``."""
    peak = peak_flops(gpu, dtype)
    return (
        f"{FORMULA}; peak: {gpu.model}'s {peak / 1e12:.4g} TFLOP/s {dtype} dense peak "
        "(datasheet, the hardware description)"
    )


def peak_reserve_source(rv: RuntimeReserve) -> str:
    """Where a row's ``peak_reserve_bytes`` comes from: the three ledger categories it sums
    (:data:`sim.memory.peak.ROW_CATEGORIES`), each with its source, e.g. ``"runtime reserve:
    CUDA context 400 MiB: assumption (...); NCCL buffers ...; allocator margin: ...
    CUDACachingAllocator rules (...); framework buffers: ..."``.

    Args:
        rv: the tightest GPU's :class:`~sim.hardware.capacity.RuntimeReserve`.

    Returns:
        One line: the runtime reserve's :func:`sim.hardware.provenance.reserve_source`, the
        allocator margin's (:data:`sim.memory.tensor_program.MARGIN_SOURCE` when the margin is
        the replay of PyTorch's allocator; else the description's fixed share, or none) and the
        framework buffers' (:data:`sim.memory.rank_memory.BUFFERS_SOURCE`, none when the GPU
        counts tensors only).
    """
    if rv.replays_allocator:
        margin = MARGIN_SOURCE
    elif rv.allocator_margin:
        margin = (
            f"allocator margin: {rv.allocator_margin:g} x the activation bytes "
            "(set by the hardware description)"
        )
    else:
        margin = "allocator margin: none (this GPU's description sets it to 0)"
    buffers = BUFFERS_SOURCE if rv.working else "framework buffers: none (tensors only)"
    return f"runtime reserve: {reserve_source(rv)}; {margin}; {buffers}"


def _tightest_reserve_source(prep: Prepared, tightest_gpu: str) -> str:
    """:func:`peak_reserve_source` of the GPU node ``tightest_gpu`` (``gpu3``); "" without one."""
    if not tightest_gpu.startswith("gpu"):
        return ""
    return peak_reserve_source(prep.topology.gpu(int(tightest_gpu[3:])).reserve)

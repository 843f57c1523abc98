"""Grid expansion, cached parallel evaluation and winner selection.

Every grid point is a pure function of its configuration, so its result row is cached under a
hash of everything it depends on (the point, the trace's content, the hardware, the training
and option settings, the pipesim version). A second ``sim run`` reuses the rows it can.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import sim
from sim.bounds import resolved_memory_excess
from sim.config import MAX_MICROBATCHES, ExperimentConfig, PointConfig, as_list, config_hash
from sim.errors import InputError
from sim.framework.base import Framework
from sim.framework.registry import get_framework
from sim.hardware.loader import load_hardware
from sim.hardware.topology import Topology
from sim.memory.attention import with_attention
from sim.memory.peak import device_peaks, row_breakdown
from sim.memory.per_stage import SEPARATOR
from sim.memory.registry import get_policy
from sim.point import check_schedule_name, evaluate, placement_json, resolve
from sim.rowcache import PRUNED, ROW_FORMAT, run_points
from sim.rows import ResultRow, pick_winner
from sim.schedules.registry import get_schedule
from sim.sweep_axes import boundaries_reason, schedule_axis, virtual_reason
from sim.sweep_parallel import is_decoder_model, overlap_invalid, parallel_axes, parallel_invalid
from sim.tensor.decoder_shard import Parallel
from sim.tensor.shard import model_shape, shape_problem
from sim.trace.loader import load_trace
from sim.trace.schema import Trace

__all__ = [
    "Prepared",
    "ResultRow",
    "evaluate_row",
    "expand",
    "pick_winner",
    "prepare",
    "run_points",
]

MAX_GRID = 100_000
"""Most grid combinations (all models) expanded. An assumption bounding a sweep's time: the
shipped dgx1.yaml has 810."""


@cache
def model_code_hash() -> str:
    """Hash of the simulator's own source (every ``sim/**/*.py``), part of every cache key: a
    row cached by another version of the model (engine, memory, compute) is never reused."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@dataclass
class Prepared:
    """An experiment with its hardware and traces loaded."""

    exp: ExperimentConfig
    file: str
    topology: Topology
    traces: dict[str, Trace]


def prepare(exp: ExperimentConfig, file: str) -> Prepared:
    """Load the hardware and every model's trace.

    Raises:
        InputError: unknown preset, unreadable trace (naming the file and field).
    """
    topo = load_hardware(exp.hardware, file=file, field="hardware")
    base = Path(file).parent if file else None
    traces = {}
    for i, model in enumerate(exp.models):
        trace = load_trace(model.trace, base_dir=base, file=file, field=f"models.{i}.trace")
        if exp.training.dtype:
            trace = trace.with_dtype(exp.training.dtype)
        traces[model.name] = with_attention(trace)[0]
    return Prepared(exp, file, topo, traces)


def expand(prep: Prepared) -> tuple[list[PointConfig], list[tuple[str, str]]]:
    """All valid grid points, and ``(point, reason)`` for the combinations skipped.

    Raises:
        InputError: an unknown schedule or memory policy name (naming the field), or no
            combination is valid (the reasons are listed); when the grid is a single point,
            the reason that point is invalid.
    """
    exp, file = prep.exp, prep.file
    sw = exp.sweep
    check_options(prep)
    framework = check_framework(exp.framework, file)
    for i, name in enumerate(as_list(sw.schedule)):
        check_schedule_name(name, file=file, field=f"sweep.schedule.{i}")
    policies = _policy_axis(exp, file)
    tps, sps = _tensor_axes(prep)
    par_axes = parallel_axes(prep)
    size = sum(
        len(as_list(sw.schedule))
        * len(as_list(sw.virtual_stages))
        * len(as_list(sw.stages))
        * len(as_list(sw.dp_width))
        * len(tps)
        * len(sps)
        * len(par_axes)
        * len(as_list(m.microbatch_size if m.microbatch_size is not None else sw.microbatch_size))
        * len(policies)
        for m in exp.models
    )
    if size > MAX_GRID:
        raise InputError(
            f"the grid has {size:,} combinations, more than the {MAX_GRID:,} "
            "simulated; shorten its lists",
            file=file,
            field="sweep",
        )
    points, skipped = [], []
    for _mi, model in enumerate(exp.models):
        gb = model.global_batch or exp.training.global_batch
        mbs = as_list(
            model.microbatch_size if model.microbatch_size is not None else sw.microbatch_size
        )
        axes = itertools.product(
            schedule_axis(sw),
            as_list(sw.stages),
            as_list(sw.dp_width),
            tps,
            sps,
            par_axes,
            mbs,
            policies,
        )
        for (sched, v), p, w, t, sp, (ep, cp, cpc, ov), b, policy in axes:
            tp_desc = f" t={t}{'+sp' if sp else ''}" if t > 1 or sp else ""
            vs = f" v={v}" if v > 1 else ""
            par = (f" ep={ep}" if ep > 1 else "") + (f" cp={cp} ({cpc})" if cp > 1 else "")
            par += " overlap" if ov else ""
            desc = f"{model.name} {sched} p={p}{vs} w={w}{tp_desc}{par} b={b} {policy}"
            reason = (
                _invalid(prep, model.name, sched, p, w * t * cp, b, gb, w, framework)
                or parallel_invalid(prep, _mi, Parallel(t, sp, cp, ep, cpc), w, policy)
                or overlap_invalid(sched, ov, ep, cp)
                or _tensor_invalid(prep, _mi, t, sp)
                or boundaries_reason(prep, p * v)
                or virtual_reason(prep, model.name, sched, p, v, gb // (w * b), framework)
                or _stage_count(policy, p * v)
                or _asynchronous(sw, sched)
            )
            if reason:
                skipped.append((desc, reason))
                continue
            points.append(
                PointConfig(
                    model=model.name,
                    schedule=sched,
                    stages=p,
                    dp_width=w,
                    tensor_parallel=t,
                    sequence_parallel=sp,
                    microbatch_size=b,
                    microbatches=gb // (w * b),
                    memory_policy=policy,
                    global_batch=gb,
                    virtual_stages=v,
                    expert_parallel=ep,
                    context_parallel=cp,
                    context_parallel_comm=cpc,
                    routing=model.routing,
                    ep_overlap=ov,
                    framework=framework.name,
                )
            )
    if not points:
        if len(skipped) == 1:
            raise InputError(skipped[0][1], file=file, field="sweep")
        reasons = sorted({r for _, r in skipped})
        raise InputError(
            "no valid configuration in the grid: " + "; ".join(reasons[:5]),
            file=file,
            field="sweep",
        )
    return points, skipped


def _policy_axis(exp: ExperimentConfig, file: str) -> list[str]:
    """The memory-policy specs of the grid, validated (``options.stage_policies`` makes one
    per-stage spec).

    Raises:
        InputError: an unknown policy or bad parameter, naming the field.
    """
    per_stage = exp.options.stage_policies
    if per_stage is not None:
        if "memory_policy" in exp.sweep.model_fields_set:
            raise InputError(
                "set either sweep.memory_policy or options.stage_policies, not both",
                file=file,
                field="options.stage_policies",
            )
        specs, field = list(per_stage), "options.stage_policies"
    else:
        specs, field = as_list(exp.sweep.memory_policy), "sweep.memory_policy"
    for i, spec in enumerate(specs):
        if SEPARATOR in spec and per_stage is not None:
            raise InputError(
                "one policy per entry ('|' joins stages only in sweep.memory_policy)",
                file=file,
                field=f"{field}.{i}",
            )
        try:
            get_policy(spec)
        except (KeyError, ValueError) as exc:
            raise InputError(str(exc.args[0]), file=file, field=f"{field}.{i}") from None
    return [SEPARATOR.join(specs)] if per_stage is not None else specs


def check_framework(name: str, file: str = "<experiment>") -> Framework:
    """The framework profile named by the experiment's ``framework:``.

    Raises:
        InputError: an unknown name, listing the valid ones (field ``framework``).
    """
    try:
        return get_framework(name)
    except KeyError as exc:
        raise InputError(str(exc), file=file, field="framework") from None


def _asynchronous(sw, sched: str) -> str:
    if getattr(sw, "synchronous_only", False) and not get_schedule(sched).synchronous:
        return f"{sched} updates with stale weights and sweep.synchronous_only is set"
    return ""


def check_options(prep: Prepared) -> None:
    """Check ``options.boundaries`` and ``options.placement`` against every model and the
    hardware before anything is simulated (their length is matched per point in :func:`expand`).

    Raises:
        InputError: a boundary out of range, not starting at 0 or not increasing; a placement
            that is not rectangular, names a GPU the hardware lacks, or uses one twice.
    """
    opts, file = prep.exp.options, prep.file
    if opts.boundaries is not None:
        b = opts.boundaries
        layers = min((len(t.layers), name) for name, t in prep.traces.items())
        if not b or b[0] != 0:
            raise InputError(
                "the first stage must start at layer 0", file=file, field="options.boundaries.0"
            )
        for i in range(1, len(b)):
            if b[i] <= b[i - 1]:
                raise InputError(
                    f"{b[i]} is not after {b[i - 1]}: stage start layers must increase",
                    file=file,
                    field=f"options.boundaries.{i}",
                )
            if b[i] >= layers[0]:
                raise InputError(
                    f"layer {b[i]} does not exist: model {layers[1]} has "
                    f"{layers[0]} layers (0..{layers[0] - 1})",
                    file=file,
                    field=f"options.boundaries.{i}",
                )
    if opts.placement is not None:
        n = prep.topology.num_gpus
        rows = opts.placement
        if not rows or any(len(r) != len(rows[0]) or not r for r in rows):
            raise InputError(
                "must be a non-empty list of equally long rows [replica][stage]",
                file=file,
                field="options.placement",
            )
        seen: dict[int, str] = {}
        for r, row in enumerate(rows):
            for s, g in enumerate(row):
                where = f"options.placement.{r}.{s}"
                if not 0 <= g < n:
                    raise InputError(
                        f"GPU {g} does not exist: {prep.topology.name} has GPUs 0..{n - 1}",
                        file=file,
                        field=where,
                    )
                if g in seen:
                    raise InputError(
                        f"GPU {g} is already used at {seen[g]}", file=file, field=where
                    )
                seen[g] = where


def _stage_count(policy: str, p: int) -> str:
    n = policy.count(SEPARATOR) + 1
    if n > 1 and n != p:
        return f"memory policy {policy!r} names {n} stages but this point has {p}"
    return ""


def _tensor_axes(prep: Prepared) -> tuple[list[int], list[bool]]:
    """The ``tensor_parallel`` and ``sequence_parallel`` axes, checked against the hardware.

    Raises:
        InputError: a tensor-parallel size that does not divide the GPUs of every server (a
            group never spans servers), or a model whose trace has no model shape while some
            size is above 1 (naming ``models.<i>.trace``).
    """
    sw, file, topo = prep.exp.sweep, prep.file, prep.topology
    tps = as_list(sw.tensor_parallel)
    for i, t in enumerate(tps):
        sizes = sorted({len(server) for server in topo.servers})
        if any(n % t for n in sizes):
            raise InputError(
                f"tensor_parallel {t} must divide the GPUs of each server of {topo.name} "
                f"({'/'.join(map(str, sizes))}): a tensor-parallel group stays in one server",
                file=file,
                field=f"sweep.tensor_parallel.{i}"
                if isinstance(sw.tensor_parallel, list)
                else "sweep.tensor_parallel",
            )
    if max(tps) > 1:
        for i, model in enumerate(prep.exp.models):
            if model_shape(prep.traces[model.name]) is None:
                raise InputError(
                    shape_problem(prep.traces[model.name], max(tps), False),
                    file=file,
                    field=f"models.{i}.trace",
                )
    return tps, as_list(sw.sequence_parallel)


def _tensor_invalid(prep: Prepared, mi: int, t: int, sp: bool) -> str:
    if sp and t == 1:
        return "sequence parallelism needs tensor_parallel > 1"
    if t > 1 and prep.exp.options.placement is not None:
        return "options.placement names one GPU per stage; with tensor_parallel > 1 the "
        "placement is automatic (sim.tensor.groups)"
    if is_decoder_model(prep, mi):  # checked by parallel_invalid
        return ""
    return shape_problem(prep.traces[prep.exp.models[mi].name], t, sp)


def _invalid(
    prep: Prepared,
    model: str,
    sched: str,
    p: int,
    gpus_per_stage: int,
    b: int,
    gb: int,
    w: int | None = None,
    framework: Framework | None = None,
) -> str:
    """Why a combination cannot run, or ``""``; ``gpus_per_stage`` is ``w * t`` (data-parallel
    width times tensor-parallel size), ``w`` the data-parallel width (default: the same);
    ``framework`` says which schedules run and with ``m < p`` (default: the experiment's)."""
    n = prep.topology.num_gpus
    w = gpus_per_stage if w is None else w
    if p * gpus_per_stage > n:
        what = "stages x dp_width" + (" x tensor_parallel" if gpus_per_stage != w else "")
        return f"{what} = {p * gpus_per_stage} exceeds the {n} GPUs of {prep.topology.name}"
    if gb % (w * b):
        return (
            f"global batch {gb} is not divisible by dp_width x microbatch_size = {w * b} "
            f"(change training.global_batch or sweep.microbatch_size)"
        )
    m = gb // (w * b)
    if m > MAX_MICROBATCHES:
        return (
            f"global batch {gb} / (dp_width {w} x microbatch_size {b}) = {m} micro-batches "
            f"per iteration, more than the {MAX_MICROBATCHES} simulated (raise "
            "microbatch_size or lower global_batch)"
        )
    opts = prep.exp.options
    if opts.placement is not None and (len(opts.placement), len(opts.placement[0])) != (w, p):
        return (
            f"options.placement is {len(opts.placement)} x {len(opts.placement[0])} "
            f"(replicas x stages), not {w} x {p}"
        )
    cls = get_schedule(sched)  # the name was checked by expand()
    framework = framework or check_framework(prep.exp.framework, prep.file)
    why = framework.schedule_reason(cls)
    if why:
        return why
    if m < p and not framework.runs_fewer_microbatches(cls):
        return (
            f"{cls.name} needs microbatches >= stages, but global batch {gb} / "
            f"(dp_width {w} x microbatch_size {b}) = {m} < {p} stages"
        )
    if p > len(prep.traces[model].layers):
        return f"{p} stages but {model} has only {len(prep.traces[model].layers)} layers"
    return ""


def point_cache_key(prep: Prepared, point: PointConfig) -> str:
    """Hash of everything the row depends on."""
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


def evaluate_row(prep: Prepared, point: PointConfig, screen: bool = False) -> ResultRow:
    """The result row of one point (never raises for a point that cannot run: see ``error``).

    With ``screen``, a point whose resolved memory lower bound exceeds a GPU's capacity
    (:func:`sim.bounds.resolved_memory_excess`) is not simulated: its row has the error
    ``pruned: memory lower bound ...`` (the planner's, :mod:`sim.planner`)."""
    trace = prep.traces[point.model]
    base = dict(point.model_dump(), parameters=trace.parameters)
    try:
        res = resolve(prep.exp, point, prep.topology, trace, file=prep.file)
        excess = resolved_memory_excess(res) if screen else None
        if excess is not None:
            gpu, need, cap = excess
            return ResultRow(
                **base,
                fits=False,
                error=f"{PRUNED}memory lower bound {need / 2**30:.2f} GiB > capacity "
                f"{cap / 2**30:.2f} GiB ({gpu}, as partitioned)",
            )
        met, log = evaluate(res)
    except (InputError, ValueError) as exc:
        return ResultRow(**base, fits=False, error=str(exc))
    oom = met.oom[0] if met.oom else None
    return ResultRow(
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
        staleness_steps=max(res.schedule.delay_steps(s) for s in range(res.schedule.num_stages)),
        attention=trace.provenance.get("attention", ""),
        **row_breakdown(device_peaks(log.memory, log.capacity_bytes)),
    )

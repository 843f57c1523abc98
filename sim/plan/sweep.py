"""Grid expansion: every valid combination of an experiment's sweep axes, as grid points.

:func:`expand` takes the product of the axes (schedule x virtual stages, stages, data-parallel
width, tensor parallelism, micro-batch size, memory policy: :mod:`sim.plan.policy_axis`) per
model, checks each combination against the hardware, the trace and the schedule's rules
(:mod:`sim.plan.axes`) and returns the valid points and why the others were skipped. Sequence
parallelism is a refinement of tensor parallelism: at ``tensor_parallel: 1`` it is simply off
(``sequence_parallel: true`` keeps the ``t = 1`` points, with it off; listed once when the axis
is ``[false, true]``). The planner (:mod:`sim.plan.planner`) decides which of them to simulate.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from sim.config import MAX_GRID, MAX_MICROBATCHES, ExperimentConfig, SweepConfig
from sim.errors import InputError
from sim.framework.base import Framework
from sim.framework.registry import get_framework
from sim.parallel.layout import ParallelLayout
from sim.parallel.shard import shape_problem
from sim.plan.axes import (
    boundaries_reason,
    model_axes,
    schedule_axis,
    tensor_axes,
    virtual_reason,
)
from sim.plan.option_checks import check_options
from sim.plan.parallel_axes import (
    is_decoder_model,
    overlap_invalid,
    parallel_axes,
    parallel_invalid,
    shard_reason,
    sharding_invalid,
)
from sim.plan.policy_axis import Policy, policy_axis, stage_count_reason
from sim.plan.precision_axis import precision_axis, precision_invalid
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.schedules.base import Schedule
from sim.trace.t5 import is_t5


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
    schedules = [schedule_axis(sw, file, m, i) for i, m in enumerate(exp.models)]
    policies = policy_axis(exp, file)
    tps, sps = tensor_axes(prep)
    par_axes = parallel_axes(prep)
    precisions = precision_axis(prep)
    per_model = [
        len(s) * len(t) * len(sps) * len(par_axes) * len(policies) * len(precisions)
        for s, t in zip(schedules, tps, strict=True)
    ]
    _check_size(exp, per_model, file)
    points: list[PointConfig] = []
    skipped: list[tuple[str, str]] = []
    axes = _Axes(framework, schedules, tps, sps, par_axes, policies, precisions)
    for mi in range(len(exp.models)):
        _model_points(prep, mi, axes, points, skipped)
    if not points:
        if len(skipped) == 1:
            raise InputError(skipped[0][1], file=file, field=_grid_field(exp))
        reasons = sorted({r for _, r in skipped})
        raise InputError(
            "no valid configuration in the grid: " + "; ".join(reasons[:5]),
            file=file,
            field=_grid_field(exp),
        )
    return points, skipped


MODEL_LAYOUT = ("stages", "tensor_parallel", "dp_width")
"""A model entry's own layout keys that count GPUs (they replace the sweep's for it)."""


def _grid_field(exp: ExperimentConfig) -> str:
    """Where a grid with no valid configuration is written: the one model's entry when it
    sets its own layout and the sweep none (``models.0``: "field 'sweep'" sent the user to a
    sweep that set nothing), else ``sweep``."""
    in_sweep = set(exp.sweep.model_fields_set) & {*MODEL_LAYOUT, "gpus"}
    if (
        len(exp.models) == 1
        and not in_sweep
        and any(getattr(exp.models[0], k, None) is not None for k in MODEL_LAYOUT)
    ):
        return "models.0"
    return "sweep"


def _check_size(exp: ExperimentConfig, per_model: list[int], file: str) -> None:
    """``per_model``: each model's count over the axes not in :func:`model_axes`.

    Raises:
        InputError: the grid has more than :data:`~sim.config.MAX_GRID` combinations.
    """
    sw = exp.sweep
    size = sum(
        len(stages) * len(widths) * len(mbs) * n
        for (stages, widths, mbs), n in zip(
            map(model_axes, exp.models, [sw] * len(exp.models)), per_model, strict=True
        )
    )
    if size > MAX_GRID:
        raise InputError(
            f"the grid has {size:,} combinations, more than the {MAX_GRID:,} "
            "simulated; shorten its lists",
            file=file,
            field="sweep",
        )


@dataclass(frozen=True)
class _Axes:
    """The grid's axes, each value parsed once: the framework profile, ``(schedule class,
    name as written, virtual stages)`` (per model), tensor (per model) and sequence parallelism, ``(expert parallel,
    context parallel, its comm kind, overlap)``, ``(memory policy as written, policy)`` and the
    precisions (:mod:`sim.plan.precision_axis`)."""

    framework: Framework
    schedules: list[list[tuple[type[Schedule], str, int]]]
    tps: list[list[int]]
    sps: list[bool]
    parallel: list[tuple[int, int, str, bool, int | None, int]]
    policies: list[Policy]
    precisions: list[str]


def _model_points(
    prep: Prepared,
    mi: int,
    axes: _Axes,
    points: list[PointConfig],
    skipped: list[tuple[str, str]],
) -> None:
    """Append model ``mi``'s valid points to ``points`` and ``(point, reason)`` of the others
    to ``skipped``, in the order of the axes."""
    # Long: the grid loop and its reason chain read as one; reasons are functions.
    exp, sw, model = prep.exp, prep.exp.sweep, prep.exp.models[mi]
    gb = model.global_batch or exp.training.global_batch
    stages, widths, mbs = model_axes(model, sw)
    grid = itertools.product(
        axes.schedules[mi],
        stages,
        widths,
        axes.tps[mi],
        axes.sps,
        axes.parallel,
        mbs,
        axes.policies,
        axes.precisions,
    )
    for (cls, sched, v), p, w, t, sp, par, b, (text, policy), prec in grid:
        ep, cp, cpc, ov, etp, shard = par
        if sp and t == 1:  # sequence parallelism is simply off without tensor parallelism
            if False in axes.sps:
                continue  # the same point as sequence_parallel false: listed once
            sp = False
        w = w or (sw.gpus or 0) // (p * t * cp)  # sweep.gpus: the width that fills them
        shard = w if shard == -1 else shard
        lay = ParallelLayout(
            pp=p,
            vp=v,
            dp_replicate=max(1, w // shard),
            dp_shard=shard,
            cp=cp,
            tp=t,
            sp=sp,
            ep=ep,
            etp=etp,
            cp_comm=cpc,
        )
        reason = (
            _gpus_reason(sw.gpus, p, t, cp)
            or shard_reason(w, shard)
            or _invalid(prep, model.name, cls, p, w * t * cp, b, gb, w, axes.framework)
            or parallel_invalid(prep, mi, lay, policy)
            or sharding_invalid(lay, policy, axes.framework, cls)
            or overlap_invalid(cls, ov, ep, cp)
            or _tensor_invalid(prep, mi, t, sp)
            or boundaries_reason(prep, p * v)
            or virtual_reason(prep, model.name, cls, p, v, gb // (w * b), axes.framework)
            or stage_count_reason(text, policy, p * v)
            or _asynchronous(sw, cls)
            or precision_invalid(prep, prec, policy, axes.framework)
        )
        if reason:
            skipped.append((_skipped_name(model.name, sched, lay, w, b, text, ov, prec), reason))
            continue
        points.append(
            PointConfig(
                model=model.name,
                schedule=sched,
                **_flat(lay),
                microbatch_size=b,
                microbatches=gb // (w * b),
                memory_policy=text,
                global_batch=gb,
                routing=model.routing,
                ep_overlap=ov,
                framework=axes.framework.spec,
                precision=prec,
            )
        )


def _skipped_name(
    model: str,
    schedule: str,
    lay: ParallelLayout,
    w: int,
    b: int,
    policy: str,
    overlap: bool,
    precision: str | None,
) -> str:
    """How ``sim run`` names a skipped point: ``model schedule p=.. [v=..] w=.. [t=..[+sp]]``
    then the expert, context, sharding, overlap and precision axes that are not their default,
    the micro-batch size ``b`` and the memory policy (``w``: the data-parallel width)."""
    p, v, t, sp, ep, cp = lay.pp, lay.vp, lay.tp, lay.sp, lay.ep, lay.cp
    tp_desc = f" t={t}{'+sp' if sp else ''}" if t > 1 or sp else ""
    vs = f" v={v}" if v > 1 else ""
    desc_par = (f" ep={ep}" if ep > 1 else "") + (f" cp={cp} ({lay.cp_comm})" if cp > 1 else "")
    desc_par += f" etp={lay.etp}" if lay.etp is not None else ""
    desc_par += f" shard={lay.dp_shard}" if lay.dp_shard > 1 else ""
    desc_par += " overlap" if overlap else ""
    desc_par += f" {precision}" if precision else ""
    return f"{model} {schedule} p={p}{vs} w={w}{tp_desc}{desc_par} b={b} {policy}"


def skip_kinds(skipped: list[tuple[str, str]]) -> list[tuple[int, str]]:
    """The reasons of ``skipped`` grouped by kind (the reason with its numbers blanked),
    most frequent first: ``(count, the first reason of the kind)``.

    Example:
        >>> skip_kinds([("a", "8 exceeds the 4 GPUs"), ("b", "16 exceeds the 4 GPUs"),
        ...             ("c", "1f1b needs more")])
        [(2, '8 exceeds the 4 GPUs'), (1, '1f1b needs more')]
    """
    kinds: dict[str, list] = {}
    for _, reason in skipped:
        kind = _NUMBER.sub("#", reason)
        kinds.setdefault(kind, [0, reason])[0] += 1
    return sorted(((n, r) for n, r in kinds.values()), key=lambda x: -x[0])


_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def _flat(lay: ParallelLayout) -> dict:
    """``lay``'s flat fields that a :class:`PointConfig` has."""
    return {k: v for k, v in lay.flat().items() if k in PointConfig.model_fields}


def _gpus_reason(gpus: int | None, p: int, t: int, cp: int) -> str:
    """Why ``p`` stages of ``t x cp`` GPUs cannot fill ``sweep.gpus`` exactly, or ``""``."""
    if gpus is None or gpus % (p * t * cp) == 0:
        return ""
    return f"sweep.gpus {gpus} is not a multiple of stages x t x cp = {p * t * cp}"


def check_framework(name: str, file: str = "<experiment>") -> Framework:
    """The framework profile named by the experiment's ``framework:``.

    Raises:
        InputError: an unknown name, listing the valid ones (field ``framework``).
    """
    try:
        return get_framework(name)
    except KeyError as exc:
        raise InputError(str(exc), file=file, field="framework") from None


def _asynchronous(sw: SweepConfig, cls: type[Schedule]) -> str:
    if sw.synchronous_only and not cls.synchronous:
        return f"{cls.name} updates with stale weights and sweep.synchronous_only is set"
    return ""


def _tensor_invalid(prep: Prepared, mi: int, t: int, sp: bool) -> str:
    if t > 1 and prep.exp.options.placement is not None:
        return "options.placement names one GPU per stage; with tensor_parallel > 1 the "
        "placement is automatic (sim.parallel.groups)"
    if is_decoder_model(prep, mi):  # checked by parallel_invalid
        return ""
    return shape_problem(prep.traces[prep.exp.models[mi].name], t, sp)


def _batch_field(prep: Prepared, model: str) -> str:
    """Where ``model``'s global batch is set: ``models.<i>.global_batch`` when that model
    gives one, else ``training.global_batch``."""
    for i, m in enumerate(prep.exp.models):
        if m.name == model and m.global_batch is not None:
            return f"models.{i}.global_batch"
    return "training.global_batch"


def _invalid(
    prep: Prepared,
    model: str,
    cls: type[Schedule],
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
            f"(change {_batch_field(prep, model)} or sweep.microbatch_size)"
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
    if p > 1 and is_t5(prep.traces[model]):
        return (
            f"{model} is a T5: Megatron-LM refuses pipeline parallelism for T5 "
            "(NVIDIA/Megatron-LM@d98e8a64dd examples/t5/pretrain_t5.py:97-98)"
        )
    return ""

"""Whether pipesim can simulate a measured run, and as what: :func:`express`.

A :class:`~sim.runs.record.MeasuredRun` is *expressed* when every setting that changes its
time or memory has a pipesim equivalent: a hardware preset for its GPU, a trace generator for
its model (:mod:`sim.trace.decoder` for Llama-like, MoE and MLA decoders,
:func:`sim.trace.generator.transformer_trace` for GPT-2/3-like and BERT stacks,
:mod:`sim.trace.t5` for Megatron-Core's encoder-decoder T5), a framework
profile, a memory policy for its optimizer sharding and recompute, a schedule, and a point of
the grid (:class:`~sim.point.config.PointConfig`). Otherwise it is *not expressed*, with every
reason (:class:`NotExpressed`): these reasons are the to-do list of what pipesim lacks. The
checks are small functions, one per concern, each returning reasons (:data:`CHECKS`), so a
feature that lands removes one check. The model's generator, shape and name are
:mod:`sim.runs.express_model`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.compute.mamba_cp import cp_problem
from sim.compute.precision import TE, get_recipe
from sim.framework.registry import get_framework
from sim.runs.approximations import (
    ALLGATHER_TP,
    INSTANCES_TIME,
    hybrid_fields,
    model_approximations,
)
from sim.runs.express_hardware import gpu_formats, gpu_preset, hardware_for
from sim.runs.express_model import generator_shape, model_name, model_reasons, uses_decoder
from sim.runs.express_policy import policy
from sim.runs.pipeline_layout import layout_boundaries
from sim.runs.record import MeasuredRun, feature
from sim.runs.slurm_segments import segment_placement
from sim.runs.t5_express import T5_NOTES, T5_SIZED

DTYPES = ("bf16", "fp16", "fp32")
"""Precisions pipesim's traces carry (``training.dtype``)."""
FRAMEWORKS = {
    "megatron-lm": "megatron-lm", "megatron-bridge": "megatron-lm",
    "megatron-deepspeed": "megatron-deepspeed", "deepspeed": "deepspeed",
    "torchtitan": "torchtitan",
}  # fmt: skip
"""A run's framework -> pipesim's framework profile (:mod:`sim.framework`); Megatron-Bridge
runs Megatron-Core's training loop (``megatron.bridge.training.train``)."""


@dataclass(frozen=True)
class NotExpressed:
    """A run pipesim cannot simulate, and every reason why (the first is the primary one)."""

    run: MeasuredRun
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Expressed:
    """A run as pipesim simulates it.

    Attributes:
        run: the measured run.
        hardware: preset name (``dgx-b200``, ``4x-dgx-h100``, ``nvl72x2-gb200``); the
            run's shipped overlay, if any, is set over it (:attr:`overlay`).
        model: the trace's name.
        generator: ``decoder``, ``t5``, ``gpt`` or ``bert``.
        shape: the generator's arguments (a :class:`DecoderShape` for ``decoder``, a
            :class:`~sim.compute.t5.T5Shape` for ``t5``; the
            keyword arguments of ``transformer_trace`` otherwise).
        dtype: training dtype.
        framework: pipesim framework profile.
        point: the :class:`~sim.point.config.PointConfig` fields (flat names); data-parallel
            sharding (FSDP, ZeRO-3) is the memory policy's, so ``dp_width`` is every
            data-parallel rank and ``dp_shard`` 1.
        approximations: what is simulated differently from the run (each an approximated
            argument's reason, or an assumption of the reader).
        memory: the experiment's ``memory:`` fields the run sets (``(field, value)``).
        boundaries: fixed stage start layers (``options.boundaries``) from the run's
            pipeline layout (:func:`sim.runs.pipeline_layout.layout_boundaries`), or None.
        optimizer: ``training.optimizer`` (the optimizer state per parameter).
        placement: ``options.placement`` of the ranks on NVL72 racks that the job's Slurm
            segments leave partly empty (:func:`sim.runs.slurm_segments.segment_placement`),
            or None (the automatic placement).
    """

    run: MeasuredRun
    hardware: str
    model: str
    generator: str
    shape: Any
    dtype: str
    framework: str
    point: dict[str, Any]
    approximations: tuple[str, ...]
    memory: tuple[tuple[str, Any], ...] = ()
    boundaries: tuple[int, ...] | None = None
    optimizer: str = "adam"
    placement: tuple | None = None

    @property
    def overlay(self) -> str:
        """The shipped hardware overlay of the run's machine ("" none:
        :attr:`sim.runs.record.MeasuredRun.hardware_overlay`)."""
        return self.run.hardware_overlay

    @property
    def key(self) -> tuple:
        """What the simulation depends on: runs with one key are simulated once."""
        return (self.hardware, self.overlay, self.model, repr(self.shape), self.dtype, self.framework,
                tuple(sorted(self.point.items())), self.memory, self.boundaries,
                self.optimizer, self.placement)  # fmt: skip


_feature = feature


def _args(run: MeasuredRun) -> list[str]:
    return [f"{a.name}: {a.reason}" for a in run.unmapped()]


def low_precision(precision: str) -> str:
    """The recipe name (:mod:`sim.compute.precision`) of a run's ``precision`` as the readers
    write it (Megatron's ``fp8-<recipe>``, ``nvfp4``), or ``""`` for a 16-bit dtype."""
    if precision in DTYPES:
        return ""
    return "mxfp8" if precision == "fp8-mxfp8" else precision


def _library(run: MeasuredRun) -> str:
    """Whose recipes the run's framework profile runs (``low_precision_library``: Transformer
    Engine for Megatron, torchao for torchtitan); Transformer Engine for an unknown one (its
    own reason: :func:`_framework`)."""
    try:
        return str(get_framework(FRAMEWORKS[run.framework]).low_precision_library.value)
    except KeyError:
        return TE


def _precision(run: MeasuredRun) -> list[str]:
    name = low_precision(run.precision)
    try:
        recipe = get_recipe(name, _library(run))
    except ValueError as exc:
        return [f"precision {run.precision}: {exc}"]
    if name and recipe is None:
        return [f"precision {run.precision}: no recipe"]
    preset = gpu_preset(run.gpu)
    if recipe is not None and preset and recipe.format not in gpu_formats(preset):
        runs = ", ".join(gpu_formats(preset)) or "none"
        return [f"precision {run.precision}: the {run.gpu} GPU has no {recipe.format} GEMMs "
                f"(its formats: {runs}, in the {preset} preset)"]  # fmt: skip
    return []


def _layout(run: MeasuredRun) -> list[str]:
    lay, out = run.layout, []
    if run.num_gpus and run.num_gpus != lay.gpus:
        out.append(f"{run.num_gpus} GPUs do not hold tp x pp x cp x dp = {lay.gpus}")
    out += lay.problems()  # MoE parallel folding: ep x etp over tp x cp x dp
    if lay.ep > 1 and run.shape.moe_experts and run.shape.moe_experts % lay.ep:
        out.append(f"{run.shape.moe_experts} experts not divisible by expert parallel {lay.ep}")
    out += _mamba_cp(run)
    if lay.cp > 1 and run.shape.arch == "bert":
        out.append("context parallelism on a BERT (pipesim splits sequences of decoder traces "
                   "only)")  # fmt: skip
    if run.microbatches is None:
        out.append("global batch is not a multiple of micro-batch x data-parallel width")
    return out


def _mamba_cp(run: MeasuredRun) -> list[str]:
    """Megatron-Core's refusal of context parallelism over the run's Mamba-2 layers
    (``MambaContextParallel.__init__``: :func:`sim.compute.mamba_cp.cp_problem`; a tensor split
    that does not divide them is the decoder's refusal), or []."""
    lay, s = run.layout, run.shape
    if lay.cp == 1 or "M" not in (_feature(s, "hybrid_pattern") or "") or not _feature(s, "mamba"):
        return []
    m = hybrid_fields(s)["mamba"]
    why = "" if m.heads % lay.tp or m.groups % lay.tp else cp_problem(m, lay.tp, lay.cp)
    return [why] if why else []


def _framework(run: MeasuredRun) -> list[str]:
    if run.framework not in FRAMEWORKS:
        return [f"framework {run.framework!r}: no profile (sim.framework)"]
    try:
        profile = get_framework(framework_spec(run))
        profile.tp_overlap(run.layout.tp, run.layout.sp)
    except (KeyError, ValueError) as exc:
        return [f"framework options: {exc}"]
    return []


def _policy(run: MeasuredRun) -> list[str]:
    name, why = policy(run)
    return [why] if name is None else []


def _hardware(run: MeasuredRun) -> list[str]:
    return (
        []
        if hardware_for(run.gpu, run.num_gpus or run.layout.gpus)[0]
        else [hardware_for(run.gpu, run.num_gpus or run.layout.gpus)[1]]
    )


def _boundaries(run: MeasuredRun) -> tuple[int, ...] | None:
    """The stage start layers of the run's pipeline layout (None: no layout).

    Raises:
        ValueError: a layout that does not fit the model or the layout (the reason).
    """
    if not run.pipeline_layout:
        return None
    s, lay = run.shape, run.layout
    mtp = int(_feature(s, "mtp") or 0)
    if not uses_decoder(run) and mtp:  # the GPT/BERT traces: embedding, blocks, head
        raise ValueError("MTP layers in the layout of a GPT/BERT stack (decoder traces only)")
    return layout_boundaries(run.pipeline_layout, s.layers or 0, mtp, lay.pp * lay.vp)


def _pipeline_layout(run: MeasuredRun) -> list[str]:
    try:
        _boundaries(run)
    except ValueError as exc:
        return [f"pipeline-model-parallel-layout: {exc}"]
    return []


CHECKS: tuple[Callable[[MeasuredRun], list[str]], ...] = (
    _precision, _hardware, model_reasons, _framework, _policy, _layout, _pipeline_layout, _args,
)  # fmt: skip
"""Every check, in the order reasons are listed (the first reason is the primary one)."""


def express(run: MeasuredRun) -> Expressed | NotExpressed:
    """``run`` as pipesim simulates it, or every reason it cannot (module doc)."""
    reasons = [why for check in CHECKS for why in check(run)]
    if reasons:
        return NotExpressed(run, tuple(dict.fromkeys(reasons)))
    hardware = hardware_for(run.gpu, run.num_gpus or run.layout.gpus)[0] or ""
    attention = run.attention
    try:
        generator, shape = generator_shape(run, attention, hardware)
    except ValueError as exc:
        return NotExpressed(run, (f"model shape: {exc}",))
    lay = run.layout
    framework = framework_spec(run)
    point = lay.flat() | {
        "schedule": run.schedule, "microbatch_size": run.microbatch_size or 1,
        "microbatches": run.microbatches, "global_batch": run.global_batch,
        "memory_policy": policy(run)[0], "framework": framework,
        "precision": low_precision(run.precision),
    } | ({"param_gather": True} if run.param_gather else {})  # fmt: skip
    if run.precision_options:  # hashable: the point is part of the run's key
        point["precision_options"] = tuple(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in run.precision_options
        )
    sized = T5_SIZED if generator == "t5" else ()  # the T5 generator sizes the table
    approx = tuple(
        f"{a.name}: {a.reason}"
        for a in run.args
        if a.status == "approximated" and a.name.lstrip("-") not in sized
    ) + (T5_NOTES if generator == "t5" else ())
    if run.token_dispatcher == "allgather":
        point["routing"] = "balanced+allgather"
        if lay.tp > 1:
            approx += (ALLGATHER_TP,)
    approx += model_approximations(run, uses_decoder(run))
    n, w = run.optimizer_instances, lay.dp * lay.cp
    if n > 1:
        approx += (INSTANCES_TIME.format(n=n, w=w, k=w // n),)
    return Expressed(
        run, hardware, model_name(generator, shape), generator, shape,
        "bf16" if low_precision(run.precision) else run.precision,
        framework, point, approx + run.notes, run.memory_options, _boundaries(run),
        run.optimizer, _placement(run, hardware),
    )  # fmt: skip


def _placement(run: MeasuredRun, hardware: str) -> tuple | None:
    """The ranks' GPUs on NVL72 racks (:mod:`sim.runs.slurm_segments`), hashable; None off
    racks or where the automatic placement is the segments' own."""
    lay = run.layout
    if not hardware.startswith("nvl72x"):
        return None
    rows = segment_placement(lay.gpus, lay.pp, lay.dp * lay.cp, lay.tp)
    if rows is None:
        return None
    return tuple(tuple(tuple(g) if isinstance(g, list) else g for g in row) for row in rows)


def framework_spec(run: MeasuredRun) -> str:
    """The run's profile with its options (``megatron-lm[overlap_grad_reduce,...]``,
    :mod:`sim.framework.options`): the spec string ``sim run`` and the planner take."""
    name = FRAMEWORKS[run.framework]
    if not run.framework_options:
        return name
    return f"{name}[{','.join(f'{k}={v}' for k, v in run.framework_options)}]"


__all__ = [
    "CHECKS",
    "DTYPES",
    "FRAMEWORKS",
    "Expressed",
    "NotExpressed",
    "express",
    "framework_spec",
    "gpu_preset",  # re-exported: sim.runs.express_hardware
    "hardware_for",  # re-exported: sim.runs.express_hardware
    "low_precision",
    "policy",  # re-exported: sim.runs.express_policy
]

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
feature that lands removes one check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.compute.decoder import DecoderShape
from sim.compute.mamba_cp import cp_problem
from sim.compute.precision import TE, get_recipe
from sim.compute.t5 import T5Shape
from sim.framework.registry import get_framework
from sim.runs.approximations import (
    ALLGATHER_TP,
    APPROXIMATED_ACTIVATIONS,
    INSTANCES_TIME,
    hybrid_fields,
    model_approximations,
)
from sim.runs.decoder_express import decoder_shape, ep_domains
from sim.runs.express_hardware import gpu_formats, gpu_preset, hardware_for
from sim.runs.express_policy import policy
from sim.runs.pipeline_layout import layout_boundaries
from sim.runs.record import MeasuredRun, ModelShape, feature
from sim.runs.slurm_segments import segment_placement
from sim.runs.t5_express import T5_NOTES, T5_SIZED, t5_reasons, t5_shape

DTYPES = ("bf16", "fp16", "fp32")
"""Precisions pipesim's traces carry (``training.dtype``)."""
FRAMEWORKS = {
    "megatron-lm": "megatron-lm", "megatron-bridge": "megatron-lm",
    "megatron-deepspeed": "megatron-deepspeed", "deepspeed": "deepspeed",
    "torchtitan": "torchtitan",
}  # fmt: skip
"""A run's framework -> pipesim's framework profile (:mod:`sim.framework`); Megatron-Bridge
runs Megatron-Core's training loop (``megatron.bridge.training.train``)."""
FUSED_DROPOUT_ADD = frozenset({"megatron-deepspeed"})
"""Frameworks whose GPT layers run each hidden dropout and its residual add as one fused kernel
(the generator's ``dropout_add="fused"``): Megatron-DeepSpeed's default ``bias_dropout_fusion``
with nvFuser (:func:`sim.compute.transformer._dropout_residual` cites the code). Megatron-LM's
legacy layers have the same default; Megatron-Core's (Transformer Engine) is another code path:
neither is switched here (not checked against their sources in this change)."""


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


def _model(run: MeasuredRun) -> list[str]:
    s = run.shape
    if s.arch == "t5":
        return t5_reasons(run)
    if s.arch == "hybrid" and not _feature(s, "hybrid_pattern"):
        return [
            "hybrid Mamba-2 / attention layers without a layer pattern "
            "(--hybrid-layer-pattern, or a model-shape entry: sim.runs.model_shapes)"
        ]
    sizes = {"layers": s.layers, "hidden": s.hidden, "heads": s.heads, "vocabulary": s.vocab,
             "sequence length": run.seq_len}  # fmt: skip
    if not all(sizes.values()):
        lacking = ", ".join(k for k, v in sizes.items() if not v)
        return [f"model shape incomplete: no {lacking} (needs layers, hidden, heads, vocabulary, "
                "sequence length)"]  # fmt: skip
    out = []
    if s.arch == "bert" and (s.head_dim or _feature(s, "qk_norm") or _feature(s, "mtp")):
        out.append("head_dim, QK-norm or MTP on a BERT (the BERT generator has none of them)")
    if _feature(s, "activation") and not (uses_decoder(run) and _feature(s, "activation") in
                                          APPROXIMATED_ACTIVATIONS):  # fmt: skip
        out.append(f"{_feature(s, 'activation')} MLP: the generators have GeLU and SwiGLU only")
    if s.arch == "bert":
        out += _gpt_model(s)
    return out


def uses_decoder(run: MeasuredRun) -> bool:
    """Whether ``run``'s model is generated as a :class:`DecoderShape` (a gated or MoE decoder,
    or a GeLU GPT the GPT generator cannot build: grouped-query or latent attention, untied
    embeddings, context parallelism, an explicit head_dim, QK-norm, MTP; its MLP then ungated,
    ``gated_mlp`` False, with GeLU's FLOPs as the dense MLP's up and down projections)."""
    s = run.shape
    if s.arch in ("decoder", "hybrid") or s.is_moe:
        return True
    special = s.head_dim or _feature(s, "qk_norm") or _feature(s, "mtp")
    return s.arch == "gpt" and bool(_gpt_model(s) or run.layout.cp > 1 or special)


def _gpt_model(s: ModelShape) -> list[str]:
    out = []
    if s.kv_heads and s.kv_heads != s.heads:
        out.append("grouped-query attention with a GeLU MLP (the GPT generator has MHA only)")
    if s.mla:
        out.append("MLA with a GeLU MLP (the decoder generator's dense MLP is gated)")
    if s.is_moe and (s.moe_dense_layers or s.moe_every > 1):
        out.append("dense GeLU layers between MoE layers (the decoder generator's dense MLP is "
                   "gated)")  # fmt: skip
    if not s.is_moe and not s.tied_embeddings:
        out.append("untied embeddings on a GeLU GPT (the GPT generator ties them)")
    if not s.is_moe and s.hidden and s.ffn_hidden and s.ffn_hidden % s.hidden:
        out.append(f"FFN width {s.ffn_hidden} not a multiple of hidden {s.hidden} (GPT generator)")
    return out


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
    _precision, _hardware, _model, _framework, _policy, _layout, _pipeline_layout, _args,
)  # fmt: skip
"""Every check, in the order reasons are listed (the first reason is the primary one)."""


def _generator(run: MeasuredRun, attention: str, hardware: str) -> tuple[str, Any]:
    s = run.shape
    seq = run.seq_len or 0
    if s.arch == "t5":
        return "t5", t5_shape(run)
    if uses_decoder(run):
        return "decoder", decoder_shape(s, seq, attention, ep_domains(run, hardware))
    mult = (s.ffn_hidden or 4 * (s.hidden or 0)) // (s.hidden or 1)
    shape = {"layers": s.layers, "hidden": s.hidden, "heads": s.heads, "seq_len": seq,
             "vocab": s.vocab, "ffn_mult": mult, "attention": attention}  # fmt: skip
    if run.framework in FUSED_DROPOUT_ADD:
        shape["dropout_add"] = "fused"
    if _feature(s, "cross_entropy"):  # the loss's kernels, host ops and memory
        shape["cross_entropy_fusion"] = _feature(s, "cross_entropy")
    return s.arch, shape


def model_name(generator: str, shape: Any) -> str:
    """A trace name for a generated shape (letters, digits, ``-``)."""
    if isinstance(shape, DecoderShape):
        moe = f"-e{shape.moe.experts}k{shape.moe.top_k}" if shape.moe else ""
        return f"dec-L{shape.layers}-h{shape.hidden}-a{shape.heads}-s{shape.seq_len}{moe}"
    if isinstance(shape, T5Shape):
        return (f"t5-E{shape.encoder_layers}D{shape.decoder_layers}-h{shape.hidden}-"
                f"a{shape.heads}-s{shape.encoder_seq}-{shape.decoder_seq}")  # fmt: skip
    return (
        f"{generator}-L{shape['layers']}-h{shape['hidden']}-a{shape['heads']}-s{shape['seq_len']}"
    )


def express(run: MeasuredRun) -> Expressed | NotExpressed:
    """``run`` as pipesim simulates it, or every reason it cannot (module doc)."""
    reasons = [why for check in CHECKS for why in check(run)]
    if reasons:
        return NotExpressed(run, tuple(dict.fromkeys(reasons)))
    hardware = hardware_for(run.gpu, run.num_gpus or run.layout.gpus)[0] or ""
    attention = run.attention
    try:
        generator, shape = _generator(run, attention, hardware)
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
    "FUSED_DROPOUT_ADD",
    "Expressed",
    "NotExpressed",
    "express",
    "framework_spec",
    "gpu_preset",  # re-exported: sim.runs.express_hardware
    "hardware_for",  # re-exported: sim.runs.express_hardware
    "low_precision",
    "model_name",
    "policy",  # re-exported: sim.runs.express_policy
    "uses_decoder",
]

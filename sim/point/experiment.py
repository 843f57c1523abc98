"""An experiment loaded once: the validated configuration with its hardware and traces.

:func:`prepare` reads what every later step shares (the hardware topology, each model's trace
at the training dtype, attention modelled), so the sweep (:mod:`sim.plan.sweep`), the planner's bounds
(:mod:`sim.plan.bounds`) and point evaluation (:mod:`sim.plan.point_row`) never load files again.
What is derived from a trace is derived once per key and shared by the run's notes, the
bounds and every point (:meth:`Prepared.adapted`, :meth:`Prepared.rank_trace`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.compute.precision import get_recipe
from sim.compute.precision_rules import LayerRules, LowPrecision, te_version
from sim.compute.quantize import LINEARS
from sim.config import ExperimentConfig, PrecisionOptions
from sim.errors import InputError
from sim.framework.registry import get_framework
from sim.hardware.loader import is_preset, load_hardware
from sim.hardware.overlay import apply_overlay, read_overlay
from sim.hardware.topology import Topology
from sim.memory.attention import with_attention
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.rank import rank_trace
from sim.parallel.shard import ShardedTrace
from sim.point.config import PointConfig
from sim.trace.adapt import adapt_trace
from sim.trace.loader import load_trace
from sim.trace.schema import Trace


@dataclass
class Prepared:
    """An experiment with its hardware and traces loaded.

    Attributes:
        exp: the validated experiment.
        file: the experiment file (for error messages; relative trace paths start there).
        topology: the hardware.
        traces: each model's trace by model name, at ``training.dtype``, with attention
            modelled (:func:`sim.memory.attention.with_attention`).
    """

    exp: ExperimentConfig
    file: str
    topology: Topology
    traces: dict[str, Trace]
    _derived: dict[tuple, Any] = field(default_factory=dict, repr=False, compare=False)

    def once(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per ``key`` for this experiment (a value every point of a
        model shares, e.g. the constant part of its row-cache key)."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def adapted(
        self, model: str, microbatch_size: int, precision: str = ""
    ) -> tuple[Trace, tuple[str, ...]]:
        """Model ``model``'s trace at ``microbatch_size`` on this hardware's first GPU, with
        the notes of how (:func:`~sim.trace.adapt.adapt_trace`), its linear layers under
        ``precision`` (:meth:`low_precision`), computed once per triple.

        Raises:
            ValueError: ``microbatch_size < 1``; a precision the trace or the GPU cannot run.
        """
        key = ("adapted", model, microbatch_size, precision)
        if key not in self._derived:
            trace, notes = adapt_trace(
                self.traces[model],
                microbatch_size,
                self.topology.gpus[0].compute,
                self.low_precision(precision),
            )
            self._derived[key] = (trace, tuple(notes))
        return self._derived[key]

    def low_precision(self, precision: str) -> LowPrecision | None:
        """The recipe a point's ``precision`` names as this experiment's framework runs it,
        with ``training.precision_options`` (None for ``""``: no low precision).

        Raises:
            ValueError: an unknown recipe, one the framework's library does not run, or
                options the recipe refuses.
        """
        return point_precision(self.exp, precision)

    def rank_trace(self, point: PointConfig, microbatch_size: int) -> ShardedTrace | DecoderShard:
        """The adapted trace of ``point`` as one of its ranks runs it
        (:func:`~sim.parallel.rank.rank_trace`), computed once per model, micro-batch size,
        layout dimensions that split layers, and routing.

        Raises:
            ValueError: the trace cannot be split as the point says.
        """
        lay = point.layout
        key: tuple = ("rank", point.model, microbatch_size, lay.tp, lay.sp, lay.cp, lay.ep)
        key += (lay.etp, lay.cp_comm, point.routing, point.precision, point.sp_regather)
        if key not in self._derived:
            gpu = self.topology.gpus[0]
            trace = self.adapted(point.model, microbatch_size, point.precision)[0]
            host = self.topology.host(gpu.host).overhead
            self._derived[key] = rank_trace(
                trace, point, gpu.compute, gpu.tp_module_overhead_s, host
            )
        return self._derived[key]


def point_precision(exp: ExperimentConfig, precision: str) -> LowPrecision | None:
    """The :class:`~sim.compute.precision_rules.LowPrecision` of ``precision`` (a recipe name, or
    ``""`` / a 16-bit name: None) as ``exp.framework``'s library runs it, with its layer rules
    and ``training.precision_options``.

    Raises:
        ValueError: as :func:`~sim.compute.precision.get_recipe`, options the recipe refuses,
            or a ``te_version`` that is not ``major.minor``.
        KeyError: an unknown framework.
    """
    library = get_framework(exp.framework).low_precision_library.value
    recipe = get_recipe(precision, library)
    if recipe is None:
        return None
    opts = exp.training.precision_options or PrecisionOptions()
    for option, names in (
        ("bf16_linears", opts.bf16_linears),
        ("mxfp8_linears", opts.mxfp8_linears),
    ):
        unknown = sorted(set(names) - LINEARS)
        if unknown:
            raise ValueError(
                f"training.precision_options.{option}: {', '.join(unknown)} is not a linear "
                f"layer; use {', '.join(sorted(LINEARS))}"
            )
    rules = LayerRules.default(
        recipe,
        opts.first_last_layers_bf16,
        opts.num_layers_at_start_in_bf16,
        opts.num_layers_at_end_in_bf16,
        mtp=not opts.mtp_bf16,
        keep16=tuple(opts.bf16_linears),
        attention=opts.fp8_attention,
        head=opts.fp8_output_proj,
        mxfp8=tuple(opts.mxfp8_linears),
    )
    if opts.fp8_output_proj and recipe.format != "mxfp8":
        raise ValueError(
            "training.precision_options.fp8_output_proj needs the mxfp8 recipe (Megatron-Core "
            "transformer_config.py: 'fp8_output_proj requires fp8_recipe=mxfp8'), not "
            f"{recipe.name}"
        )
    return LowPrecision(recipe, rules, opts.param_gather, te_version(opts.te_version))


def _hardware(exp: ExperimentConfig, base: Path | None, file: str) -> str | dict[str, Any]:
    """The experiment's hardware, with its ``hardware_overlay`` set over it
    (:mod:`sim.hardware.overlay`; paths relative to the experiment file).

    Raises:
        InputError: the overlay file is missing, naming the experiment ``file`` and field.
    """
    if not exp.hardware_overlay:
        return exp.hardware
    hw = exp.hardware
    if isinstance(hw, str) and not is_preset(hw) and base is not None:
        hw = str(base / hw) if not Path(hw).is_absolute() else hw
    path = Path(exp.hardware_overlay)
    path = base / path if base is not None and not path.is_absolute() else path
    if not path.exists():
        raise InputError(
            f"hardware overlay {path} not found (relative to the experiment file; "
            "`sim calibrate --from-runs` writes one)",
            file=file,
            field="hardware_overlay",
        )
    return apply_overlay(hw, read_overlay(path))


def prepare(exp: ExperimentConfig, file: str) -> Prepared:
    """Load the hardware and every model's trace.

    Raises:
        InputError: unknown preset, unreadable trace (naming the file and field).
    """
    base = Path(file).parent if file else None
    topo = load_hardware(_hardware(exp, base, file), file=file, field="hardware")
    traces = {}
    for i, model in enumerate(exp.models):
        trace = load_trace(
            model.trace,
            base_dir=base,
            file=file,
            field=f"models.{i}.trace",
            seq_len=model.seq_len,
            gpu=topo.gpus[0].compute,
        )
        if exp.training.dtype:
            trace = trace.with_dtype(exp.training.dtype)
        traces[model.name] = with_attention(trace)[0]
    return Prepared(exp, file, topo, traces)

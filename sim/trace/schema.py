"""The per-layer profile of a model: :class:`LayerProfile` and :class:`Trace`.

A trace is an ordered chain of layers measured (or generated) at one micro-batch size on
one device; a profiled trace may carry the same chain measured at further micro-batch sizes
(:attr:`Trace.profiles`, from ``sim profile -b 1 -b 2 -b 4``). Scaling is explicit:

* :meth:`Trace.at_microbatch` returns a measured size as is and interpolates linearly in ``b``
  between the two nearest measured sizes (times and bytes; both are close to affine in ``b``
  between neighbouring sizes). Outside the measured range it returns None: the caller
  (:func:`sim.trace.adapt.adapt_trace`) extrapolates with the compute model and says so.

* :meth:`Trace.scaled_to_microbatch` scales times and activation/output bytes linearly in the
  number of samples (parameter bytes unchanged). This is the usual first-order model
  (PipeDream's optimizer makes the same assumption); it over-estimates time at small batch
  sizes where kernels are not saturated.
* :meth:`Trace.scaled_to_device` scales times by the ratio of peak dense FLOP/s of the two
  devices (source: hardware.md §1). It is only as good as that ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from sim.compute.recompute_modules import NOGRAD

OPTIONAL_FIELDS = (
    "bwd_input_s",
    "bwd_weight_s",
    "flops",
    "attn_core_act_bytes",
    "attn_core_flops",
    "fwd_ops",
    "bwd_ops",
    "fwd_modules",
    "fwd_functions",
    "param_tensors",
    "trainable_bytes",
)
"""Optional numeric fields of :class:`LayerProfile` (None when unknown)."""


def _scaled(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


@dataclass(frozen=True)
class LayerProfile:
    """One layer of a chain, for one micro-batch.

    Attributes:
        name: layer name (unique within the trace is not required).
        fwd_s: forward time in seconds for one micro-batch.
        bwd_s: full backward time in seconds (input + weight gradients).
        param_bytes: bytes of the layer's parameters in the training dtype.
        act_bytes: bytes saved for the backward per micro-batch (the activation stash).
        out_bytes: bytes of the layer's output, i.e. what crosses a stage boundary placed
            right after this layer (the gradient sent back has the same size).
        bwd_input_s: optional input-gradient part of ``bwd_s`` (zero-bubble "I").
        bwd_weight_s: optional weight-gradient part of ``bwd_s`` (zero-bubble "W").
        flops: optional forward FLOPs per micro-batch.
        attn_core_act_bytes: optional part of ``act_bytes`` stashed by the attention core
            (softmax output, its dropout mask and the dropout output: the ``5*a*s^2*b`` term of
            Korthikanti et al.), which selective recompute drops (memory.md §2, §5.1).
        attn_core_flops: optional forward FLOPs of the attention core (``4*b*s^2*h``: scores
            and attention over V), the part selective recompute repeats.
        fwd_ops: optional number of ops the host issues for the layer's forward: PyTorch
            operator calls (ATen ops, views included) as a ``TorchDispatchMode`` counts them,
            with autograd recording on; what the host model charges ``op_s`` each
            (:mod:`sim.hardware.host_ops`). The same at every micro-batch size.
        bwd_ops: optional number of ops the autograd engine dispatches for the layer's
            backward (charged ``backward_op_s`` each).
        fwd_modules: optional number of ``nn.Module`` calls of the layer's forward (charged
            ``module_s`` each, :meth:`sim.hardware.host_ops.HostOverhead.calls_s`).
        fwd_functions: optional number of custom ``autograd.Function`` applies of its forward
            (``function_s`` each); its backward calls as many Python nodes
            (``function_backward_s`` each).
        param_tensors: optional number of parameter tensors the layer owns (those its
            ``param_bytes`` counts), each a separate ``p.grad`` to an optimizer that walks them
            one by one: what a measured per-tensor step cost multiplies
            (:mod:`sim.memory.states`). The same at every micro-batch size.
        trainable_bytes: optional bytes of the parameters an optimizer updates, the rest
            frozen (LoRA, :mod:`sim.compute.lora`): only these have gradients and optimizer
            state. None: all of ``param_bytes``.
        recompute_parts: ``(choice, dropped bytes, forward seconds re-run)`` of each
            module-level recompute choice of the layer (Megatron's ``recompute_modules``,
            torchtitan's per-op SAC: :mod:`sim.compute.recompute_modules`), as a rank runs it;
            set on the rank's layers of decoder traces (:mod:`sim.parallel.decoder_shard`),
            empty elsewhere (not stored in trace files). A ``nograd`` entry is no choice but
            the forward seconds of kernels that run only with gradients enabled
            (:data:`~sim.compute.recompute_modules.NOGRAD`, :attr:`full_recompute_s`).
    """

    name: str
    fwd_s: float
    bwd_s: float
    param_bytes: float
    act_bytes: float
    out_bytes: float
    bwd_input_s: float | None = None
    bwd_weight_s: float | None = None
    flops: float | None = None
    attn_core_act_bytes: float | None = None
    attn_core_flops: float | None = None
    fwd_ops: float | None = None
    bwd_ops: float | None = None
    fwd_modules: float | None = None
    fwd_functions: float | None = None
    param_tensors: float | None = None
    trainable_bytes: float | None = None
    recompute_parts: tuple[tuple[str, float, float], ...] = ()

    @property
    def full_recompute_s(self) -> float:
        """Seconds a full recompute of the layer adds: ``fwd_s`` less its ``nograd`` part
        (the kernels its checkpointed first forward skips run once, in the recompute:
        :mod:`sim.compute.recompute_modules`).

        Example:
            >>> LayerProfile("moe.0", 1.0, 2.0, 0.0, 0.0, 0.0,
            ...              recompute_parts=(("moe", 5.0, 0.5), ("nograd", 0.0, 0.01))
            ...              ).full_recompute_s
            0.99
        """
        return self.fwd_s - sum(secs for name, _, secs in self.recompute_parts if name == NOGRAD)

    @property
    def trainable(self) -> float:
        """Bytes of trainable parameters: ``trainable_bytes``, else ``param_bytes``."""
        return self.param_bytes if self.trainable_bytes is None else self.trainable_bytes

    def problems(self) -> list[str]:
        """Every invalid field as ``'field: reason'``; empty when the layer is valid."""
        out = []
        for name in ("fwd_s", "bwd_s", "param_bytes", "act_bytes", "out_bytes"):
            v = getattr(self, name)
            if v is None or not isinstance(v, (int, float)) or math.isnan(v):
                out.append(f"{name}: missing or not a number")
            elif v < 0 or math.isinf(v):
                out.append(f"{name}: must be a finite number >= 0, got {v}")
        for name in OPTIONAL_FIELDS:
            v = getattr(self, name)
            if v is not None and (math.isnan(v) or v < 0 or math.isinf(v)):
                out.append(f"{name}: must be a finite number >= 0, got {v}")
        return out


@dataclass(frozen=True)
class SharedParams:
    """Parameters that several layers of the chain hold: a module used in two blocks, a head
    tied to an embedding. Their bytes are in the first layer's ``param_bytes`` only (the model
    has them once); a pipeline that puts the holders on several GPUs keeps a copy on each and
    all-reduces their gradient between them at every step (``sim.trace.shared``).

    Attributes:
        layers: chain indices of the holding layers, ascending, at least two.
        param_bytes: bytes of the shared parameters, once.
        names: their names (``"<first layer>.<name>"``; informative).

    Example:
        >>> SharedParams((0, 5), 4096.0).problems(6), SharedParams((0, 9), 1.0).problems(6)
        ([], ['layers: (0, 9) must be at least two distinct ascending indices in 0..5'])
    """

    layers: tuple[int, ...]
    param_bytes: float
    names: tuple[str, ...] = ()

    def problems(self, n_layers: int) -> list[str]:
        """Every invalid field as ``'field: reason'`` for a chain of ``n_layers``."""
        out = []
        ok = (
            len(self.layers) >= 2
            and all(isinstance(i, int) and not isinstance(i, bool) for i in self.layers)
            and list(self.layers) == sorted(set(self.layers))
            and 0 <= self.layers[0]
            and self.layers[-1] < n_layers
        )
        if not ok:
            out.append(
                f"layers: {self.layers} must be at least two distinct ascending indices in "
                f"0..{n_layers - 1}"
            )
        v = self.param_bytes
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < math.inf:
            out.append(f"param_bytes: must be a finite number >= 0, got {v!r}")
        return out


@dataclass(frozen=True)
class Trace:
    """An ordered chain of :class:`LayerProfile` measured at ``microbatch_size`` samples.

    Attributes:
        name: model name, e.g. ``"gpt2-1.5b"``.
        layers: the chain, input side first.
        microbatch_size: samples per micro-batch the times and activation bytes refer to.
        dtype: training dtype of parameters and activations (``"fp16"``, ``"bf16"``, ``"fp32"``).
        device: name of the device measured on (or modelled), e.g. ``"V100-SXM2-16GB"``.
        provenance: where it came from: source, command, date, notes.
        profiles: the chain measured at other micro-batch sizes, ``{b: layers}`` (same layer
            names in the same order; ``microbatch_size`` itself is not a key).
        shared: parameters several layers hold (:class:`SharedParams`), counted once in
            ``layers``.

    Example:
        >>> t = Trace("toy", (LayerProfile("l0", 1e-3, 2e-3, 4, 8, 8),), 1, "fp16", "cpu")
        >>> t.scaled_to_microbatch(4).layers[0].fwd_s
        0.004
    """

    name: str
    layers: tuple[LayerProfile, ...]
    microbatch_size: int
    dtype: str
    device: str
    provenance: dict[str, Any] = field(default_factory=dict)
    profiles: dict[int, tuple[LayerProfile, ...]] = field(default_factory=dict)
    shared: tuple[SharedParams, ...] = ()

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def param_bytes(self) -> float:
        """Total parameter bytes of the model."""
        return sum(layer.param_bytes for layer in self.layers)

    @property
    def parameters(self) -> int:
        """Parameter count, from ``param_bytes`` and the dtype's element size."""
        return int(round(self.param_bytes / dtype_bytes(self.dtype)))

    @property
    def measured_sizes(self) -> list[int]:
        """Every micro-batch size the trace has layers for, ascending."""
        return sorted({self.microbatch_size, *self.profiles})

    def layers_at(self, microbatch_size: int) -> tuple[LayerProfile, ...]:
        """The layers measured at ``microbatch_size``.

        Raises:
            KeyError: not a measured size.
        """
        if microbatch_size == self.microbatch_size:
            return self.layers
        return self.profiles[microbatch_size]

    def profile_problems(self) -> list[str]:
        """Every inconsistency between ``profiles`` and ``layers`` as text; empty if none."""
        names = [layer.name for layer in self.layers]
        out = []
        for b, layers in sorted(self.profiles.items()):
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                out.append(f"profiles: micro-batch size must be a positive integer, got {b!r}")
            elif [layer.name for layer in layers] != names:
                out.append(f"profiles[{b}]: layer names differ from the main profile's")
        return out

    def at_microbatch(self, microbatch_size: int) -> Trace | None:
        """The trace at ``microbatch_size`` from measurements: exact at a measured size, linear
        interpolation between the nearest measured sizes below and above, None outside the
        measured range (see module doc). The result has no further ``profiles``."""
        sizes = self.measured_sizes
        b = microbatch_size
        if b in sizes:
            layers = self.layers_at(b)
        elif sizes[0] < b < sizes[-1]:
            lo = max(x for x in sizes if x < b)
            hi = min(x for x in sizes if x > b)
            w = (b - lo) / (hi - lo)
            layers = tuple(
                _lerp(x, y, w) for x, y in zip(self.layers_at(lo), self.layers_at(hi), strict=True)
            )
        else:
            return None
        if b == self.microbatch_size and not self.profiles:
            return self
        return replace(self, layers=layers, microbatch_size=b, profiles={})

    def scaled_to_microbatch(self, microbatch_size: int) -> Trace:
        """The trace at another micro-batch size, linear in samples (see module doc)."""
        if microbatch_size == self.microbatch_size:
            return self
        k = microbatch_size / self.microbatch_size
        layers = tuple(
            replace(
                layer,
                fwd_s=layer.fwd_s * k,
                bwd_s=layer.bwd_s * k,
                act_bytes=layer.act_bytes * k,
                out_bytes=layer.out_bytes * k,
                bwd_input_s=_scaled(layer.bwd_input_s, k),
                bwd_weight_s=_scaled(layer.bwd_weight_s, k),
                flops=_scaled(layer.flops, k),
                attn_core_act_bytes=_scaled(layer.attn_core_act_bytes, k),
                attn_core_flops=_scaled(layer.attn_core_flops, k),
            )
            for layer in self.layers
        )
        return replace(self, layers=layers, microbatch_size=microbatch_size, profiles={})

    def with_dtype(self, dtype: str) -> Trace:
        """The trace in another dtype: parameter, activation and output bytes scale by the
        element-size ratio; times are unchanged (re-profile for the true speed).

        Raises:
            ValueError: unknown dtype.
        """
        if dtype == self.dtype:
            return self
        k = dtype_bytes(dtype) / dtype_bytes(self.dtype)

        def convert(chain: tuple[LayerProfile, ...]) -> tuple[LayerProfile, ...]:
            return tuple(
                replace(
                    layer,
                    param_bytes=layer.param_bytes * k,
                    act_bytes=layer.act_bytes * k,
                    out_bytes=layer.out_bytes * k,
                    attn_core_act_bytes=_scaled(layer.attn_core_act_bytes, k),
                    trainable_bytes=_scaled(layer.trainable_bytes, k),
                )
                for layer in chain
            )

        prov = dict(self.provenance)
        prov["converted_dtype"] = f"{self.dtype} -> {dtype}: bytes x {k:g}, times unchanged"
        return replace(
            self,
            layers=convert(self.layers),
            dtype=dtype,
            provenance=prov,
            profiles={b: convert(c) for b, c in self.profiles.items()},
            shared=tuple(replace(g, param_bytes=g.param_bytes * k) for g in self.shared),
        )

    def scaled_to_device(self, from_peak_flops: float, to_peak_flops: float, device: str) -> Trace:
        """Times scaled by ``from_peak_flops / to_peak_flops`` (peak dense FLOP/s ratio)."""
        k = from_peak_flops / to_peak_flops
        layers = tuple(
            replace(
                layer,
                fwd_s=layer.fwd_s * k,
                bwd_s=layer.bwd_s * k,
                bwd_input_s=None if layer.bwd_input_s is None else layer.bwd_input_s * k,
                bwd_weight_s=None if layer.bwd_weight_s is None else layer.bwd_weight_s * k,
            )
            for layer in self.layers
        )
        prov = dict(self.provenance)
        prov["scaled_to_device"] = f"{self.device} -> {device} by peak FLOP/s ratio {k:.4f}"
        prov.pop("tensor_parallel_overhead", None)  # measured on this device's ranks only
        return replace(self, layers=layers, device=device, provenance=prov, profiles={})


def _lerp(x: LayerProfile, y: LayerProfile, w: float) -> LayerProfile:
    """``(1 - w) * x + w * y`` field by field (``param_bytes`` and the name from ``x``)."""

    def mix(a: float | None, c: float | None) -> float | None:
        return None if a is None or c is None else (1 - w) * a + w * c

    fields = ("fwd_s", "bwd_s", "act_bytes", "out_bytes") + OPTIONAL_FIELDS
    values = {f: mix(getattr(x, f), getattr(y, f)) for f in fields}
    return replace(x, **values)  # type: ignore[arg-type]


def layer_kind(name: str) -> str:
    """``embedding``, ``head`` or ``block`` from a layer's name (the generator's names, which
    ``sim profile`` and the torch backend's GPT also use); any other name is a block."""
    for kind in ("embedding", "head"):
        if name.startswith(kind):
            return kind
    return "block"


_DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2}


def recorded_shape(trace: Trace, kind: str) -> dict[str, Any] | None:
    """The model shape a generated trace records (``provenance.model_shape``) when its
    ``kind`` is ``kind`` (``"decoder"``, ``"t5"``), as a new dict; None otherwise."""
    shape = (trace.provenance or {}).get("model_shape")
    return dict(shape) if isinstance(shape, dict) and shape.get("kind") == kind else None


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (``fp32`` 4, ``fp16``/``bf16`` 2).

    Raises:
        ValueError: unknown dtype.
    """
    try:
        return _DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of fp32, fp16, bf16") from None

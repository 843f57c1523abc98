"""Import a torch.profiler (Kineto) Chrome trace whose layers are annotated with ``record_function``.

Record the model's forward with each layer inside ``torch.profiler.record_function(name)``
(several training steps; ``prof.export_chrome_trace("trace.json")``), then::

    sim trace import-kineto trace.json --out traces/mine -b 8 [--layers a,b,c] [--bytes-from T]

How the JSON (``traceEvents``, complete events ``ph: "X"``, times in microseconds) becomes a
per-layer trace:

* **Layers**: ``user_annotation`` events named in ``--layers``, or else every top-level
  ``user_annotation`` (not inside another one; ``ProfilerStep#N`` does not count), in order of
  first appearance. A name that occurs several times (one per step) is one layer; its times
  are the median over the occurrences.
* **Forward**: on a CPU trace, the annotation's duration. On a GPU trace (``kernel`` events
  present), the summed duration of the kernels launched inside it (matched by ``correlation``
  through the ``cuda_runtime`` launch events on the annotation's thread).
* **Backward**: torch records each forward operator's autograd ``Sequence number``, and the
  autograd engine records ``autograd::engine::evaluate_function: XBackward0`` with the same
  number. A layer's backward is the summed duration of the evaluate_function events whose
  numbers belong to the operators of its forward (their kernels, on GPU).
* **Ops** (``fwd_ops``, ``bwd_ops``: what the host issues, :mod:`sim.hardware.host_ops`): the
  operator events (``cpu_op``) inside the layer's forward span, and inside its backward's
  evaluate_function spans, that contain no other operator event (the calls that reach a
  kernel or a view: a composite such as ``aten::linear`` counts through its children, as a
  ``TorchDispatchMode`` counts); median over occurrences.
* **Python calls** (``fwd_modules``, ``fwd_functions``): with ``with_stack=True`` (or
  ``with_modules``) torch records ``python_function`` events: ``nn.Module: Name_k`` for each
  module call and ``<built-in method apply of FunctionMeta ...>`` for each custom
  ``autograd.Function`` apply; those inside the layer's forward span on its thread are counted
  (median over occurrences). Without ``python_function`` events the counts stay unset and the
  host model charges no Python for the layer (the provenance says so).
* **Bytes** (``param_bytes``, ``act_bytes``, ``out_bytes``, ``flops``) are not in a Kineto
  trace: ``bytes_from`` (a native trace of the same model, e.g. from ``sim profile --model ...
  --for-gpu``) supplies them by layer name, scaled to the micro-batch size; without it they are
  0, and the provenance says so.

Pure JSON parsing: no torch import.
"""

from __future__ import annotations

import bisect
import gzip
import json
import statistics
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import InputError
from sim.textio import MAX_TEXT_BYTES, decode_text, read_text
from sim.trace.schema import LayerProfile, Trace

BACKWARD_PREFIX = "autograd::engine::evaluate_function"
MODULE_PREFIX = "nn.Module: "
FUNCTION_PREFIX = "<built-in method apply of FunctionMeta"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class _Span:
    name: str
    tid: Any
    start_us: float
    end_us: float


def _read(p: Path) -> str:
    """The file's text, gunzipped for ``.gz``, at most ``MAX_TEXT_BYTES`` either way.

    Raises:
        InputError: unreadable, a corrupt or truncated ``.gz``, too large, or not UTF-8 text.
    """
    if p.suffix != ".gz":
        return read_text(p, what="Kineto trace")
    try:
        with gzip.open(p, "rb") as fh:
            data = fh.read(MAX_TEXT_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"not a readable .gz file: {exc}", file=str(p)) from None
    if len(data) > MAX_TEXT_BYTES:
        raise InputError(f"decompresses to more than {MAX_TEXT_BYTES:,} bytes", file=str(p))
    return decode_text(data, label=str(p), what="Kineto trace")


def load_events(path: str | Path) -> tuple[list[dict[str, Any]], str | None]:
    """The complete (``ph == "X"``) events of a Chrome trace (``.json`` or ``.json.gz``) and
    the name of its first GPU (``deviceProperties``), if any.

    Raises:
        InputError: missing file, a corrupt ``.gz``, not JSON (or nested deeper than the
            parser's recursion limit), or no ``traceEvents`` list.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("Kineto trace not found", file=str(p))
    try:
        data = json.loads(_read(p))
    except RecursionError:
        raise InputError("the JSON is nested too deeply to be a trace", file=str(p)) from None
    except ValueError as exc:
        raise InputError(f"not a readable JSON trace: {exc}", file=str(p)) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise InputError(
            "no 'traceEvents' list (export with prof.export_chrome_trace)",
            file=str(p),
            field="traceEvents",
        )
    props = data.get("deviceProperties") if isinstance(data, dict) else None
    gpu = (
        props[0].get("name")
        if isinstance(props, list) and props and isinstance(props[0], dict)
        else None
    )
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"], gpu


def _span(e: dict[str, Any]) -> _Span:
    ts = float(e.get("ts", 0.0))
    return _Span(str(e.get("name", "")), e.get("tid"), ts, ts + float(e.get("dur", 0.0)))


def _inside(inner: _Span, outer: _Span) -> bool:
    return (
        inner.tid == outer.tid and outer.start_us <= inner.start_us and inner.end_us <= outer.end_us
    )


def layer_spans(
    events: list[dict[str, Any]], layers: list[str] | None, file: str
) -> dict[str, list[_Span]]:
    """Occurrences of each layer annotation, keyed by name in order of first appearance.

    Raises:
        InputError: no annotations, or a named layer is not annotated in the trace.
    """
    notes = [
        _span(e)
        for e in events
        if e.get("cat") == "user_annotation"
        and not str(e.get("name", "")).startswith("ProfilerStep")
    ]
    notes.sort(key=lambda s: s.start_us)
    if layers is None:
        notes = [s for s in notes if not any(o is not s and _inside(s, o) for o in notes)]
    out: dict[str, list[_Span]] = defaultdict(list)
    for s in notes:
        if layers is None or s.name in layers:
            out[s.name].append(s)
    if layers is not None:
        missing = [n for n in layers if n not in out]
        if missing:
            found = sorted({s.name for s in notes})
            raise InputError(
                f"layers {missing} are not record_function annotations in the "
                f"trace; annotations found: {found[:20]}",
                file=file,
                field="--layers",
            )
        return {n: out[n] for n in layers}
    if not out:
        raise InputError(
            "no record_function (user_annotation) events: wrap each layer's "
            "forward in torch.profiler.record_function(name)",
            file=file,
        )
    return dict(out)


class _Index:
    """Operator events by thread, backward events by sequence number, kernels by correlation."""

    def __init__(self, events: list[dict[str, Any]]):
        self.ops: dict[Any, list[tuple[_Span, dict]]] = defaultdict(list)
        self.backward: dict[int, list[_Span]] = defaultdict(list)
        self.launches: dict[Any, list[tuple[float, int]]] = defaultdict(list)
        self.kernel_us: dict[int, float] = defaultdict(float)
        self.python: dict[Any, list[tuple[float, str]]] = defaultdict(list)
        self.has_python = False
        for e in events:
            cat, args = e.get("cat"), e.get("args") or {}
            if cat == "cpu_op":
                s = _span(e)
                seq = args.get("Sequence number")
                if s.name.startswith(BACKWARD_PREFIX) and seq is not None:
                    self.backward[int(seq)].append(s)
                else:
                    self.ops[s.tid].append((s, args))
            elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
                self.launches[e.get("tid")].append((float(e["ts"]), int(args["correlation"])))
            elif cat in GPU_CATS and "correlation" in args:
                self.kernel_us[int(args["correlation"])] += float(e.get("dur", 0.0))
            elif cat == "python_function":
                self.has_python = True
                name = str(e.get("name", ""))
                if name.startswith((MODULE_PREFIX, FUNCTION_PREFIX)):
                    self.python[e.get("tid")].append((float(e["ts"]), name))
        self.gpu = bool(self.kernel_us)
        self.leaves = {tid: _leaf_starts(ops) for tid, ops in self.ops.items()}

    def ops_in(self, span: _Span) -> int:
        """Leaf operator events inside ``span`` on its thread (module doc)."""
        leaves = self.leaves.get(span.tid, ([], []))
        lo = bisect.bisect_left(leaves[0], span.start_us)
        hi = bisect.bisect_right(leaves[0], span.end_us)
        return sum(1 for end in leaves[1][lo:hi] if end <= span.end_us)

    def calls_in(self, span: _Span) -> tuple[int, int]:
        """``(module calls, Function applies)`` starting inside ``span`` on its thread."""
        names = [n for t, n in self.python.get(span.tid, []) if span.start_us <= t <= span.end_us]
        modules = sum(n.startswith(MODULE_PREFIX) for n in names)
        return modules, sum(n.startswith(FUNCTION_PREFIX) for n in names)

    def seqs_in(self, span: _Span) -> set[int]:
        return {
            int(a["Sequence number"])
            for s, a in self.ops.get(span.tid, [])
            if "Sequence number" in a and _inside(s, span)
        }

    def busy_us(self, span: _Span) -> float:
        """CPU: the span's duration; GPU: its launched kernels' summed duration."""
        if not self.gpu:
            return span.end_us - span.start_us
        return sum(
            self.kernel_us.get(c, 0.0)
            for t, c in self.launches.get(span.tid, [])
            if span.start_us <= t <= span.end_us
        )


def _leaf_starts(ops: list[tuple[_Span, dict]]) -> tuple[list[float], list[float]]:
    """``(starts, ends)`` of the operator spans that contain no other one, by start time."""
    spans = sorted((s for s, _ in ops), key=lambda s: (s.start_us, -s.end_us))
    leaves = [
        s for i, s in enumerate(spans) if i + 1 == len(spans) or spans[i + 1].start_us >= s.end_us
    ]
    return [s.start_us for s in leaves], [s.end_us for s in leaves]


def _bytes_for(name: str, index: int, ref: Trace | None, n_layers: int) -> dict[str, Any]:
    if ref is None:
        return dict(param_bytes=0.0, act_bytes=0.0, out_bytes=0.0)
    by_name = {layer.name: layer for layer in ref.layers}
    layer = by_name.get(name)
    if layer is None and len(ref.layers) == n_layers:
        layer = ref.layers[index]
    if layer is None:
        raise InputError(
            f"layer {name!r} is not in the --bytes-from trace {ref.name!r} "
            f"(layers: {[x.name for x in ref.layers][:12]}) and the layer counts "
            "differ",
            field="--bytes-from",
        )
    return dict(
        param_bytes=layer.param_bytes,
        act_bytes=layer.act_bytes,
        out_bytes=layer.out_bytes,
        flops=layer.flops,
    )


def read_kineto(
    path: str | Path,
    *,
    microbatch_size: int,
    dtype: str = "fp32",
    name: str | None = None,
    layers: list[str] | None = None,
    bytes_from: Trace | None = None,
) -> Trace:
    """A :class:`Trace` from a torch.profiler Chrome trace (method in the module docstring).

    Args:
        path: the ``.json`` (or ``.json.gz``) trace.
        microbatch_size: samples per micro-batch in the profiled steps.
        dtype: training dtype of the profiled model.
        name: the model name (default: the file's stem).
        layers: annotation names forming the chain (default: top-level annotations).
        bytes_from: a native trace of the same layers supplying parameter, activation and
            output bytes and FLOPs (scaled to ``microbatch_size``).

    Raises:
        InputError: unreadable file, no annotations, unknown layer names, a layer without
            backward events, or a ``bytes_from`` trace without the layer.
    """
    file = str(path)
    events, gpu_name = load_events(path)
    spans = layer_spans(events, layers, file)
    index = _Index(events)
    ref = bytes_from.scaled_to_microbatch(microbatch_size) if bytes_from else None
    out = [
        _layer_profile(layer, i, occurrences, index, ref, len(spans), file)
        for i, (layer, occurrences) in enumerate(spans.items())
    ]
    steps = max(len(v) for v in spans.values())
    prov = {
        "source": "sim.trace.kineto.read_kineto",
        "file": file,
        "timing": "GPU kernel time per layer" if index.gpu else "CPU wall time per layer",
        "occurrences_per_layer": steps,
        "python_calls": "fwd_modules/fwd_functions from python_function events"
        if index.has_python
        else "no python_function events (profile with_stack=True to count module calls)",
        "notes": "forward: record_function spans; backward: autograd evaluate_function events "
        "matched by sequence number; median over occurrences; "
        + (
            f"bytes and flops from trace {bytes_from.name!r}"
            if bytes_from
            else "param/act/out bytes are 0: not in a Kineto trace (give --bytes-from)"
        ),
    }
    return Trace(
        name=name or Path(file).name.split(".")[0],
        layers=tuple(out),
        microbatch_size=microbatch_size,
        dtype=dtype,
        device=(gpu_name or "cuda") if index.gpu else "cpu",
        provenance=prov,
    )


def _layer_profile(
    layer: str,
    i: int,
    occurrences: list[_Span],
    index: _Index,
    ref: Trace | None,
    n_layers: int,
    file: str,
) -> LayerProfile:
    """Layer ``i`` of ``n_layers`` (``layer``) from its forward spans: medians over the
    occurrences of its forward busy time, its backward nodes' (matched by sequence number), op
    and call counts (s, counts); bytes and FLOPs from ``ref``.

    Raises:
        InputError: the layer has no backward events.
    """
    fwd, bwd, fwd_ops, bwd_ops, modules, functions = [], [], [], [], [], []
    for span in occurrences:
        fwd.append(index.busy_us(span))
        fwd_ops.append(index.ops_in(span))
        calls = index.calls_in(span)
        modules.append(calls[0])
        functions.append(calls[1])
        nodes = [b for q in index.seqs_in(span) for b in index.backward.get(q, [])]
        bwd.append(sum(index.busy_us(b) for b in nodes))
        bwd_ops.append(sum(index.ops_in(b) for b in nodes))
    if not any(bwd):
        raise InputError(
            f"layer {layer!r}: no backward events (autograd::engine::"
            "evaluate_function with the forward's sequence numbers); profile "
            "the backward too, with record_shapes or default settings",
            file=file,
            field="--layers",
        )
    return LayerProfile(
        name=layer,
        fwd_s=statistics.median(fwd) * 1e-6,
        bwd_s=statistics.median(bwd) * 1e-6,
        fwd_ops=float(statistics.median(fwd_ops)),
        bwd_ops=float(statistics.median(bwd_ops)),
        fwd_modules=float(statistics.median(modules)) if index.has_python else None,
        fwd_functions=float(statistics.median(functions)) if index.has_python else None,
        **_bytes_for(layer, i, ref, n_layers),
    )

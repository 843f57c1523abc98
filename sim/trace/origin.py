"""Where a trace's times come from: measured, a roofline estimate, or the analytic model.

:func:`trace_origin` reads the trace's provenance:

* ``roofline estimate``: ``sim profile --model ... --for-gpu`` (``provenance.method``, e.g.
  ``FakeTensorMode analysis``): each operator's counted FLOPs and bytes at a GPU preset's
  datasheet peak and HBM bandwidth, nothing run: an upper bound on speed;
* ``analytic``: generated from the model's shape by :mod:`sim.trace.generator` /
  :mod:`sim.trace.decoder` (``provenance.source`` ``analytic: ...``): the kernel model of
  :mod:`sim.compute` on the GPU (achievable fractions of the datasheet peaks);
* ``measured``: a provenance that names a measurement or profiler (:data:`MEASURED_WORDS` in
  its ``source``, ``format`` or ``timing``): layers timed on a device (``sim profile``,
  ``backends.torch``), read from a torch profiler trace (``sim trace import-kineto``) or from
  a published profile (PipeDream's);
* ``hand-written``: ``provenance.source`` says ``hand`` (``{source: hand}``, ``hand-typed``);
* ``unknown``: anything else (no provenance, or one that names no measurement): listed as
  such, not as measured.

Every row of ``results.csv`` and every winner carry it (``trace_origin``), and ``sim run``
warns when an estimate stands in for a measurement.
"""

from __future__ import annotations

from sim.hardware.gpu_compute import spec_sources
from sim.trace.schema import Trace

MEASURED, ROOFLINE, ANALYTIC = "measured", "roofline estimate", "analytic"
HAND, UNKNOWN = "hand-written", "unknown"
ORIGINS = (MEASURED, ROOFLINE, ANALYTIC, HAND, UNKNOWN)

MEASURED_WORDS = ("profil", "measur", "kineto", "pipedream", "backends.torch", "nsys", "nsight")
"""Words (lower case) of a provenance that names a measurement or a profiler: ``sim
profile``'s ``backends.torch.profile...``, ``sim.trace.kineto.read_kineto``, PipeDream's
``github.com/msr-fiddle/pipedream@...`` (its graph.txt: "times ... as profiled")."""
_SAID_BY = ("source", "format", "timing")


def trace_origin(trace: Trace) -> str:
    """One of :data:`ORIGINS` (module doc).

    Example:
        >>> trace_origin(Trace("t", (), 1, "bf16", "H100", {"source": "analytic: x"}))
        'analytic'
        >>> trace_origin(Trace("t", (), 1, "bf16", "H100", {"method": "FakeTensorMode analysis"}))
        'roofline estimate'
        >>> trace_origin(Trace("t", (), 1, "fp32", "cpu", {"source": "backends.torch.profile"}))
        'measured'
        >>> trace_origin(Trace("t", (), 1, "fp32", "cpu", {"source": "hand"}))
        'hand-written'
    """
    prov = trace.provenance or {}
    source = str(prov.get("source", "")).strip().lower()
    if prov.get("method"):
        return ROOFLINE
    if source.startswith("analytic"):
        return ANALYTIC
    said = " ".join(str(prov.get(k, "")) for k in _SAID_BY).lower()
    if any(w in said for w in MEASURED_WORDS):
        return MEASURED
    if source.startswith("hand") or source.startswith("by hand"):
        return HAND
    return UNKNOWN


def origin_warning(model: str, trace: Trace, ref: str | None = None) -> str | None:
    """What ``sim run`` says about ``model``'s trace when it is not measured, or None
    (``ref``: the model's ``trace:`` as the experiment writes it, when known)."""
    origin = trace_origin(trace)
    if origin == ROOFLINE:
        return (
            f"{model}: trace {trace.name} is a roofline ESTIMATE ({trace.provenance['method']}): "
            "every operator at the GPU's datasheet peak or HBM bandwidth, nothing measured; "
            "throughput, TFLOP/s and MFU are upper bounds. Profile on the GPU (sim profile "
            "--device cuda) for a measurement"
        )
    if origin == ANALYTIC:
        what = _trace_label(trace, ref)
        return (
            f"{model}: trace {what} is analytic (the kernel model of sim.compute on "
            f"{trace.device}), not measured"
        )
    if origin in (HAND, UNKNOWN):  # listed as measured before: say what the times are
        said = (trace.provenance or {}).get("source", "none")
        return (
            f"{model}: trace {trace.name}'s times are {origin} (provenance source: {said}), "
            "not a measurement a profiler made"
        )
    return None


def _trace_label(trace: Trace, ref: str | None) -> str:
    """The trace as the user named it: ``config.json (a Hugging Face config)`` for a
    ``trace:`` that is a config (whose trace name is the file's stem, ``config``), ``NAME
    (from a Hugging Face config)`` for a trace written from one, else its name."""
    if ref is not None and ref.endswith(".json"):
        return f"{ref} (a Hugging Face config)"
    if (trace.provenance or {}).get("config"):
        return f"{trace.name} (from a Hugging Face config)"
    return trace.name


def gpu_figure_sources(trace: Trace) -> list[tuple[str, str, str]]:
    """``(figure, value, source)`` per GPU figure an analytic trace's kernel model used
    (``provenance.inputs.gpu``: :func:`sim.hardware.gpu_compute.spec_sources`), empty for a
    trace without one (measured, or a roofline estimate)."""
    inputs = (trace.provenance or {}).get("inputs")
    gpu = inputs.get("gpu") if isinstance(inputs, dict) else None
    if not isinstance(gpu, dict):
        return []
    return [(key, f"{gpu[key]}", src) for key, src in spec_sources(gpu).items()]

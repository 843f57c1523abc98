"""Traces: per-layer profiles (schema, readers, generator). See :mod:`sim.trace.schema`.

Readers: :func:`read_trace` / :func:`write_trace` (native CSV + YAML), :func:`read_pipedream`
(PipeDream ``graph.txt``), :func:`transformer_trace` / :func:`preset_trace` (analytic GPT and
BERT), and :func:`load_trace`, which resolves any of them from a path or a shipped name.
"""

from sim.trace.generator import MODEL_PRESETS, preset_trace, transformer_trace
from sim.trace.loader import available_traces, load_trace, traces_dir
from sim.trace.native import read_trace, write_trace
from sim.trace.pipedream import read_pipedream
from sim.trace.schema import LayerProfile, Trace, dtype_bytes
from sim.trace.shipped import build_shipped

__all__ = [
    "LayerProfile",
    "MODEL_PRESETS",
    "Trace",
    "available_traces",
    "build_shipped",
    "dtype_bytes",
    "load_trace",
    "preset_trace",
    "read_pipedream",
    "read_trace",
    "traces_dir",
    "transformer_trace",
    "write_trace",
]

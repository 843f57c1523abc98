"""An experiment loaded once: the validated configuration with its hardware and traces.

:func:`prepare` reads what every later step shares (the hardware topology, each model's trace
at the training dtype, attention modelled), so the sweep (:mod:`sim.plan.sweep`), the planner's bounds
(:mod:`sim.plan.bounds`) and point evaluation (:mod:`sim.plan.point_row`) never load files again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.config import ExperimentConfig
from sim.hardware.loader import load_hardware
from sim.hardware.topology import Topology
from sim.memory.attention import with_attention
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

"""Experiment configuration: pydantic models of an experiment YAML (unknown keys are errors).

An experiment names the hardware (a preset or an inline description), one or more models (each
a trace), the training settings, and a sweep grid. Every axis of the grid may be a single value
or a list; a point of the grid is one :class:`PointConfig`, which is what the engine simulates and
what ``winner.yaml`` stores.

Example (``experiments/dgx1.yaml``)::

    name: dgx1
    hardware: dgx1-v100-16gb
    models:
      - {name: gnmt16, trace: gnmt16, global_batch: 256, microbatch_size: [16, 32, 64]}
    training: {dtype: fp16, optimizer: adam}
    sweep: {schedule: [gpipe, 1f1b], stages: [2, 4, 8], dp_width: [1, 2], microbatch_size: [1, 2]}

``sim.config`` is the public API: every name below is importable from it. One module per
section of the file: :mod:`~sim.config.model` (``models:``), :mod:`~sim.config.training`,
:mod:`~sim.config.sweep`, :mod:`~sim.config.options`, :mod:`~sim.config.memory`, and
:mod:`~sim.config.experiment` (the whole file); under them :mod:`~sim.config.fields` (the strict
base, axis types, names) and :mod:`~sim.config.limits`; beside them
:mod:`~sim.config.framework_spec` (the ``framework:`` spec text), :mod:`~sim.config.load`
(reading and validating a file) and :mod:`~sim.config.hashing` (the cache key).
"""

from sim.config.experiment import ExperimentConfig
from sim.config.fields import NAME_PATTERN, IntList, StrList, as_list
from sim.config.framework_spec import framework_spec_of, parse_framework_spec
from sim.config.hashing import config_hash
from sim.config.limits import (
    MAX_GPUS,
    MAX_GRID,
    MAX_ITERATIONS,
    MAX_MICROBATCHES,
    MIRROR_ABOVE_GPUS,
)
from sim.config.load import load_experiment, parse_experiment
from sim.config.memory import MemoryConfig
from sim.config.model import ModelConfig
from sim.config.options import OptionsConfig
from sim.config.sweep import SweepConfig
from sim.config.training import PrecisionOptions, TrainingConfig

__all__ = [
    "MAX_GPUS",
    "MAX_GRID",
    "MAX_ITERATIONS",
    "MAX_MICROBATCHES",
    "MIRROR_ABOVE_GPUS",
    "NAME_PATTERN",
    "ExperimentConfig",
    "IntList",
    "MemoryConfig",
    "ModelConfig",
    "OptionsConfig",
    "PrecisionOptions",
    "StrList",
    "SweepConfig",
    "TrainingConfig",
    "as_list",
    "config_hash",
    "framework_spec_of",
    "load_experiment",
    "parse_experiment",
    "parse_framework_spec",
]

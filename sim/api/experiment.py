"""What every entry point of :mod:`sim.api` takes: an experiment (a YAML path, its content as a
mapping, or a parsed :class:`sim.config.ExperimentConfig`), parsed and loaded, and the checks of
the keyword arguments they share (folders, flags).

Bad input raises :class:`sim.errors.InputError` naming the file (or argument) and field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.config import ExperimentConfig, load_experiment, parse_experiment
from sim.errors import expect_type
from sim.point.experiment import Prepared, prepare

Experiment = str | os.PathLike[str] | Mapping[str, Any] | ExperimentConfig
"""A YAML path, the YAML's content as a mapping, or a parsed experiment."""


MAPPING = "<experiment>"
"""The file name a mapping or a parsed experiment goes by in messages (paths in it resolve
against the working folder)."""


def parse(experiment: Experiment) -> tuple[ExperimentConfig, str]:
    """The parsed experiment and the file it came from (:data:`MAPPING` for a mapping or an
    object).

    Raises:
        InputError: not one of :data:`Experiment` (naming ``experiment``), or a bad file or
            field.
    """
    expect_type(experiment, (str, os.PathLike, Mapping, ExperimentConfig), "experiment",
                "a YAML path, a mapping with the YAML's content or an ExperimentConfig")  # fmt: skip
    if isinstance(experiment, ExperimentConfig):
        return experiment, MAPPING
    if isinstance(experiment, Mapping):
        return parse_experiment(dict(experiment)), MAPPING
    return load_experiment(Path(experiment)), str(experiment)


def load(experiment: Experiment) -> Prepared:
    """Parse ``experiment`` and load its hardware and traces.

    Relative trace paths resolve against the YAML's folder (a mapping's: the working one).

    Raises:
        InputError: a bad file, preset, trace or field, or an argument of the wrong type.
    """
    exp, file = parse(experiment)
    return prepare(exp, file)


def folder_arg(out: object, field: str = "out") -> Path | None:
    """``out`` as a path (None stays None).

    Raises:
        InputError: not a path (naming ``field``).
    """
    if out is None:
        return None
    expect_type(out, (str, os.PathLike), field, "a folder path")
    return Path(out)  # type: ignore[arg-type]


def check_flags(**flags: object) -> None:
    """Every flag must be a bool.

    Raises:
        InputError: naming the flag.
    """
    for name, value in flags.items():
        expect_type(value, bool, name, "True or False")

"""pipesim's Python API: what the ``sim`` command does, callable from a notebook or a script.

Each ``sim`` command is a thin adapter over one of these functions, so the command line and a
notebook run the same code:

=================  ==================================================================  =================
function           does                                                                command
=================  ==================================================================  =================
:func:`run`        plan an experiment's grid and write results, winner, plots          ``sim run``
:func:`plan`       the same planning, nothing written: rows and winners in memory      (none)
:func:`simulate`   one configuration: metrics and the event log                        (none)
:func:`validate`   replay a configuration on real devices, compare, write              ``sim validate``
:func:`partition`  split a trace's layers into pipeline stages                         ``sim partition``
:func:`memory`     every configuration's peak memory per pipeline rank, no simulation  ``sim memory``
=================  ==================================================================  =================

This module only gathers them; each family of entry points is a module of its own:
:mod:`sim.api.planning` (``run``, ``plan``, ``simulate``), :mod:`sim.api.validation`
(``validate``), :mod:`sim.api.partitioning` (``partition``) and :mod:`sim.api.memory_peaks`
(``memory``), over :mod:`sim.api.experiment` (what they all take: :data:`Experiment`,
:func:`parse`, :func:`load`). Import them from here (``from sim.api import plan``).

An experiment is a YAML path, a mapping with the YAML's content, or a parsed
:class:`sim.config.ExperimentConfig`. Units: seconds and bytes, samples per second. Bad input
raises :class:`sim.errors.InputError` naming the file (or option) and field; nothing is written
then.

Example (a 4-GPU pipeline of BERT-Large on a DGX-1, one configuration):
    >>> import sim.api
    >>> exp = {"name": "b", "hardware": "dgx1-v100-16gb",
    ...        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
    ...        "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 4}}
    >>> one = sim.api.simulate(exp)
    >>> one.point.microbatches, one.metrics.fits
    (8, True)
"""

from __future__ import annotations

from sim.api.experiment import Experiment, load, parse
from sim.api.memory_peaks import memory
from sim.api.partitioning import partition
from sim.api.planning import plan, run, simulate
from sim.api.validation import validate
from sim.report.results import MemoryAnswer, PartitionPlan, Plan, RunOutcome, Simulation

__all__ = [
    "Experiment",
    "PartitionPlan",
    "Plan",
    "RunOutcome",
    "Simulation",
    "MemoryAnswer",
    "load",
    "memory",
    "parse",
    "partition",
    "plan",
    "run",
    "simulate",
    "validate",
]

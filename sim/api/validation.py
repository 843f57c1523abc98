"""Replaying a configuration on real devices and comparing with the prediction:
:func:`validate` (``sim validate``), over :mod:`sim.validate` with a backend's
:class:`sim.replay.Replayer`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from sim.replay import Replayer
from sim.validate import Validation, ValidationSpec, run_validation
from sim.validate.spec import check_arguments


def validate(
    config: str | os.PathLike[str],
    *,
    replayer: Replayer,
    out: str | os.PathLike[str] | None = None,
    schedules: tuple[str, ...] = (),
    microbatches: tuple[int, ...] = (),
    device: str = "cpu",
    nproc: int | None = None,
    iterations: int = 3,
    warmup: int = 1,
    torch_builtin: bool = False,
    rank: int | None = None,
    stages: int | None = None,
    timeout_s: float = 600.0,
    virtual_stages: int | None = None,
    numerics: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    console: Console | None = None,
) -> Validation:
    """Replay a configuration on real devices and compare with the prediction: ``sim validate``.

    Writes ``validation.csv`` (seconds, bytes, ``error = (predicted - measured) / measured``),
    ``validation_breakdown.csv`` and the timelines into ``out`` as one set
    (:mod:`sim.validate`).

    Args:
        config: a single-configuration experiment (a ``winner.yaml`` of ``sim run``) whose
            trace ``sim profile`` made.
        replayer: the backend, e.g. ``backends.torch.replay.replayer.TorchReplayer()``.
        out: folder to write into (default: beside ``config``).
        schedules: replay these schedules instead of the file's.
        microbatches: replay these micro-batch counts instead of the file's.
        device: ``cpu`` (gloo) or ``cuda`` (NCCL).
        nproc: ranks (default ``stages x tensor_parallel``; must equal it).
        iterations: measured iterations.
        warmup: warm-up iterations.
        torch_builtin: also run torch's own ScheduleGPipe / Schedule1F1B.
        rank: run only this pipeline stage, alone in one process.
        stages: with ``rank``, the depth of the pipeline it belongs to.
        timeout_s: limit per replay, seconds.
        virtual_stages: stage chunks per rank for every replayed schedule (default: the
            file's where the schedule takes it, else the schedule's smallest).
        numerics: check each replay's losses and gradients against the same model run in one
            process (``numerics`` columns).
        on_row: called with each row as it is measured.
        console: where the progress of the replays goes on a terminal (the one ``on_row``
            prints to; default: standard error).

    Raises:
        InputError: bad options, file or configuration, or an argument of the wrong type
            (naming it; before any replay starts).

    A replay that fails is a row with ``status`` ``failed`` (the others still run).

    Example (needs torch; a few seconds on a CPU)::

        from backends.torch.replay.replayer import TorchReplayer
        v = sim.api.validate("results/cpu-gpt-tiny/winner.yaml", replayer=TorchReplayer(),
                             nproc=2, schedules=("gpipe", "1f1b"))
        v.table[["schedule", "measured_iteration_s", "predicted_iteration_s", "error"]]
    """
    check_arguments(locals())
    spec = ValidationSpec(
        schedules=tuple(schedules),
        microbatches=tuple(microbatches),
        device=device,
        nproc=nproc,
        iterations=iterations,
        warmup_iterations=warmup,
        torch_builtin=torch_builtin,
        timeout_s=timeout_s,
        rank=rank,
        stages=stages,
        virtual_stages=virtual_stages,
        numerics=numerics,
    )
    return run_validation(Path(config), spec, replayer, Path(out) if out else None, on_row, console)

"""Every configuration's peak memory per pipeline rank, without simulating time:
:func:`memory` (``sim memory``), over :func:`sim.plan.memory_grid.grid_memory`; with a folder,
``memory.csv`` and ``memory_ranks.png``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sim.api.experiment import Experiment, check_flags, folder_arg, load
from sim.atomic import atomic_write_text, check_writable
from sim.errors import expect_int
from sim.hardware.provenance import reserve_source
from sim.plan.memory_grid import grid_memory
from sim.plan.sweep import expand
from sim.progress import progress as progress_bar
from sim.report.provenance import experiment_sources, joined
from sim.report.results import MemoryAnswer


def memory(
    experiment: Experiment,
    *,
    out: str | os.PathLike[str] | None = None,
    advice: bool = True,
    plots: bool = True,
    jobs: int = 1,
) -> MemoryAnswer:
    """Every configuration's peak memory per pipeline rank, by category, without simulating
    time (:func:`sim.plan.memory_grid.grid_memory`, the model of the planner's memory bound):
    ``sim memory``. With ``out``, writes ``memory.csv`` (one row per configuration and
    pipeline rank, bytes) and ``memory_ranks.png`` (stacked bars per pipeline rank).

    Args:
        experiment: see :data:`Experiment`.
        out: folder to write into (created; files of the same names replaced atomically).
        advice: for configurations that do not fit, find the first single change that fits.
        plots: write the PNG.
        jobs: worker processes computing the configurations (forked; the same answers,
            :mod:`sim.plan.memory_jobs`).

    Raises:
        InputError: bad experiment, hardware, trace, grid, output folder or ``jobs`` (nothing
            written).

    Example:
        >>> exp = {"name": "b", "hardware": "dgx1-v100-16gb",
        ...        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
        ...        "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 4}}
        >>> a = memory(exp)
        >>> a.results[0].memory.fits, len(a.results[0].memory.ranks)
        (True, 4)
    """
    from sim.report.memory_ranks import memory_frame, plot_memory_ranks  # pandas, matplotlib

    check_flags(advice=advice, plots=plots)
    expect_int(jobs, "jobs", 1)
    if out is not None:
        folder_arg(out)
        check_writable(out, option="--out", directory=True)
    prep = load(experiment)
    points, skipped = expand(prep)
    t0 = time.perf_counter()
    with progress_bar(len(points), "computing memory", "configurations") as on_done:
        results = grid_memory(prep, points, advice=advice, on_done=on_done, jobs=jobs)
    wall = time.perf_counter() - t0
    if out is None:
        return MemoryAnswer(results, skipped, None, wall, prep.topology.notes)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    sources = experiment_sources(prep)
    frame = memory_frame(results, sources, reserve_source(prep.topology.gpus[0].reserve))
    atomic_write_text(folder / "memory.csv", frame.to_csv(index=False))
    if plots and any(r.memory is not None for r in results):
        plot_memory_ranks(results, folder / "memory_ranks.png", source=joined(sources))
    return MemoryAnswer(results, skipped, folder, wall, prep.topology.notes)

"""``sim memory --jobs N``: the grid points' peaks (:func:`sim.point.memory.point_memory`)
computed ahead in ``N`` forked worker processes, handed back in the order of the points.

Each point's peaks are a pure function of the prepared experiment, so where they are computed
changes no number (``tests/test_memory_grid_speed.py`` holds a pool's answers to this
process's). The workers are forked as ``sim run``'s local pool's are
(:class:`sim.plan.executors.LocalExecutor`: they inherit the loaded experiment, die with their
parent and leave Ctrl-C to it); a point the workers cannot resolve (an
:class:`~sim.errors.InputError`) comes back as None, and the caller resolves it itself to say
why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

from sim.errors import InputError
from sim.plan.executors import _fork_context, collector_paused
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.memory import PointMemory, point_memory
from sim.procs import die_with_parent, leave_interrupts_to_parent

MIN_POINTS = 32
"""Fewest points worth a pool (an assumption from two timings on the loaded 2-core machine,
issue 26: forking and feeding the workers cost about 0.5 s of wall time, more than the 2 and
9 points of ``deepseek-v3-256xgb200`` and ``llama3.1-8b-torchtitan-fsdp2-tp`` take in this
process); ``experiments/dgx1.yaml`` has 174."""
CHUNKS_PER_JOB = 8
"""Slices of the points per worker: enough for load balance (points of 8 stages cost several
times those of 2), few enough that handing them out is cheap."""

_WORKER: dict = {}


def _init_worker(prep: Prepared, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    leave_interrupts_to_parent()
    _WORKER["prep"] = prep


def _worker_memory(point: PointConfig) -> PointMemory | None:
    """One point's peaks in a worker (None: it cannot be resolved)."""
    with collector_paused():
        try:
            return point_memory(_WORKER["prep"], point)
        except InputError:
            return None


@contextmanager
def ahead(prep: Prepared, points: list[PointConfig], jobs: int) -> Iterator[Iterator]:
    """An iterator over ``points``' peaks (a :class:`~sim.point.memory.PointMemory`, or None:
    not computed ahead), in order, computed by ``jobs`` forked workers while the caller uses
    the earlier ones; with ``jobs <= 1`` or fewer than :data:`MIN_POINTS` points, None for
    each (the caller computes them). The workers stop when the block ends.

    Raises:
        Exception: what :func:`~sim.point.memory.point_memory` raises in a worker, other than
            :class:`~sim.errors.InputError`.
    """
    if jobs <= 1 or len(points) < MIN_POINTS or not hasattr(os, "fork"):
        yield iter([None] * len(points))
        return
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=_fork_context(),
        initializer=_init_worker,
        initargs=(prep, os.getpid()),
    )
    try:
        chunk = max(1, len(points) // (jobs * CHUNKS_PER_JOB))
        yield pool.map(_worker_memory, points, chunksize=chunk)
    finally:
        pool.shutdown(cancel_futures=True)

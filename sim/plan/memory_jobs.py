"""``sim memory --jobs N``: each grid point's answer (its peaks and advice, :func:`sim.plan.
memory_grid.grid_memory`) computed ahead in ``N`` forked worker processes, handed back in the
order of the points.

Each answer is a pure function of the prepared experiment and the point, so where it is
computed changes no number (``tests/test_memory_grid_speed.py`` holds a pool's answers to this
process's); each worker keeps its own memo (answers of points and changes it resolved) across
the points it is given. The workers are forked as ``sim run``'s local pool's are
(:class:`sim.plan.executors.LocalExecutor`: they inherit the loaded experiment, die with their
parent and leave Ctrl-C to it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sim.plan.executors import chunk_size, collector_paused, forked_pool
from sim.point.config import PointConfig
from sim.point.experiment import Prepared

MIN_POINTS = 32
"""Fewest points worth a pool (an assumption from two timings on the loaded 2-core machine,
issue 26: forking and feeding the workers cost about 0.5 s of wall time, more than the 2 and
9 points of ``deepseek-v3-256xgb200`` and ``llama3.1-8b-torchtitan-fsdp2-tp`` take in this
process); ``experiments/dgx1.yaml`` has 174."""
Work = Callable[[Prepared, PointConfig, dict], Any]
"""``work(prep, point, memo)``: a point's answer; ``memo`` is the worker's own, kept across
its points."""

_WORKER: dict = {}


def _init_worker(prep: Prepared, work: Work) -> None:
    _WORKER.update(prep=prep, work=work, memo={})


def _in_worker(point: PointConfig) -> Any:
    """One point's answer in a worker."""
    with collector_paused():
        return _WORKER["work"](_WORKER["prep"], point, _WORKER["memo"])


@contextmanager
def ahead(prep: Prepared, points: list[PointConfig], jobs: int, work: Work) -> Iterator[Iterator]:
    """An iterator over ``work``'s answer for each of ``points`` (None: not computed ahead), in
    order, computed by ``jobs`` forked workers while the caller takes the earlier ones; with
    ``jobs <= 1`` or fewer than :data:`MIN_POINTS` points, None for each (the caller computes
    them). ``work`` reaches the workers by fork (never pickled); its answers come back
    pickled. The workers stop when the block ends.

    Raises:
        Exception: what ``work`` raises in a worker.
    """
    if jobs <= 1 or len(points) < MIN_POINTS or not hasattr(os, "fork"):
        yield iter([None] * len(points))
        return
    pool = forked_pool(jobs, _init_worker, (prep, work))
    try:
        yield pool.map(_in_worker, points, chunksize=chunk_size(len(points), jobs))
    finally:
        pool.shutdown(cancel_futures=True)

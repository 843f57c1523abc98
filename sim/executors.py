"""Where the grid points are simulated: this process, a local process pool, or a Ray cluster.

Every point is a pure function of the prepared experiment (:func:`sim.sweep.evaluate_row`), so
an executor only decides where that function runs; rows come back in the order of the points,
and the results do not depend on the executor.

* ``local`` (:class:`LocalExecutor`): ``jobs`` forked worker processes that die with
  ``sim run`` (:mod:`sim.procs`), or this process when ``jobs`` is 1;
* ``ray`` (:class:`RayExecutor`): one Ray task per slice of points, on the cluster named by
  ``RAY_ADDRESS`` or on a local Ray started (and shut down) here. Ray is an optional extra:
  ``pip install 'pipesim[ray]'``.

An executor is opened once per sweep and used for several batches (the planner simulates in
batches); close it with ``with``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from sim.config import PointConfig
from sim.errors import InputError
from sim.procs import die_with_parent
from sim.rows import ResultRow

EXECUTORS = ("local", "ray")
"""Names accepted by ``sim run --executor``."""

RAY_INSTALL = "pip install 'pipesim[ray]'  (or: pip install 'ray>=2.40')"
"""How to install the optional Ray extra (said when ``--executor ray`` finds no ray)."""

TASKS_PER_WORKER = 4
"""Slices per worker and batch: enough for load balance, few enough that scheduling is cheap."""

_WORKER: dict = {}


def _init_worker(prep, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    _WORKER["prep"] = prep


def _worker_row(job: tuple[PointConfig, bool]) -> ResultRow:
    from sim.sweep import evaluate_row

    return evaluate_row(_WORKER["prep"], *job)


def _rows(prep, points: list[PointConfig], screen: bool = False) -> list[ResultRow]:
    from sim.sweep import evaluate_row

    return [evaluate_row(prep, p, screen) for p in points]


class LocalExecutor:
    """Points simulated in this process (``jobs <= 1``) or in a pool of ``jobs`` forked
    processes, started at the first batch of more than one point and kept for later ones.

    Args:
        prep: the loaded experiment (:class:`sim.sweep.Prepared`).
        jobs: worker processes.
    """

    name = "local"

    def __init__(self, prep, jobs: int = 1) -> None:
        self.prep, self.jobs = prep, jobs
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the pool's workers (if any)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def map(
        self,
        points: list[PointConfig],
        on_row: Callable[[int, ResultRow], None],
        screen: bool = False,
    ) -> None:
        """Simulate ``points``; ``on_row(i, row)`` for each as it is done, in order
        (``screen``: see :func:`sim.sweep.evaluate_row`)."""
        if self.jobs <= 1 or len(points) <= 1:
            for i, p in enumerate(points):
                on_row(i, _rows(self.prep, [p], screen)[0])
            return
        if self._pool is None:
            ctx = mp.get_context("fork") if hasattr(os, "fork") else mp.get_context()
            self._pool = ProcessPoolExecutor(
                max_workers=self.jobs,
                mp_context=ctx,
                initializer=_init_worker,
                initargs=(self.prep, os.getpid()),
            )
        chunk = max(1, len(points) // (self.jobs * 8))
        jobs = [(p, screen) for p in points]
        for i, row in enumerate(self._pool.map(_worker_row, jobs, chunksize=chunk)):
            on_row(i, row)


class RayExecutor:
    """Points simulated as Ray tasks, one per slice of a batch (:data:`TASKS_PER_WORKER` per
    CPU of the cluster); the prepared experiment is put in Ray's object store once.

    Connects to ``RAY_ADDRESS`` when it is set (a cluster whose workers have pipesim
    installed), else starts a local Ray whose workers import this checkout's ``sim``; the Ray
    it started is shut down by :meth:`close`.

    Raises:
        InputError: ray is not installed (naming ``--executor`` and how to install it).
    """

    name = "ray"

    def __init__(self, prep, jobs: int = 0) -> None:
        ray = import_ray()
        self._ray = ray
        self._owner = not ray.is_initialized()
        if self._owner:
            address = os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = dict(
                address=address, include_dashboard=False, log_to_driver=False
            )
            if address is None:
                root = str(Path(__file__).resolve().parent.parent)
                path = os.pathsep.join(x for x in (root, os.environ.get("PYTHONPATH")) if x)
                kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
                if jobs:
                    kwargs["num_cpus"] = jobs
            ray.init(**kwargs)
        self._prep_ref = ray.put(prep)
        self._task = ray.remote(_rows)
        self._cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Shut down the Ray this executor started (a cluster it joined keeps running)."""
        if self._owner and self._ray.is_initialized():
            self._ray.shutdown()
        self._owner = False

    def map(
        self,
        points: list[PointConfig],
        on_row: Callable[[int, ResultRow], None],
        screen: bool = False,
    ) -> None:
        """Simulate ``points`` as Ray tasks; ``on_row(i, row)`` for each, in order."""
        if not points:
            return
        size = max(1, -(-len(points) // (self._cpus * TASKS_PER_WORKER)))
        slices = [points[i : i + size] for i in range(0, len(points), size)]
        refs = [self._task.remote(self._prep_ref, s, screen) for s in slices]
        i = 0
        for ref in refs:
            for row in self._ray.get(ref):
                on_row(i, row)
                i += 1


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        InputError: it is not installed (naming ``--executor``; the message says how to
            install it).
    """
    try:
        import ray
    except ImportError:
        raise InputError(
            f"ray is not installed; install the optional extra: {RAY_INSTALL}",
            field="--executor",
        ) from None
    return ray


def open_executor(name: str, prep, jobs: int) -> LocalExecutor | RayExecutor:
    """The executor called ``name`` (:data:`EXECUTORS`).

    Raises:
        InputError: an unknown name, or ``ray`` without ray installed (naming ``--executor``).
    """
    if name == "local":
        return LocalExecutor(prep, jobs)
    if name == "ray":
        return RayExecutor(prep, jobs)
    raise InputError(f"unknown executor {name!r}; use {' or '.join(EXECUTORS)}", field="--executor")

"""Where the grid points are simulated: this process, a local process pool, or a Ray cluster.

Every point is a pure function of the prepared experiment (:func:`sim.plan.point_row.point_row`), so
an executor only decides where that function runs; rows come back in the order of the points,
and the results do not depend on the executor. Asked to (``best``), an executor also sends back
the event log of each row that may be its model's winner (:class:`sim.point.rows.BestRows`: at least
as good as the best known when the batch started and as any row before it in the same worker),
so the winner's timeline and plots need no second simulation.

* ``local`` (:class:`LocalExecutor`): ``jobs`` forked worker processes that die with
  ``sim run`` (:mod:`sim.procs`), or this process when ``jobs`` is 1;
* ``ray`` (:class:`RayExecutor`): one Ray task per slice of points, on the cluster named by
  ``RAY_ADDRESS`` or on a local Ray started (and shut down) here. Ray is an optional extra:
  ``pip install 'pipesim[ray]'``.

An executor is opened once per sweep and used for several batches (the planner simulates in
batches); close it with ``with``.

The local pool is the standard library's, forked: a worker that dies (killed, out of memory)
breaks the pool and its point becomes a row saying so (:meth:`LocalExecutor._one_by_one`), never a
hang. Not loky's reusable executor: it starts workers as new interpreters (it refuses ``fork``),
each importing pipesim again, and ``sim run experiments/dgx1.yaml --no-plots --no-cache`` took
11.7 s instead of 7.3 s wall and 3.2 s instead of 2.1 s of CPU on two loaded cores (median of
5 runs each, ``farm-bench --vs``, issue 30), its idle workers outliving the sweep.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from sim.errors import InputError
from sim.events import EventLog
from sim.plan.point_row import failed_row, point_row
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.rows import BestRows, ResultRow
from sim.procs import die_with_parent, leave_interrupts_to_parent

EXECUTORS = ("local", "ray")
"""Names accepted by ``sim run --executor``."""

RAY_INSTALL = "pip install 'pipesim[ray]'  (or: pip install 'ray>=2.40')"
"""How to install the optional Ray extra (said when ``--executor ray`` finds no ray)."""

TASKS_PER_WORKER = 4
"""Slices per worker and batch: enough for load balance, few enough that scheduling is cheap."""

OnRow = Callable[[int, ResultRow, EventLog | None], None]
"""``on_row(i, row, log)``: the row of the ``i``-th point and its event log (or None)."""
BestKeys = Mapping[str, tuple] | None
"""The best :func:`~sim.point.rows.rank_key` per model known before a batch (None: send no logs)."""


class Executor(Protocol):
    """Runs points somewhere: ``on_row(i, row, log)`` for each, in order."""

    def map(
        self,
        points: list[PointConfig],
        on_row: OnRow,
        screen: bool = False,
        best: BestKeys = None,
    ) -> None: ...


def _rows(
    prep: Prepared, points: list[PointConfig], screen: bool = False, best: BestKeys = None
) -> list[tuple[ResultRow, EventLog | None]]:
    """Each point's row, and its log where it may be the winner (``best`` given)."""
    seen = BestRows(best) if best is not None else None
    return [_row_and_log(prep, p, screen, seen) for p in points]


def _row_and_log(
    prep: Prepared, point: PointConfig, screen: bool, seen: BestRows | None
) -> tuple[ResultRow, EventLog | None]:
    """``point``'s row, and its log where it may be the winner (``seen`` given and improved
    by the row); any other log is dropped with the collector off (:func:`collector_paused`)."""
    with collector_paused():
        row, log = point_row(prep, point, screen=screen)
        if seen is None or not seen.improves(row):
            log = None  # dropped here, unseen by the collector
    return row, log


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with Python's cyclic garbage collector off (as it was before, after).

    A point's event log is tens of thousands of records (a 16-GPU point of
    ``benchmarks/speed/bench_planner.py``: 12,000 events and 15,000 memory events), made while the
    engine runs with the collector off (:meth:`sim.engine.pipeline.Engine.run`). Were
    the collector on when the log is dropped, the first collection after the run would walk
    every record once, and a later one again, for nothing: the records hold no cycles and
    die by reference counting. The executors keep it off from resolving a point to dropping
    its log (when it is not a winner's), so no collection sees it: 15 to 28 ms per 16-GPU
    point, 8 % of ``bench_planner.py --jobs 1``'s CPU time (measured with
    ``gc.callbacks`` for issue 17). What cyclic garbage the point leaves is collected by
    the next collection as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


CHUNKS_PER_JOB = 8
"""Slices of a batch's points per worker: enough for load balance (points of 8 stages cost
several times those of 2), few enough that handing them out is cheap."""


def chunk_size(points: int, jobs: int) -> int:
    """Points per task handed to a pool of ``jobs`` workers (:data:`CHUNKS_PER_JOB`)."""
    return max(1, points // (jobs * CHUNKS_PER_JOB))


def forked_pool(
    jobs: int, initializer: Callable[..., None], initargs: tuple
) -> ProcessPoolExecutor:
    """A pool of ``jobs`` forked workers (they inherit what this process has loaded; the
    ``initargs`` reach them by fork), each dying with this process and leaving Ctrl-C to it
    (the parent says "interrupted" and stops the pool), then running
    ``initializer(*initargs)``."""
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=fork_context(),
        initializer=_forked,
        initargs=(os.getpid(), initializer, initargs),
    )


def _forked(parent_pid: int, initializer: Callable[..., None], initargs: tuple) -> None:
    die_with_parent(parent_pid)
    leave_interrupts_to_parent()
    initializer(*initargs)


_WORKER: dict = {}


def _init_worker(prep: Prepared) -> None:
    _WORKER["prep"] = prep
    _WORKER["best"] = BestRows()


def _worker_row(job: tuple[PointConfig, bool, BestKeys]) -> tuple[ResultRow, EventLog | None]:
    """One point in a pool worker, which remembers the best rows it computed across batches."""
    point, screen, best = job
    seen: BestRows = _WORKER["best"]
    if best is not None:
        seen.merge(best)  # the parent's best, as of this batch
    return _row_and_log(_WORKER["prep"], point, screen, seen if best is not None else None)


class WorkerDied(RuntimeError):
    """A pool worker ended without a result (the row of the point it ran says so)."""


def fork_context() -> Any:
    """Forked workers where the platform forks (they inherit the prepared experiment)."""
    return mp.get_context("fork") if hasattr(os, "fork") else mp.get_context()


class LocalExecutor:
    """Points simulated in this process (``jobs <= 1``) or in a pool of ``jobs`` forked
    processes, started at the first batch of more than one point and kept for later ones.

    Args:
        prep: the loaded experiment (:class:`sim.point.experiment.Prepared`).
        jobs: worker processes.
    """

    name = "local"

    def __init__(self, prep: Prepared, jobs: int = 1) -> None:
        self.prep, self.jobs = prep, jobs
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def forked(self) -> bool:
        """Whether the pool's workers are forked (until :meth:`close`)."""
        return self._pool is not None

    def close(self) -> None:
        """Stop the pool's workers (if any)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def map(
        self,
        points: list[PointConfig],
        on_row: OnRow,
        screen: bool = False,
        best: BestKeys = None,
    ) -> None:
        """Simulate ``points``; ``on_row(i, row, log)`` for each as it is done, in order
        (``screen``: see :func:`sim.plan.point_row.point_row`; ``best``: see the module doc)."""
        if self.jobs <= 1 or len(points) <= 1:
            seen = BestRows(best) if best is not None else None
            for i, p in enumerate(points):
                with collector_paused():  # a log on_row does not keep dies unseen by it
                    on_row(i, *_row_and_log(self.prep, p, screen, seen))
            return
        if self._pool is None:
            self._pool = forked_pool(self.jobs, _init_worker, (self.prep,))
        chunk = chunk_size(len(points), self.jobs)
        jobs = [(p, screen, best) for p in points]
        done = 0
        try:
            for row, log in self._pool.map(_worker_row, jobs, chunksize=chunk):
                on_row(done, row, log)
                done += 1
        except BrokenProcessPool:
            self.close()
            self._one_by_one(jobs, done, on_row)

    def _one_by_one(
        self, jobs: list[tuple[PointConfig, bool, BestKeys]], start: int, on_row: OnRow
    ) -> None:
        """After a worker died (killed, out of memory, a crash in C code): the points from
        ``start`` on, each in a pool of one worker, so the point that kills its worker is
        known; its row says so (:func:`~sim.plan.point_row.failed_row`) and the sweep goes on.
        The next batch starts a full pool again."""
        pool = None
        for i in range(start, len(jobs)):
            if pool is None:
                pool = forked_pool(1, _init_worker, (self.prep,))
            try:
                row, log = pool.submit(_worker_row, jobs[i]).result()
            except BrokenProcessPool:
                pool.shutdown(cancel_futures=True)
                pool = None
                died = WorkerDied("the worker process simulating this point died (killed, out "
                                  "of memory, or a crash outside Python)")  # fmt: skip
                row, log = failed_row(self.prep, jobs[i][0], died), None
            on_row(i, row, log)
        if pool is not None:
            pool.shutdown()


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

    def __init__(self, prep: Prepared, jobs: int = 0) -> None:
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
        on_row: OnRow,
        screen: bool = False,
        best: BestKeys = None,
    ) -> None:
        """Simulate ``points`` as Ray tasks; ``on_row(i, row, log)`` for each, in order."""
        if not points:
            return
        size = max(1, -(-len(points) // (self._cpus * TASKS_PER_WORKER)))
        slices = [points[i : i + size] for i in range(0, len(points), size)]
        keys = dict(best) if best is not None else None
        refs = [self._task.remote(self._prep_ref, s, screen, keys) for s in slices]
        i = 0
        for ref in refs:
            for row, log in self._ray.get(ref):
                on_row(i, row, log)
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


def open_executor(name: str, prep: Prepared, jobs: int) -> LocalExecutor | RayExecutor:
    """The executor called ``name`` (:data:`EXECUTORS`).

    Raises:
        InputError: an unknown name, or ``ray`` without ray installed (naming ``--executor``).
    """
    if name == "local":
        return LocalExecutor(prep, jobs)
    if name == "ray":
        return RayExecutor(prep, jobs)
    raise InputError(f"unknown executor {name!r}; use {' or '.join(EXECUTORS)}", field="--executor")

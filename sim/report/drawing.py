"""Files of an output set drawn on several processes: :func:`draw`, :func:`sharing`.

The drawings are independent files (plots, timelines, Chrome traces), each with the call that
writes it (:data:`Drawing`). They are shared among this process and ``jobs - 1`` forked
children that die with it (:mod:`sim.procs`), which inherit what the calls read (nothing is
pickled). Each process takes the next drawing not yet taken (a counter in shared memory), so a
process that drew cheap files takes more of them and all finish at about the same time (the
costs differ by 5x: a timeline of 8,000 spans against a Chrome trace); the costliest kinds are
taken first (:data:`DRAW_FIRST`). One process where ``fork`` is unavailable.

:func:`sharing` starts the children and lets this process do other work (``sim run`` writes
its tables and prints its answer) before it joins them in drawing: the children draw
meanwhile, so that work is off the path from the sweep's end to the last file written.

The calls run with Python's cyclic garbage collector off
(:func:`~sim.plan.executors.collector_paused`): a figure is tens of thousands of objects,
each figure's allocations set off collections that walk them all while it is drawn, and what
it leaves is freed by the next collection after (a forked child exits without one): 7 to 9 %
of the drawing's CPU time for ``sim run experiments/dgx1.yaml``'s nine files, the same bytes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim.plan.executors import collector_paused
from sim.procs import die_with_parent, leave_interrupts_to_parent
from sim.report import prefetch

Drawing = tuple[Path, Callable[[], object]]
"""A file of the output set and the call that writes it."""

DRAW_FIRST = ("timeline.png", "throughput.png", "memory_per_gpu.png", "memory_timeline.png")
"""The costliest files first, so that the processes that share the drawings end together: a
costly file taken last keeps one process drawing while the others wait. CPU seconds of
``sim run experiments/dgx1.yaml``'s files: a timeline 0.2-0.3, the throughput plot 0.2, a
memory plot 0.12-0.16, a Chrome trace 0.01-0.1 (issue 28); other files after these, in their
order."""


def draw(
    drawings: Sequence[Drawing], jobs: int, on_done: Callable[[int], None] | None = None
) -> list[Path]:
    """Write ``drawings`` on up to ``jobs`` processes (module doc); returns the files, in the
    order of ``drawings``. ``on_done(n)`` is called by this process with the number drawn so
    far by all of them (:func:`sim.progress.progress`).

    Raises:
        RuntimeError: a child failed (its traceback is on its standard error).
    """
    with sharing(drawings, jobs) as share:
        share.join_in(on_done)
    return [path for path, _ in drawings]


@contextmanager
def sharing(drawings: Sequence[Drawing], jobs: int) -> Iterator[Shared]:
    """Start drawing ``drawings`` on ``jobs - 1`` forked children; this process joins them
    with :meth:`Shared.join_in` (else, when the body ends or raises, the children are
    stopped). The collector is off throughout (module doc)."""
    with collector_paused():
        jobs = min(jobs, len(drawings)) if hasattr(os, "fork") else 1
        if jobs <= 1:
            yield Shared([call for _, call in drawings])
            return
        prefetch.wait()  # no import under way in this process while it forks
        ctx = mp.get_context("fork")
        calls = [call for _, call in sorted(drawings, key=_cost_rank)]
        share = Shared(calls, ctx.Value("i", 0), ctx.Value("i", 0))
        for _ in range(1, jobs):
            proc = ctx.Process(target=_draw_share, args=(share, os.getpid()))
            proc.start()
            share.children.append(proc)
        try:
            yield share
        finally:
            for proc in share.children:  # left by an error before join_in
                proc.terminate()
                proc.join()


class Shared:
    """The drawings being shared (:func:`sharing`): ``calls`` in the order they are taken,
    the counters of those taken and done (None: this process alone), the children."""

    def __init__(self, calls: list[Callable[[], object]], taken: Any = None, done: Any = None):
        self.calls, self.taken, self.done = calls, taken, done
        self.children: list[Any] = []

    def join_in(self, on_done: Callable[[int], None] | None = None) -> None:
        """Draw in this process what is not yet taken, then wait for the children.

        Raises:
            RuntimeError: a child failed (its traceback is on its standard error).
        """
        if self.taken is None:
            for k, call in enumerate(self.calls):
                call()
                if on_done:
                    on_done(k + 1)
            return
        self.draw_next(on_done)
        children, self.children = self.children, []
        for proc in children:
            proc.join()
            if proc.exitcode != 0:
                raise RuntimeError(f"a drawing process failed (exit code {proc.exitcode})")
        if on_done:
            on_done(len(self.calls))

    def draw_next(self, on_done: Callable[[int], None] | None = None) -> None:
        """Draw ``calls[k]`` for each next ``k`` not yet taken."""
        while True:
            with self.taken.get_lock():
                k = self.taken.value
                self.taken.value = k + 1
            if k >= len(self.calls):
                return
            self.calls[k]()
            with self.done.get_lock():
                self.done.value += 1
                n = self.done.value
            if on_done:
                on_done(n)


def _cost_rank(drawing: Drawing) -> int:
    name = drawing[0].name
    return DRAW_FIRST.index(name) if name in DRAW_FIRST else len(DRAW_FIRST)


def _draw_share(share: Shared, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    leave_interrupts_to_parent()  # Ctrl-C: the parent terminates this process (sharing)
    share.children = []  # the parent's, not this process's
    share.draw_next()

"""Import modules on a thread while this process waits for others: :class:`Prefetch`.

``sim run`` writes its table and draws its plots once the sweep is done; pandas takes about
0.2 CPU s to import, matplotlib with the plot modules about 0.3 s (``python -X importtime -c
"import sim.report.plots"``), and the sweep needs neither (traces are read with the csv module,
:mod:`sim.trace.native`). While the workers simulate, the main process only waits for their
rows, so it imports them then, on a thread (:data:`TABLE_MODULES`, :data:`PLOT_MODULES`): the
imports leave the path from the sweep's end to the last file written. Python's import system
is thread-safe (a lock per module): a module the main thread asks for meanwhile is waited
for, not imported twice.

A process must not fork while another of its threads is importing (the child would inherit
the import's locks held, and hang on the first import of the same module; a module that
registers fork handlers, as :mod:`concurrent.futures` does, would register them halfway
through the fork). So the thread starts once the workers are forked (:meth:`Prefetch.start`),
the drawings wait for it before they fork (:func:`wait`), and any other fork of this process
(workers started again after one died) waits for it too (:func:`os.register_at_fork`: a
last resort).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Sequence
from importlib import import_module

TABLE_MODULES = ("pandas", "sim.report.row_bands")
"""What ``sim run`` writes results.csv with (:func:`sim.report.outputs.write_results_csv`)."""

PLOT_MODULES = (
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
    "matplotlib.dates",
    "mpl_toolkits.mplot3d",
    "PIL.PngImagePlugin",
    "PIL.BmpImagePlugin",
    "PIL.GifImagePlugin",
    "PIL.JpegImagePlugin",
    "PIL.PpmImagePlugin",
    "sim.report.plots",
    "sim.report.memory_summary",
)
"""What ``sim run`` draws with (:func:`sim.report.drawing.draw`): matplotlib's figure (its
axes, legends, colour bars), the Agg canvas, the date units and the 3-D projection that
matplotlib loads with the first axes, Pillow's image plugins (all loaded by its first save),
the plot modules. Each process that draws would otherwise import them on its first figure,
after the fork: twice over (0.2 CPU s each)."""

_RUNNING: list[threading.Thread] = []


def wait() -> None:
    """Wait for every prefetch thread of this process to finish (call it before forking)."""
    for thread in list(_RUNNING):
        if thread is not threading.current_thread():
            thread.join()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=wait)


class Prefetch:
    """Import ``modules`` on a daemon thread, once :meth:`start` is called (again: nothing),
    with the garbage collector off, then freeze what they made (:func:`gc.freeze`: objects
    that live as long as the process, kept out of every later collection's walk, as
    :mod:`sim.cli` does for its imports).

    Args:
        modules: module names, imported in order; one that fails to import is left to fail
            where it is used (its error is not swallowed there).
    """

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = tuple(modules)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start importing (the first call only)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        _RUNNING.append(self._thread)
        self._thread.start()

    def _run(self) -> None:
        was = gc.isenabled()
        gc.disable()
        try:
            for name in self.modules:
                try:
                    import_module(name)
                except Exception:  # noqa: BLE001 - the user of the module reports it
                    continue
            gc.freeze()
        finally:
            if was:
                gc.enable()
            _RUNNING.remove(threading.current_thread())

    def join(self) -> None:
        """Wait until the imports are done (if started)."""
        if self._thread is not None:
            self._thread.join()

"""Child processes that die with their parent: :func:`die_with_parent`.

``kill -9`` of ``sim run`` or ``sim validate`` gives the parent no chance to stop its pool
workers or replay ranks. Each child therefore calls :func:`die_with_parent` first thing:

* on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (prctl(2)): the kernel kills the child when
  the thread that started it ends;
* everywhere, a daemon thread polls ``os.getppid()`` every :data:`POLL_S` seconds and ends the
  process when the parent has changed (it was re-parented to init or a subreaper).

A child whose parent stops it itself (a pool worker, a drawing process) also leaves Ctrl-C to
the parent (:func:`leave_interrupts_to_parent`): the terminal sends SIGINT to every process
of the foreground group, and each worker printed a ``KeyboardInterrupt`` traceback of its
queue read under the parent's one-line "interrupted" message.

No I/O besides that; the simulator itself never starts processes from here.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

POLL_S = 0.5
"""Seconds between two checks of the parent's pid by the watchdog thread."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _pdeathsig() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl here: the watchdog thread still works
        pass


def _watch(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(137)
        time.sleep(POLL_S)


def leave_interrupts_to_parent() -> None:
    """Ignore SIGINT (Ctrl-C) in this child: its parent gets it too, and stops the child
    (``ProcessPoolExecutor.shutdown``, ``Process.terminate``) once it has said so."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when process ``parent_pid`` (its parent) ends.

    Call it first in a child; if the parent is already gone the child exits at once.
    """
    _pdeathsig()
    if os.getppid() != parent_pid:
        os._exit(137)
    threading.Thread(target=_watch, args=(parent_pid,), name="die-with-parent", daemon=True).start()

"""Progress of long work, with the time remaining: a rich bar on a terminal, plain lines in logs.

Every long command (``sim run``'s sweep and drawings, ``sim validate``'s replays, ``sim
profile``'s layers, ``sim calibrate``'s measurements) reports through :func:`progress`:

* on a terminal, a transient rich bar: what, done/total, elapsed, remaining;
* otherwise (logs, CI), one line on stderr every :data:`EVERY_S` seconds and at the end:
  ``simulating: 40/174 configurations (23%), 2.1 s, about 7 s left``.

The remaining time is the elapsed time per unit done times the units left (rich's
``TimeRemainingColumn`` averages the recent speed the same way); it is a guess, said as one.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

EVERY_S = 5.0
"""Seconds between the plain progress lines printed when stderr is not a terminal."""

OnDone = Callable[[int], None]
"""``on_done(n)``: ``n`` units are done so far."""


def shown(enabled: bool | None = None) -> bool:
    """Whether to show progress: ``enabled`` when given, else whether the ``sim`` logger lets
    notes through (``sim -q`` silences progress with them)."""
    if enabled is not None:
        return enabled
    return logging.getLogger("sim").isEnabledFor(logging.INFO)


def remaining_text(done: int, total: int, elapsed_s: float) -> str:
    """``about 7 s left`` from the rate so far (empty before the first unit or at the end).

    Example:
        >>> remaining_text(10, 40, 5.0)
        'about 15 s left'
        >>> remaining_text(1, 301, 1.0)
        'about 5.0 min left'
    """
    if done <= 0 or done >= total:
        return ""
    left = elapsed_s / done * (total - done)
    return f"about {left:.0f} s left" if left < 120 else f"about {left / 60:.1f} min left"


@contextmanager
def progress(
    total: int,
    what: str,
    unit: str = "",
    *,
    console: Console | None = None,
    enabled: bool | None = None,
) -> Iterator[OnDone]:
    """A callback ``on_done(n)`` that shows ``n`` of ``total`` done (module doc).

    Args:
        total: units of work.
        what: what is being done (``simulating``, ``drawing``, ``replaying``).
        unit: the units' name in the plain lines (``configurations``).
        console: where the bar goes on a terminal (default: stderr).
        enabled: show it (None: :func:`shown`).
    """
    if not shown(enabled) or total <= 0:
        yield lambda n: None
        return
    console = console or Console(stderr=True)
    if console.is_terminal:
        with Progress(
            TextColumn(what),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task(what, total=total)
            yield lambda n: bar.update(task, completed=n)
        return
    t0 = last = time.monotonic()
    ended = False  # the last line is printed once, however often the total is reported

    def line(n: int) -> None:
        nonlocal last, ended
        now = time.monotonic()
        if ended:
            return
        if n >= total or now - last >= EVERY_S:
            last, ended = now, n >= total
            left = remaining_text(n, total, now - t0)
            print(
                f"{what}: {n}/{total}{' ' + unit if unit else ''} ({100 * n / total:.0f}%), "
                f"{now - t0:.1f} s" + (f", {left}" if left else ""),
                file=sys.stderr,
                flush=True,
            )

    yield line

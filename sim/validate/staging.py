"""``sim validate`` writes its files as one set, staged like ``sim run``'s (:mod:`sim.report.outputs`).

A validation writes into a folder it shares with others (by default the ``sim run`` folder of
the winner it replays), so it cannot swap the folder itself. Instead its files are written into
``<out>/.validation.new-<pid>/`` and, once all are there, moved out one rename each, with
``validation.csv`` last: a ``validation.csv`` present means its set is complete. The names of
the set go into ``<out>/.pipesim-validation.json``; the next validation there removes what the
previous one wrote and did not write again (another schedule's timelines, a breakdown), so the
folder never mixes two validations. A killed ``sim validate`` leaves only its staging folder,
which the next one removes (:func:`remove_stale_stages`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sim.atomic import atomic_write_text, pid_alive, scratch_folder

STAGE_PREFIX = ".validation.new-"
"""A validation's files are written into ``<out>/.validation.new-<pid>/`` first."""
MANIFEST = ".pipesim-validation.json"
"""Lists the files of the last validation written into a folder."""
LAST = "validation.csv"
"""Moved in last: it marks a complete set."""


def remove_stale_stages(folder: Path) -> None:
    """Remove the staging folders of ``sim validate`` runs that are dead."""
    if not folder.is_dir():
        return
    for p in folder.glob(f"{STAGE_PREFIX}*"):
        pid = p.name[len(STAGE_PREFIX) :]
        if p.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _previous_set(folder: Path) -> set[str]:
    try:
        names = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["entries"]
        return {str(n) for n in names if "/" not in str(n) and str(n) not in ("", ".", "..")}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


@contextmanager
def staged_validation(dest: Path) -> Iterator[Path]:
    """Yield a staging folder inside ``dest``; write the whole set there and call
    :func:`commit_validation`. On an error the staging folder is removed and ``dest`` keeps
    its previous set."""
    remove_stale_stages(dest)
    with scratch_folder(dest / f"{STAGE_PREFIX}{os.getpid()}") as stage:
        yield stage


def commit_validation(stage: Path, dest: Path) -> list[Path]:
    """Move the set in ``stage`` into ``dest`` (:data:`LAST` last), remove the previous
    validation's files that this one did not write, and record the set.

    Returns:
        The files now in ``dest``.
    """
    names = sorted((p.name for p in stage.iterdir()), key=lambda n: (n == LAST, n))
    (dest / LAST).unlink(missing_ok=True)  # from here until the end no set is complete
    for name in sorted(_previous_set(dest) - set(names)):
        (dest / name).unlink(missing_ok=True)
    for name in names:
        os.replace(stage / name, dest / name)
    atomic_write_text(dest / MANIFEST, json.dumps({"entries": names}, indent=1))
    return [dest / n for n in names]

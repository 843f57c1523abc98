"""Atomic file writes: a temporary file in the destination's folder, then :func:`os.replace`.

A reader (or a crash) never sees half a file: the destination holds either its old content or
the whole new one. Every file pipesim writes goes through here. Files get the usual mode
(``0666`` less the umask, as ``open`` would give), not ``mkstemp``'s ``0600``, so results are
readable by others. A temporary file's name holds the writer's pid
(``.<name>.<pid>.<random>.tmp``), so one left by a killed process is recognised and removed
by :func:`remove_stale_temps`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sim.errors import InputError

_TEMP = re.compile(r"^\..*\.(\d+)\.[^.]+\.tmp$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, creating parent directories.

    Returns:
        The destination path.
    """
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=dest.parent, prefix=f".{dest.name}.{os.getpid()}.", suffix=".tmp"
    )
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return dest


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def scratch_folder(path: Path) -> Iterator[Path]:
    """Yield ``path`` as a new empty folder (whatever was there is removed first, parents
    created) and remove it with what is left in it when the block ends, normally or not: the
    staging folder of a set of files that is moved elsewhere once complete."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists (on this machine)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files of :func:`atomic_write_bytes` in ``folder`` whose writer is
    dead (a process killed while writing). Returns what was removed."""
    removed: list[Path] = []
    d = Path(folder)
    if not d.is_dir():
        return removed
    for p in d.iterdir():
        m = _TEMP.match(p.name)
        if m and p.is_file() and not pid_alive(int(m.group(1))):
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass
    return removed


def check_writable(path: str | os.PathLike, *, option: str, directory: bool = False) -> Path:
    """Check, before any work, that ``path`` can be written (created if absent).

    ``directory`` says whether ``path`` is a folder to write into or a file. The nearest
    existing folder is probed by creating and removing an empty temporary file in it, since
    permission bits do not tell (root passes ``os.access`` everywhere, yet ``/proc``, ``/sys``
    and a read-only mount refuse files); nothing else is created.

    Raises:
        InputError: naming ``option``: the path is a folder where a file is expected (or the
            reverse), a parent is a file, or the nearest existing folder refuses a new file.
    """
    p = Path(path)
    if p.exists():
        if directory and not p.is_dir():
            raise InputError(f"{p} is a file, not a directory", field=option)
        if not directory and p.is_dir():
            raise InputError(f"{p} is a directory, not a file", field=option)
        target = p if directory else p.parent
    else:
        target = p.parent
    while not target.exists():
        target = target.parent
    if not target.is_dir():
        raise InputError(f"cannot write {p}: {target} is a file, not a directory", field=option)
    try:
        fd, probe = tempfile.mkstemp(prefix=".pipesim-probe-", dir=target)
    except OSError as exc:
        raise InputError(
            f"cannot write {p}: {target} refuses new files ({exc.strerror})", field=option
        ) from None
    os.close(fd)
    os.unlink(probe)
    return p

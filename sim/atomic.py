"""Atomic file writes: a temporary file in the destination's folder, then :func:`os.replace`.

A reader (or a crash) never sees half a file: the destination holds either its old content or
the whole new one. Every file pipesim writes goes through here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, creating parent directories.

    Returns:
        The destination path.
    """
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
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

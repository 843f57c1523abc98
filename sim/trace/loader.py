"""One entry point for every kind of trace reference: :func:`load_trace`.

A reference is resolved in this order:

1. **A path that exists**, relative to ``base_dir`` when given (typically the directory of the
   experiment YAML that names it), else to the working directory:

   * ``*.csv``, ``*.yaml``, ``*.yml``: a native trace (:func:`sim.trace.native.read_trace`);
   * ``*.txt`` or a directory holding ``graph.txt``: a PipeDream profile
     (:func:`sim.trace.pipedream.read_pipedream`);
   * ``<path>`` without suffix where ``<path>.csv`` exists: that native trace.

2. **A name in the traces directory**: ``<traces>/<ref>.csv`` (e.g. ``gnmt16`` ->
   ``traces/gnmt16.csv``), then ``<traces>/<ref>/graph.txt`` (e.g. ``pipedream/vgg16``). The
   traces directory is ``$PIPESIM_TRACES`` when set, else the repository's ``traces/``
   (next to the ``sim`` package).

Anything else is an :class:`InputError` that lists the available names.
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.errors import InputError
from sim.trace.native import read_trace
from sim.trace.pipedream import read_pipedream
from sim.trace.schema import Trace

_NATIVE = (".csv", ".yaml", ".yml")


def traces_dir() -> Path:
    """The directory searched for trace names: ``$PIPESIM_TRACES`` or the repository's ``traces/``."""
    env = os.environ.get("PIPESIM_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "traces"


def available_traces(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Names :func:`load_trace` resolves in ``directory`` (default :func:`traces_dir`), sorted."""
    d = Path(directory) if directory is not None else traces_dir()
    if not d.is_dir():
        return []
    names = {p.stem for p in d.glob("*.csv")}
    names |= {str(p.parent.relative_to(d)) for p in d.rglob("graph.txt")}
    return sorted(names)


def _read_path(p: Path) -> Trace:
    if p.is_dir():
        p = p / "graph.txt"
    if p.suffix in _NATIVE:
        return read_trace(p)
    return read_pipedream(p)


def load_trace(
    ref: str | os.PathLike[str],
    *,
    base_dir: str | os.PathLike[str] | None = None,
    file: str | None = None,
    field: str | None = None,
) -> Trace:
    """Load the trace ``ref`` names: a path or a shipped name (lookup order in the module doc).

    Args:
        ref: path to a native trace (``.csv``/``.yaml``), a PipeDream ``graph.txt`` (or its
            directory), or a name in the traces directory such as ``gnmt16``.
        base_dir: directory relative paths are resolved against (default: working directory).
        file: the file that holds the reference, named in the error when it cannot be resolved.
        field: the field of ``file`` that holds the reference, for the same message.

    Returns:
        The :class:`Trace`.

    Raises:
        InputError: the reference resolves to nothing (the message lists the available names),
            or the file it resolves to is malformed (the message names that file and field).
    """
    raw = Path(ref)
    given = raw if raw.is_absolute() or base_dir is None else Path(base_dir) / raw
    candidates = [given] + ([given.with_name(given.name + ".csv")] if given.name else [])
    d = traces_dir()
    candidates += [d / f"{ref}.csv", d / str(ref) / "graph.txt"]
    for p in candidates:
        if p.exists() and (p.is_file() or (p / "graph.txt").is_file()):
            return _read_path(p)
    names = available_traces(d)
    listing = ", ".join(names) if names else f"none ({d} has no traces)"
    raise InputError(
        f"trace {str(ref)!r} not found as a path (relative to "
        f"{base_dir or 'the working directory'}) nor as a name in {d}; "
        f"available: {listing}",
        file=file,
        field=field,
    )

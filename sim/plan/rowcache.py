"""The row cache of a sweep and the loop that fills it: :func:`run_points`.

Every grid point's row is cached in a :class:`diskcache.Cache` (SQLite in ``cache_dir``:
each write is one transaction, so a reader or a crash never sees half an entry, and several
processes may read and write one cache at once) under its key
(:func:`sim.plan.point_row.point_cache_key`), as JSON with a checksum; :func:`read_cached`
says why an entry cannot be reused (damaged, edited, of another version). Rows the planner did
not simulate (error ``pruned: ...``) are never cached: they depend on the rest of the grid; nor
are rows of an internal error (``internal error: ...``), so a rerun tries them again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache as _once
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from sim.atomic import atomic_write_text
from sim.config import config_hash
from sim.errors import InputError
from sim.events import EventLog
from sim.plan.executors import Executor, LocalExecutor
from sim.plan.point_row import model_code_hash, point_cache_key
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.rows import INTERNAL, PRUNED, ROW_FORMAT, BestRows, ResultRow
from sim.textio import decode_text

if TYPE_CHECKING:
    import diskcache


@_once
def _no_pickle_disk() -> type:
    """diskcache's storage, less unpickling: the cache holds only JSON text, and a pickled
    value (written by someone else) reads as bytes, never as code run on loading. (diskcache
    is imported here, on a sweep's first cache, not by ``import sim.api``.)"""
    import diskcache

    class NoPickleDisk(diskcache.Disk):
        def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
            if mode == diskcache.core.MODE_PICKLE:
                return b"\x00a pickled value"  # unreadable to read_cached
            return super().fetch(mode, filename, value, read)

    return NoPickleDisk


def open_cache(cache_dir: Path) -> diskcache.Cache:
    """The row cache in ``cache_dir`` (created if missing); close it with ``with``. Opening
    one costs some 10 to 40 ms (SQLite's settings), so a sweep opens it once
    (:func:`sim.plan.planner.plan_points`).

    Entries are kept until the cache passes diskcache's default size limit (1 GB, some
    200,000 rows), when the least recently stored go first. Entries of the earlier format
    (one ``<key>.json`` file per row) are removed: they would never be read."""
    import diskcache

    cache = diskcache.Cache(str(cache_dir), disk=_no_pickle_disk())
    for old in Path(cache_dir).glob("*.json"):
        old.unlink(missing_ok=True)
    return cache


CODE_FILE = "sim-code.txt"
"""The file beside the cache's entries that holds the :func:`~sim.plan.point_row.model_code_hash`
of the pipesim that last used the cache (not an entry: the cache holds only rows)."""


def stale_cache_note(cache: diskcache.Cache) -> str | None:
    """A line when the rows in ``cache`` were made by another pipesim (its code differs: every
    row's key does, so none is reused and the sweep is simulated again), else None; records
    this pipesim's code beside the cache (:data:`CODE_FILE`). Rows with no record are of a
    pipesim before the record was kept."""
    code, path = model_code_hash(), Path(cache.directory) / CODE_FILE
    was = path.read_text(encoding="utf-8").strip() if path.is_file() else None
    if was != code:
        atomic_write_text(path, code + "\n")
    rows = len(cache)
    if was == code or rows == 0:
        return None
    by = f"another pipesim version (code {was}, now {code})" if was else "an earlier pipesim"
    return (
        f"the {rows} cached row(s) in {cache.directory} were made by {by} (or of other "
        "inputs) and are not reused: every configuration is simulated again"
    )


def read_cached(entry: object, key: str, point: PointConfig) -> ResultRow | str:
    """The row in a cache ``entry`` (what was stored under ``key``: JSON text, or the bytes of
    a damaged one), or why it cannot be used: unreadable, of another format or
    key, a checksum that does not match (damaged), filed under another point, invalid values
    (:class:`ResultRow`) or inconsistent ones (:meth:`ResultRow.problems`: a hand-edited row).
    The checksum is not a signature: it catches damage, the consistency checks catch edits."""
    try:
        text = decode_text(entry, label=key) if isinstance(entry, bytes) else entry
        data = json.loads(text) if isinstance(text, str) else None
    except (ValueError, InputError) as exc:
        return f"unreadable ({' '.join(str(exc).split())[:120]})"
    if not isinstance(data, dict) or data.get("format") != ROW_FORMAT or data.get("key") != key:
        return "not an entry of this version for this configuration"
    try:
        row = ResultRow.model_validate(data.get("row"))
    except ValidationError as exc:
        err = exc.errors()[0]
        return f"invalid row: {'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
    if data.get("sha256") != _row_digest(key, data["row"]):
        return "damaged (its checksum does not match its content)"
    if row.point() != point:
        return "its configuration differs from the one it is filed under"
    if row.problems():
        return f"inconsistent ({row.problems()[0]})"
    return row


def _row_digest(key: str, row: dict) -> str:
    return config_hash({"key": key, "row": row})


def cache_entry(key: str, row: ResultRow) -> str:
    """The JSON text cached for ``row`` under ``key``: the row, its format and a checksum."""
    data = row.model_dump()
    return json.dumps(
        {"format": ROW_FORMAT, "key": key, "row": data, "sha256": _row_digest(key, data)}
    )


def run_points(
    prep: Prepared,
    points: list[PointConfig],
    *,
    cache_dir: Path | None,
    cache: diskcache.Cache | None = None,
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    executor: Executor | None = None,
    screen: bool = False,
    best: BestRows | None = None,
    on_cached: Callable[[int], None] | None = None,
) -> list[ResultRow]:
    """Rows for ``points`` in order, from the cache where possible, else computed in parallel.

    Args:
        prep: the loaded experiment.
        points: grid points.
        cache_dir: the folder of the row cache (:func:`open_cache`; None: no cache).
        cache: the row cache, opened by the caller (``cache_dir`` is then not opened).
        jobs: worker processes (1: in this process) when ``executor`` is None.
        on_done: called with the number of rows finished so far (for a progress bar).
        on_warning: called with a message for each cache entry that is corrupt or forged,
            naming its key (it is recomputed and overwritten).
        executor: where the rows are computed (:mod:`sim.plan.executors`; its ``map``); None:
            a :class:`~sim.plan.executors.LocalExecutor` of ``jobs`` processes for this call.
        screen: skip simulating points that cannot fit once resolved
            (:func:`sim.plan.point_row.point_row`); their rows are not cached.
        best: the best row per model so far; every row is offered to it with its event log
            (:meth:`BestRows.offer`), which the executor sends for the rows that may win.
        on_cached: called once with the number of rows read from the cache.
    """
    if cache is None and cache_dir:
        with open_cache(cache_dir) as opened:
            return run_points(prep, points, cache_dir=None, cache=opened, jobs=jobs,
                              on_done=on_done, on_warning=on_warning, executor=executor,
                              screen=screen, best=best, on_cached=on_cached)  # fmt: skip
    rows: list[ResultRow | None] = [None] * len(points)
    keys = [point_cache_key(prep, p) for p in points] if cache is not None else [""] * len(points)
    where = cache.directory if cache is not None else None
    todo = []
    for i, key in enumerate(keys):
        entry = cache.get(key) if cache is not None else None
        got = read_cached(entry, key, points[i]) if entry is not None else None
        if isinstance(got, ResultRow):
            rows[i] = got
            if best is not None:
                best.offer(got, None)
            continue
        if got is not None and on_warning:
            on_warning(f"cache entry {key} in {where} is {got}; recomputing it")
        todo.append(i)
    done = len(points) - len(todo)
    if on_cached:
        on_cached(done)
    if on_done:
        on_done(done)

    def store(i: int, row: ResultRow, log: EventLog | None) -> None:
        nonlocal done
        rows[i] = row
        if best is not None:
            best.offer(row, log)
        if cache is not None and not row.error.startswith((PRUNED, INTERNAL)):
            cache.set(keys[i], cache_entry(keys[i], row))
        done += 1
        if on_done:
            on_done(done)

    keys_now = best.keys() if best is not None else None
    batch = [points[i] for i in todo]
    if executor is not None:
        executor.map(batch, lambda k, row, log: store(todo[k], row, log), screen, keys_now)
    else:
        with LocalExecutor(prep, jobs) as local:
            local.map(batch, lambda k, row, log: store(todo[k], row, log), screen, keys_now)
    return rows  # type: ignore[return-value]

"""torch's compute-only CSV schedule format (schedules.md §4.2).

One row per rank, one cell per action in torch's grammar (``"2F0"``), an empty cell is a
bubble. ``_PipelineScheduleRuntime._load_csv(path, format="compute_only")`` reads these files,
so one file drives both the simulator and the hardware replay. STEP actions are ours and are
never written (torch inserts ``REDUCE_GRAD`` itself); bubbles are dropped on reading because a
:data:`~sim.schedules.action.Program` is list order, not time (§5).
"""

from __future__ import annotations

import csv
import io
import os
from typing import IO

from sim.atomic import atomic_write_text
from sim.errors import InputError
from sim.schedules.action import COMPUTE_OPS, OVERLAP, STEP, Action, Program


def _rows(program: Program) -> list[list[str]]:
    return [[str(a) for a in actions if a.op != STEP] for actions in program]


def to_csv(program: Program, path_or_file: str | os.PathLike[str] | IO[str]) -> None:
    """Write ``program`` (normally one iteration) as a torch compute-only CSV.

    Args:
        program: per-rank actions; STEP actions are skipped.
        path_or_file: a path (written atomically: a temporary file in the same folder, then
            ``os.replace``) or an open text file (written in place; open it with
            ``newline=""``).
    """
    if not isinstance(path_or_file, (str, os.PathLike)):
        csv.writer(path_or_file).writerows(_rows(program))
        return
    atomic_write_text(path_or_file, to_csv_string(program))


def to_csv_string(program: Program) -> str:
    """The CSV text :func:`to_csv` would write."""
    buffer = io.StringIO(newline="")
    to_csv(program, buffer)
    return buffer.getvalue()


def _parse_cell(cell: str, file: str, row: int, col: int) -> Action:
    try:
        action = Action.from_str(cell)
    except ValueError:
        action = None
    if action is None or action.op not in (*COMPUTE_OPS, OVERLAP):
        raise InputError(
            f"{cell.strip()!r} is not a compute action like '2F0' (compute_only format: "
            f"F, B, I, W and (F;B)OVERLAP_F_B only)",
            file=file,
            field=f"row {row + 1}, column {col + 1}",
        )
    return action


def _read(handle: IO[str], file: str) -> Program:
    return [
        [_parse_cell(cell, file, r, c) for c, cell in enumerate(row) if cell.strip()]
        for r, row in enumerate(csv.reader(handle))
    ]


def from_csv(path_or_file: str | os.PathLike[str] | IO[str]) -> Program:
    """Read a torch compute-only CSV into a :data:`Program`; empty cells (bubbles) are dropped.

    Round trip: ``from_csv(p) == program`` after ``to_csv(program, p)`` for any program without
    STEP actions.

    Raises:
        InputError: a cell is not a compute action (naming file, row and column), or the file
            cannot be read.
    """
    if not isinstance(path_or_file, (str, os.PathLike)):
        return _read(path_or_file, getattr(path_or_file, "name", "<csv>"))
    try:
        with open(path_or_file, newline="") as handle:
            return _read(handle, str(path_or_file))
    except OSError as exc:
        raise InputError(
            f"cannot read schedule CSV: {exc.strerror}", file=str(path_or_file)
        ) from exc

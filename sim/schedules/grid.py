"""Step × rank grids of a program, like torch's ``_format_pipeline_order`` (schedules.md §4.1).

Rows are list positions per rank ("Step 00:"), columns are ranks ("Rank 0", ...). As in torch,
positions are not time-aligned across ranks (§5): row ``k`` is each rank's ``k``-th action.
"""

from __future__ import annotations

from itertools import zip_longest
from typing import TYPE_CHECKING

from sim.schedules.action import OVERLAP, STEP, Program

if TYPE_CHECKING:
    from rich.table import Table


def _columns(program: Program, include_steps: bool) -> list[list[str]]:
    return [[str(a) for a in actions if include_steps or a.op != STEP] for actions in program]


def _step_labels(rows: int) -> list[str]:
    width = len(str(max(rows - 1, 0)))
    return [f"Step {i:0{width}d}" for i in range(rows)]


def format_grid(
    program: Program, *, include_steps: bool = True, error_step: int | None = None
) -> str:
    """Format ``program`` as torch's ``_format_pipeline_order`` does.

    Args:
        program: per-rank action lists.
        include_steps: show STEP actions (torch's grid shows ``REDUCE_GRAD`` there).
        error_step: mark this row with ``<-- ERROR HERE`` (as torch does on a failed check).

    Returns:
        The grid, one line per step after a header line, ending with a newline. Column widths
        and padding (trailing spaces included) match torch 2.13's output for up to 10 ranks.

    Example:
        >>> from sim.schedules.gpipe import GPipe
        >>> for line in format_grid(GPipe(2, 1).program()).splitlines():
        ...     print(line.rstrip())
                Rank 0 Rank 1
        Step 0: 0F0    1F0
        Step 1: 0B0    1B0
        Step 2: 0STEP0 1STEP0
    """
    columns = _columns(program, include_steps)
    rows = list(zip_longest(*columns, fillvalue=""))
    labels = _step_labels(len(rows))
    ranks = [f"Rank {r}" for r in range(len(columns))]
    label_len = len(labels[0]) if labels else 0
    widths = [max([label_len, len(ranks[r]), *map(len, col)]) for r, col in enumerate(columns)]
    lines = [
        " " * (label_len + 2) + " ".join(f"{n:<{w}}" for n, w in zip(ranks, widths, strict=True))
    ]
    for i, (label, row) in enumerate(zip(labels, rows, strict=True)):
        cells = " ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True))
        mark = " <-- ERROR HERE" if i == error_step else ""
        lines.append(f"{label}: {cells}{mark}")
    return "\n".join(lines) + "\n"


def grid_table(program: Program, *, include_steps: bool = True, title: str | None = None) -> Table:
    """The same grid as a ``rich`` Table (one column per rank), for the CLI.

    Cells are coloured by op: F green, B/I blue, W cyan, STEP dim.
    """
    from rich.table import Table  # the CLI's dependency: `import sim.schedules` does without

    styles = {"F": "green", "B": "blue", "I": "blue", "W": "cyan", STEP: "dim", OVERLAP: "magenta"}
    table = Table(title=title)
    table.add_column("Step", justify="right", style="bold")
    for rank in range(len(program)):
        table.add_column(f"Rank {rank}")
    columns = [[a for a in acts if include_steps or a.op != STEP] for acts in program]
    rows = list(zip_longest(*columns, fillvalue=None))
    for label, row in zip(_step_labels(len(rows)), rows, strict=True):
        cells = [f"[{styles[a.op]}]{a}[/]" if a is not None else "" for a in row]
        table.add_row(label.removeprefix("Step "), *cells)
    return table

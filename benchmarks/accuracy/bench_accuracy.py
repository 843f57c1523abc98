"""Accuracy of pipesim's models against measurements by others: one table per section.

Each section is a module ``benchmarks/accuracy/accuracy_<name>.py`` exposing ``rows() -> list[dict]``
(and optionally ``TITLE``, and ``more_tables() -> [(title, rows)]``): ``accuracy_compute`` (per-layer time vs micro-batch size),
``accuracy_memory`` and ``accuracy_comm`` when present. Prints the tables; asserts nothing
(the bounds are held by tests, e.g. tests/test_compute.py).

Run: ``python benchmarks/accuracy/bench_accuracy.py [--sections compute memory comm]``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SECTIONS = ("compute", "memory", "comm", "moe")


def load_section(name: str):
    """The module ``benchmarks.accuracy.accuracy_<name>``, or None when it does not exist."""
    try:
        return importlib.import_module(f"benchmarks.accuracy.accuracy_{name}")
    except ModuleNotFoundError as exc:
        if exc.name in (f"benchmarks.accuracy.accuracy_{name}", "benchmarks"):
            return None
        raise


def table(title: str, rows: list[dict]) -> Table:
    """A rich table of ``rows`` (columns from the first row)."""
    df = pd.DataFrame(rows)
    out = Table(title=title, title_justify="left")
    for col in df.columns:
        out.add_column(str(col), justify="right")
    for rec in df.itertuples(index=False):
        out.add_row(*(f"{v:g}" if isinstance(v, float) else str(v) for v in rec))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", nargs="+", default=list(SECTIONS))
    args = ap.parse_args()
    console = Console(width=200)
    for name in args.sections:
        mod = load_section(name)
        if mod is None:
            console.print(
                f"[dim]section {name}: benchmarks/accuracy/accuracy_{name}.py not present[/]"
            )
            continue
        console.print(table(getattr(mod, "TITLE", name), mod.rows()))
        for title, rows in getattr(mod, "more_tables", list)():
            console.print(table(title, rows))


if __name__ == "__main__":
    main()

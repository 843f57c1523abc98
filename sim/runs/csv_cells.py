"""The numeric cells of a measured-runs CSV (``../shared/data/README.md``'s layout), checked
before any row is read: a cell that is not a number, or not a whole number where the column
counts something, is an error naming the file, the row and the column. An empty cell stays
"not given". Without this check :func:`sim.runs.csv_shape.cell_float` read such a cell as
empty: a ``step_time_s`` of ``0,5`` left the run out of the comparison (and of
``sim calibrate --from-runs``, exit code 0), a ``tp`` of ``0`` ran at tensor parallelism 1.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sim.errors import InputError

COUNTS = (
    "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "seq_len",
    "moe_experts", "moe_topk", "moe_ffn_hidden", "num_gpus", "tp", "pp", "cp", "ep", "etp",
    "dp", "gbs", "mbs", "ga",
)  # fmt: skip
"""Columns that count something: a whole number >= 1 (``vp`` and ``vocab`` are left out: the
functional tests' rows write ``layers/vstage=2`` and ``tokenizer-defined`` there)."""
COUNTS_OR_ZERO = ("fsdp", "moe_dense_layers", "moe_shared_ffn")
"""Counts that may be 0 (no FSDP, no dense layers, no shared expert)."""
MEASURED = {
    "step_time_s": "seconds", "step_time_derived_s": "seconds", "peak_mem_gib": "GiB",
    "tokens_per_s_per_gpu": "tokens/s per GPU", "tflops_per_gpu": "TFLOP/s per GPU",
    "mfu": "a fraction or a percentage",
}  # fmt: skip
"""Measurement columns (> 0) and their units."""


def _problem(value: Any, column: str) -> str | None:
    """What is wrong with a non-empty ``value`` of ``column``, or None."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if column in MEASURED:
        if math.isfinite(x) and x > 0:
            return None
        return f"{value!r} is not a positive number ({MEASURED[column]})"
    least = 0 if column in COUNTS_OR_ZERO else 1
    if math.isfinite(x) and x == int(x) and x >= least:
        return None
    return f"{value!r} is not a whole number >= {least}"


def check_cells(df: pd.DataFrame, file: str) -> None:
    """Every non-empty cell of ``df``'s numeric columns (:data:`COUNTS`,
    :data:`COUNTS_OR_ZERO`, :data:`MEASURED`) is a number of its kind.

    Raises:
        InputError: naming ``file``, the column, and the row (its line in the file: the
            header is line 1), with the fix.
    """
    for column in [c for c in (*COUNTS, *COUNTS_OR_ZERO, *MEASURED) if c in df.columns]:
        for i, value in df[column].items():
            if pd.isna(value) or str(value).strip() == "":
                continue
            problem = _problem(value, column)
            if problem:
                raise InputError(
                    f"row {int(str(i)) + 2}: {problem}; correct the cell, or leave it empty "
                    "where the run does not say",
                    file=file,
                    field=column,
                )

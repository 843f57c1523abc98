"""Measured whole iterations in vTrain's column layout, read and checked for
``bench_measured.py``: ``measurements/vtrain/ground_truth_single_h2048.csv`` by default (720
Megatron-DeepSpeed iterations on one 8 x A100 node, vTrain's published ground truth; provenance
in its README), or any CSV with the same columns (``--rows``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from sim.config import MAX_GPUS
from sim.errors import InputError
from sim.runs.vtrain import COLUMNS as VTRAIN_COLUMNS
from sim.runs.vtrain import read_vtrain

ROOT = Path(__file__).resolve().parents[2]
VTRAIN = ROOT / "measurements" / "vtrain" / "ground_truth_single_h2048.csv"
COLUMNS = list(VTRAIN_COLUMNS)
"""The columns a measured-rows CSV must have (vTrain's ``data/ground_truth_*.csv`` layout,
:mod:`sim.runs.vtrain`)."""


class RowsError(ValueError):
    """A measured-rows CSV that cannot be read as vTrain's layout; the message names the file,
    the column or row and the fix."""


def load_vtrain(path: Path = VTRAIN) -> pd.DataFrame:
    """The measured rows of ``path`` (vTrain's column layout, :data:`COLUMNS`), with
    ``microbatches`` added (``B / (b w)``); checked by :func:`sim.runs.vtrain.read_vtrain`.

    Raises:
        RowsError: the file is missing or unreadable, a column is missing, a value is not a
            positive number, or ``gpus != t p w`` or ``B`` is not a multiple of ``b w``.
    """
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError):
        df = None  # read_vtrain says why
    if df is not None and set(COLUMNS) <= set(df.columns):
        if df.empty:
            raise RowsError(f"{path}: no rows (only a header); add measured iterations")
        _check_values(df[COLUMNS].apply(pd.to_numeric, errors="coerce"), path)
    try:
        read_vtrain(path)
    except InputError as exc:
        raise RowsError(str(exc)) from None
    df = pd.read_csv(path)
    num = df[COLUMNS].apply(pd.to_numeric)
    df[COLUMNS[:-1]] = num[COLUMNS[:-1]].astype(int)
    df["iteration_time_ms"] = num.iteration_time_ms
    df["microbatches"] = df.global_batch // (df.microbatch_size * df.data_parallel)
    return df


LIMITS = {"gpus": MAX_GPUS, "layers": 1024, "hidden": 1 << 17, "heads": 1024,
          "seq_len": 1 << 20, "global_batch": 1 << 24, "microbatch_size": 1 << 16}  # fmt: skip
"""Largest value read per column: ``sim.config.MAX_GPUS``, and bounds far above any trained
model (assumptions; they keep one row from running for hours)."""


def _check_values(num: pd.DataFrame, path: Path) -> None:
    """Finite values, whole numbers in the count columns, each below :data:`LIMITS`, heads
    dividing the hidden size and ``tensor_parallel`` dividing the heads.

    Raises:
        RowsError: naming the row (as the file numbers lines) and the column.
    """
    num = num[(num > 0).all(axis=1)]  # missing or non-positive values: read_vtrain names them
    for col in COLUMNS:
        values = num[col]
        for i, v in values.items():
            line = f"{path}: row {int(i) + 2}: {col}"  # type: ignore[call-overload]
            if not math.isfinite(v):
                raise RowsError(f"{line}: {v} is not a finite number")
            if col != "iteration_time_ms" and v != int(v):
                raise RowsError(f"{line}: {v} is not a whole number")
            if col in LIMITS and v > LIMITS[col]:
                raise RowsError(f"{line}: {int(v)} is above the {LIMITS[col]:,} read")
    for i, r in num.iterrows():
        line = f"{path}: row {int(i) + 2}"  # type: ignore[call-overload]
        if r.hidden % r.heads:
            raise RowsError(f"{line}: heads: {int(r.heads)} do not divide hidden {int(r.hidden)}")
        if r.heads % r.tensor_parallel:
            raise RowsError(
                f"{line}: tensor_parallel: {int(r.tensor_parallel)} does not divide the "
                f"{int(r.heads)} heads"
            )

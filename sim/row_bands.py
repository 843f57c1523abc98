"""Prediction bands on the rows a run reports: ``results.csv``, the table, ``winner.yaml``.

Each row that has a prediction gets the band of its regime (:mod:`sim.bands`: framework,
tensor-parallel degree, micro-batch size, with the fallback to coarser regimes there):

* ``iteration_time_low_s``, ``iteration_time_high_s``: predicted iteration time times the
  regime's p10 and p90 of measured / predicted;
* ``throughput_low_samples_per_s``, ``throughput_high_samples_per_s``: throughput over them;
* ``band_source``: the regime and its sample count (``all frameworks t=1 (n=181)``);
* ``within_winner_band``: the row fits, is not its model's winner, and its throughput band
  overlaps the winner's: measured runs of these regimes would not tell the two apart, so the
  pick is not clearly faster than it.

Rows are not changed (the row cache keeps what the simulator computed); bands are added where
rows are reported, so regenerated bands apply to cached rows too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from sim.bands import Band, Bands, shipped_bands
from sim.rows import ResultRow, rank_key

BAND_COLUMNS = (
    "iteration_time_low_s",
    "iteration_time_high_s",
    "throughput_low_samples_per_s",
    "throughput_high_samples_per_s",
    "band_source",
    "within_winner_band",
)
"""Columns :func:`with_bands` adds after :class:`~sim.rows.ResultRow`'s."""
NEAR_SHOWN = 3
"""Configurations within the winner's band named in the console note and ``winner.yaml``."""


def band_of(bands: Bands, row: ResultRow | Mapping[str, Any]) -> Band | None:
    """The band of a row's regime (None without bands)."""
    get = row.get if isinstance(row, Mapping) else row.__getitem__
    return bands.lookup(str(get("framework")), int(get("tensor_parallel")), int(get("microbatch_size")))


def _fields(bands: Bands, rec: Mapping[str, Any]) -> dict[str, Any]:
    time_s, tput = rec.get("iteration_time_s"), rec.get("throughput_samples_per_s")
    band = band_of(bands, rec)
    if band is None or not _num(time_s) or not _num(tput):
        return dict.fromkeys(BAND_COLUMNS[:4], math.nan) | {"band_source": ""}
    lo_s, hi_s = band.time_s(float(time_s))
    lo, hi = band.throughput(float(tput))
    return {
        "iteration_time_low_s": lo_s,
        "iteration_time_high_s": hi_s,
        "throughput_low_samples_per_s": lo,
        "throughput_high_samples_per_s": hi,
        "band_source": band.label(),
    }


def _num(v: Any) -> bool:
    return v is not None and isinstance(v, int | float) and math.isfinite(v)


def with_bands(df: pd.DataFrame, bands: Bands | None = None) -> pd.DataFrame:
    """``df`` (rows as ``results.csv`` has them) with :data:`BAND_COLUMNS` added.

    Args:
        df: one row per configuration, with ``model``, ``framework``, ``tensor_parallel``,
            ``microbatch_size``, ``iteration_time_s``, ``throughput_samples_per_s``, ``fits``.
        bands: default: the shipped bands (:func:`sim.bands.shipped_bands`).
    """
    bands = shipped_bands() if bands is None else bands
    records = df.to_dict("records")
    added = pd.DataFrame([_fields(bands, r) for r in records], index=df.index)
    out = pd.concat([df, added.reindex(columns=list(BAND_COLUMNS[:5]))], axis=1)
    out["within_winner_band"] = False
    for _, idx in out.groupby("model").groups.items():
        near = _near_winner(out.loc[idx])
        out.loc[near, "within_winner_band"] = True
    return out


def _winner(df: pd.DataFrame) -> Any:
    """Index label of the winner of one model's rows (the best that fits by
    :func:`sim.rows.rank_key`, as :func:`sim.rows.pick_winner` picks), or None."""
    recs = df.to_dict("records")
    ok = [i for i, r in enumerate(recs) if bool(r.get("fits")) and not (r.get("error") or "")]
    return df.index[min(ok, key=lambda i: rank_key(recs[i]))] if ok else None


def _near_winner(df: pd.DataFrame) -> list:
    """Index labels of the fitting rows (winner left out) whose throughput band overlaps the
    winner's."""
    win = _winner(df)
    if win is None or not _num(df.loc[win, "throughput_low_samples_per_s"]):
        return []
    lo, hi = (df.loc[win, f"throughput_{k}_samples_per_s"] for k in ("low", "high"))
    fit = df["fits"].astype(bool) & (df["error"].fillna("") == "")
    near = fit & (df["throughput_high_samples_per_s"] >= lo)
    near &= df["throughput_low_samples_per_s"] <= hi
    return [i for i in df.index[near] if i != win]


def within_band(df: pd.DataFrame, bands: Bands | None = None) -> pd.DataFrame:
    """The rows of one model's table within the winner's band, best first (:func:`with_bands`
    is applied first when ``df`` lacks its columns)."""
    if "within_winner_band" not in df:
        df = with_bands(df, bands)
    near = df[df["within_winner_band"].astype(bool)]
    order = sorted(range(len(near)), key=lambda i: rank_key(near.iloc[i].to_dict()))
    return near.iloc[order]


def describe(rec: Mapping[str, Any]) -> str:
    """``1f1b p=4 w=2 t=1 b=2 m=16 recompute`` for a row."""
    return (
        f"{rec['schedule']} p={int(rec['stages'])} w={int(rec['dp_width'])} "
        f"t={int(rec['tensor_parallel'])} b={int(rec['microbatch_size'])} "
        f"m={int(rec['microbatches'])} {rec['memory_policy']}"
    )


def winner_band(df: pd.DataFrame) -> dict[str, Any]:
    """For ``winner.yaml``'s ``prediction``: the winner's band and the configurations within
    it (``df``: one model's rows with :data:`BAND_COLUMNS`; empty without a band)."""
    win = _winner(df)
    if win is None or not df.loc[win, "band_source"]:
        return {}
    rec = df.loc[win].to_dict()
    near = within_band(df)
    out: dict[str, Any] = {k: float(rec[k]) for k in BAND_COLUMNS[:4]}
    out["band_source"] = str(rec["band_source"])
    out["within_band"] = {
        "count": len(near),
        "best": [describe(r) for r in near.head(NEAR_SHOWN).to_dict("records")],
    }
    return out

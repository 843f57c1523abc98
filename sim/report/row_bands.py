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
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from sim.bands import Band, Bands, shipped_bands
from sim.point.rows import ResultRow, rank_key
from sim.report.tables import config_label

if TYPE_CHECKING:
    import pandas as pd

BAND_COLUMNS = (
    "iteration_time_low_s",
    "iteration_time_high_s",
    "throughput_low_samples_per_s",
    "throughput_high_samples_per_s",
    "band_source",
    "within_winner_band",
)
"""Columns :func:`with_bands` adds after :class:`~sim.point.rows.ResultRow`'s."""
NEAR_SHOWN = 3
"""Configurations within the winner's band named in the console note and ``winner.yaml``."""


CPU_RANK_MODEL = "cpu-rank"
"""The device model ``sim calibrate`` writes for a CPU rank (``backends.torch.profile.layers``)."""


def bands_for(gpu_models: Iterable[str]) -> Bands:
    """The bands that apply on hardware whose devices are ``gpu_models``: the shipped ones
    (:func:`sim.bands.shipped_bands`), or none where a device is a CPU rank, since every
    residual behind the shipped bands is a whole iteration on GPU servers (their file's
    ``sources``) and says nothing of how a CPU replay errs (README, "How close the time is")."""
    if any(m == CPU_RANK_MODEL for m in gpu_models):
        return Bands([])
    return shipped_bands()


def band_of(bands: Bands, row: ResultRow | Mapping[str, Any]) -> Band | None:
    """The band of a row's regime (None without bands)."""
    rec: Mapping[str, Any] = row if isinstance(row, Mapping) else row.model_dump()
    return bands.lookup(
        str(rec["framework"]), int(rec["tensor_parallel"]), int(rec["microbatch_size"])
    )


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


def _num(v: Any) -> TypeGuard[float]:
    """A finite number (not None, not NaN)."""
    return v is not None and isinstance(v, int | float) and math.isfinite(v)


def with_bands(df: pd.DataFrame, bands: Bands | None = None) -> pd.DataFrame:
    """``df`` (rows as ``results.csv`` has them) with :data:`BAND_COLUMNS` added.

    Args:
        df: one row per configuration, with ``model``, ``framework``, ``tensor_parallel``,
            ``microbatch_size``, ``iteration_time_s``, ``throughput_samples_per_s``, ``fits``
            and the columns :func:`sim.point.rows.rank_key` reads.
        bands: default: the shipped bands (:func:`sim.bands.shipped_bands`).
    """
    import pandas as pd  # on first use: `import sim.api` stays fast

    bands = shipped_bands() if bands is None else bands
    recs = _records(df)
    fields = [_fields(bands, r) for r in recs]
    for rec, f in zip(recs, fields, strict=True):
        rec.update(f)
    cols = {k: [f[k] for f in fields] for k in BAND_COLUMNS[:5]}
    cols["within_winner_band"] = _near_flags(recs)
    return pd.concat([df, pd.DataFrame(cols, index=df.index)], axis=1)


_READ = (
    "model",
    "fits",
    "error",
    "iteration_time_s",
    "throughput_samples_per_s",
    "framework",
    "schedule",
    "stages",
    "dp_width",
    "tensor_parallel",
    "context_parallel",
    "sequence_parallel",
    "virtual_stages",
    "dp_shard",
    "expert_parallel",
    "expert_tensor_parallel",
    "microbatch_size",
    "microbatches",
    "memory_policy",
    "precision",
    *BAND_COLUMNS,
)
"""Columns read here: :func:`_fields`, :func:`sim.point.rows.rank_key`, :func:`describe`."""


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as dicts of the columns of :data:`_READ` (column by column: ``to_dict`` costs
    ten times more)."""
    names = [c for c in _READ if c in df.columns]
    columns = [df[c].tolist() for c in names]
    return [dict(zip(names, vals, strict=True)) for vals in zip(*columns, strict=True)]


def _ok(rec: Mapping[str, Any]) -> bool:
    """Fits and simulated without error (an empty error reads back from a CSV as NaN)."""
    err = rec.get("error")
    return bool(rec.get("fits")) and not (isinstance(err, str) and err)


def _winners(recs: list[dict[str, Any]]) -> dict[str, int]:
    """Per model, the position of its winner (the best that fits by :func:`sim.point.rows.rank_key`,
    as :func:`sim.point.rows.pick_winner` picks)."""
    best: dict[str, int] = {}
    for i, rec in enumerate(recs):
        j = best.get(rec["model"])
        if _ok(rec) and (j is None or rank_key(rec) < rank_key(recs[j])):
            best[rec["model"]] = i
    return best


def _near_flags(recs: list[dict[str, Any]]) -> list[bool]:
    """Per row: it fits, is not its model's winner and its throughput band overlaps the
    winner's."""
    win = _winners(recs)
    out = []
    for i, rec in enumerate(recs):
        w = recs[win[rec["model"]]] if rec["model"] in win else None
        lo, hi = rec["throughput_low_samples_per_s"], rec["throughput_high_samples_per_s"]
        out.append(
            w is not None
            and i != win[rec["model"]]
            and _ok(rec)
            and _num(lo)
            and _num(w["throughput_low_samples_per_s"])
            and hi >= w["throughput_low_samples_per_s"]
            and lo <= w["throughput_high_samples_per_s"]
        )
    return out


def describe(rec: Mapping[str, Any]) -> str:
    """A row's label as the table prints it (:func:`~sim.report.tables.config_label`:
    ``1f1b p=4 v=2 w=2 t=2+sp cp=2 b=1 m=16 dist_opt fp8-delayed``), so a configuration named
    within the winner's band can be found in the table."""
    return config_label(rec)


def winner_bands(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per model with a winner that has a band, for ``winner.yaml``'s ``prediction``: the
    winner's band (:data:`BAND_COLUMNS`) and the configurations within it, best first
    (``within_band``: their count and the first :data:`NEAR_SHOWN`).

    Args:
        df: the rows, :func:`with_bands` applied.
    """
    recs = _records(df)
    out: dict[str, dict[str, Any]] = {}
    for model, i in _winners(recs).items():
        win = recs[i]
        if not win["band_source"]:
            continue
        near = sorted(
            (r for r in recs if r["model"] == model and r["within_winner_band"]), key=rank_key
        )
        out[model] = {k: float(win[k]) for k in BAND_COLUMNS[:4]}
        out[model]["band_source"] = str(win["band_source"])
        out[model]["within_band"] = {
            "count": len(near),
            "best": [describe(r) for r in near[:NEAR_SHOWN]],
        }
    return out

"""Prediction bands: where measured iteration times fell around pipesim's predictions, per regime.

A *residual* is one whole iteration measured by others and predicted by pipesim: the ratio
``measured / predicted`` of its iteration time, with the regime it ran in (training framework
profile, tensor-parallel degree ``t``, micro-batch size ``b``). A *band* is what the residuals of
one regime say about a new prediction there: the :data:`LOW_Q` and :data:`HIGH_Q` quantiles of the
ratio (linear interpolation between order statistics, numpy's default), so that a predicted
iteration time ``T`` reads as "measured between ``T x ratio_low`` and ``T x ratio_high`` in 80 %
of the measured runs of this regime" (the band need not contain ``T``: a biased model's band
lies to one side of it).

Regimes, finest first (:data:`LEVELS`); a prediction takes the first regime with at least
:data:`MIN_POINTS` residuals, so a regime with too few points falls back to a coarser one:

1. framework, ``t`` and ``b``;
2. framework and ``t``;
3. framework;
4. ``t``, residuals of every framework pooled;
5. every residual.

The shipped bands (``sim/data/bands.csv``) are regenerated from the validation data in the
repository by ``python benchmarks/accuracy/make_bands.py`` (its header says from what, with which command,
when); nothing here is fitted to the data, the file only records how wrong the model was on it.
Assumption: a new configuration's error is distributed like that of the measured runs of its
regime (other hardware, models and pipeline depths than the measured ones included).

Example:
    >>> rs = [Residual("megatron-lm", 2, 1, 1.0 + i / 100) for i in range(10)]
    >>> bands = Bands(build_bands(rs))
    >>> band = bands.lookup("megatron-lm", 2, 4)  # b = 4 has no residual: falls back to (f, t)
    >>> band.label(), round(band.ratio_low, 3), round(band.ratio_high, 3)
    ('megatron-lm t=2 (n=10)', 1.009, 1.081)
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

LOW_Q = 0.10
HIGH_Q = 0.90
"""The band's quantiles of ``measured / predicted``: 80 % of a regime's measured runs lie inside
(a choice, not a measurement)."""
MIN_POINTS = 10
"""Fewest residuals a regime needs to give its own band (assumption: fewer make a p10/p90
meaningless); below it the prediction takes the next coarser regime of :data:`LEVELS`."""
KEYS = ("framework", "tensor_parallel", "microbatch_size")
LEVELS: tuple[tuple[str, ...], ...] = (
    ("framework", "tensor_parallel", "microbatch_size"),
    ("framework", "tensor_parallel"),
    ("framework",),
    ("tensor_parallel",),
    (),
)
"""Regimes from finest to coarsest: the keys each one fixes (the others pooled)."""
COLUMNS = (
    "framework",
    "tensor_parallel",
    "microbatch_size",
    "n",
    "ratio_low",
    "ratio_median",
    "ratio_high",
    "mape",
    "signed_error",
    "sources",
)
"""Columns of the bands file; an empty key means "any" (pooled)."""


@dataclass(frozen=True)
class Residual:
    """One measured iteration against its prediction.

    Attributes:
        framework: the framework profile it ran as (:mod:`sim.framework`).
        tensor_parallel: ``t``.
        microbatch_size: ``b`` (samples).
        ratio: measured / predicted iteration time (> 0).
        source: the data set it comes from (e.g. ``vtrain``).
    """

    framework: str
    tensor_parallel: int
    microbatch_size: int
    ratio: float
    source: str = ""


@dataclass(frozen=True)
class Band:
    """The spread of ``measured / predicted`` iteration time in one regime.

    Attributes:
        framework, tensor_parallel, microbatch_size: the regime (None: pooled over that key).
        n: residuals in it.
        ratio_low, ratio_median, ratio_high: the :data:`LOW_Q`, 0.5 and :data:`HIGH_Q`
            quantiles of measured / predicted.
        mape: mean of ``|predicted / measured - 1|`` (``bench_measured.py``'s error).
        signed_error: mean of ``predicted / measured - 1`` (negative: pipesim too fast).
        sources: the data sets of its residuals, ``+``-joined.
    """

    framework: str | None
    tensor_parallel: int | None
    microbatch_size: int | None
    n: int
    ratio_low: float
    ratio_median: float
    ratio_high: float
    mape: float
    signed_error: float
    sources: str

    def regime(self) -> str:
        """``megatron-lm t=2 b=4``; ``all frameworks t=2``; ``all`` for the pooled band."""
        parts = [self.framework or ("all frameworks" if self.tensor_parallel else "all")]
        if self.tensor_parallel is not None:
            parts.append(f"t={self.tensor_parallel}")
        if self.microbatch_size is not None:
            parts.append(f"b={self.microbatch_size}")
        return " ".join(parts)

    def label(self) -> str:
        """The regime with its sample count, as ``band_source`` shows it."""
        return f"{self.regime()} (n={self.n})"

    def time_s(self, iteration_time_s: float) -> tuple[float, float]:
        """The band of a predicted iteration time: (low, high) seconds."""
        return iteration_time_s * self.ratio_low, iteration_time_s * self.ratio_high

    def throughput(self, samples_per_s: float) -> tuple[float, float]:
        """The band of a predicted throughput (samples/s): (low, high), the reciprocal ratios."""
        return samples_per_s / self.ratio_high, samples_per_s / self.ratio_low


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by linear interpolation between order statistics:
    :func:`numpy.quantile`'s default (``method="linear"``, Hyndman and Fan's type 7).

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside [0, 1].
    """
    if not values or not 0 <= q <= 1:
        raise ValueError(f"quantile {q} of {len(values)} values")
    import numpy as np  # on first use: `import sim` stays light

    return float(np.quantile(np.asarray(values, dtype=float), q, method="linear"))


def _band(key: dict, group: list[Residual]) -> Band:
    ratios = [r.ratio for r in group]
    errors = [1 / r - 1 for r in ratios]  # predicted / measured - 1
    return Band(
        framework=key.get("framework"),
        tensor_parallel=key.get("tensor_parallel"),
        microbatch_size=key.get("microbatch_size"),
        n=len(group),
        ratio_low=quantile(ratios, LOW_Q),
        ratio_median=quantile(ratios, 0.5),
        ratio_high=quantile(ratios, HIGH_Q),
        mape=sum(abs(e) for e in errors) / len(errors),
        signed_error=sum(errors) / len(errors),
        sources="+".join(sorted({r.source for r in group if r.source})),
    )


def build_bands(residuals: Iterable[Residual], min_points: int = MIN_POINTS) -> list[Band]:
    """The band of every regime of every level with at least ``min_points`` residuals, coarsest
    level last, each level sorted by its keys.

    Raises:
        ValueError: a residual's ratio is not a positive finite number.
    """
    rs = list(residuals)
    bad = [r for r in rs if not (math.isfinite(r.ratio) and r.ratio > 0)]
    if bad:
        raise ValueError(f"measured / predicted must be positive and finite: {bad[0]}")
    out = []
    for level in LEVELS:
        groups: dict[tuple, list[Residual]] = {}
        for r in rs:
            groups.setdefault(tuple(getattr(r, k) for k in level), []).append(r)
        for values in sorted(groups):
            if len(groups[values]) >= min_points:
                out.append(_band(dict(zip(level, values, strict=True)), groups[values]))
    return out


class Bands:
    """The bands of the regimes, looked up finest first (:data:`LEVELS`).

    Args:
        bands: as :func:`build_bands` gives them (only regimes with enough residuals).
    """

    def __init__(self, bands: Iterable[Band]) -> None:
        self.bands = list(bands)
        self._by = {(b.framework, b.tensor_parallel, b.microbatch_size): b for b in self.bands}

    def lookup(self, framework: str, tensor_parallel: int, microbatch_size: int) -> Band | None:
        """The band of the finest regime holding this configuration (None: no bands at all);
        a profile with options (``megatron-lm[tp_comm_overlap]``) is looked up as the profile."""
        point = {
            "framework": framework.split("[", 1)[0],
            "tensor_parallel": int(tensor_parallel),
            "microbatch_size": int(microbatch_size),
        }
        for level in LEVELS:
            key = tuple(point[k] if k in level else None for k in KEYS)
            if key in self._by:
                return self._by[key]
        return None


def format_bands(bands: Sequence[Band], header: Sequence[str] = ()) -> str:
    """The bands file's text: ``# `` header lines, then CSV (ratios to 4 decimals)."""
    buf = io.StringIO()
    for line in header:
        buf.write(f"# {line}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for b in bands:
        w.writerow(
            [
                b.framework or "",
                b.tensor_parallel or "",
                b.microbatch_size or "",
                b.n,
                *(f"{v:.4f}" for v in (b.ratio_low, b.ratio_median, b.ratio_high)),
                *(f"{v:.4f}" for v in (b.mape, b.signed_error)),
                b.sources,
            ]
        )
    return buf.getvalue()


def parse_bands(text: str) -> list[Band]:
    """The bands of a bands file's text (:func:`format_bands`).

    Raises:
        ValueError: a row lacks a column or holds a value of the wrong type.
    """
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    out = []
    for rec in csv.DictReader(lines):
        try:
            out.append(
                Band(
                    framework=rec["framework"] or None,
                    tensor_parallel=int(rec["tensor_parallel"]) if rec["tensor_parallel"] else None,
                    microbatch_size=int(rec["microbatch_size"]) if rec["microbatch_size"] else None,
                    n=int(rec["n"]),
                    **{k: float(rec[k]) for k in COLUMNS[4:9]},
                    sources=rec["sources"],
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bands file row {rec}: {exc}") from None
    return out


def shipped_path() -> Path:
    """Where the shipped bands file is (package data ``sim/data/bands.csv``)."""
    return Path(str(resources.files("sim").joinpath("data", "bands.csv")))


@lru_cache(maxsize=1)
def shipped_bands() -> Bands:
    """The shipped bands (read once per process; no bands when the file is missing)."""
    path = shipped_path()
    return Bands(parse_bands(path.read_text(encoding="utf-8")) if path.is_file() else [])

"""``sim compare``: measured runs against pipesim's predictions, as a table, a CSV and a plot.

Each run (:func:`sim.runs.readers.read_runs`) is expressed (:func:`sim.runs.express.express`)
and simulated once per distinct configuration (:class:`sim.runs.predict.Predictor`, with a
hardware overlay when given). Per run: measured and predicted iteration time, the error
``predicted / measured - 1`` and whether the measurement falls in the prediction's band (the
shipped bands of its regime, :mod:`sim.bands`); measured and predicted peak memory (allocated
against the simulator's peak less its runtime reserve, reserved against its whole peak) and the
error; per category where the log breaks the iteration down (Megatron-LM's timers:
``forward-backward``, ``optimizer``) against the simulator's optimizer step and the rest.
Runs that cannot be simulated are listed with every reason.

Writes ``compare.csv`` (:data:`COLUMNS`) and ``compare.png`` (predicted against measured time
and memory, log-log, with the ±10 % lines) into the output folder, each atomically.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.atomic import atomic_write_bytes, atomic_write_text, check_writable
from sim.bands import shipped_bands
from sim.report.row_bands import band_of
from sim.runs.express import Expressed, express
from sim.runs.predict import Prediction, Predictor
from sim.runs.readers import read_runs
from sim.runs.record import MeasuredRun

COLUMNS = (
    "name", "source", "framework", "gpu", "num_gpus", "layout", "expressed", "reason",
    "measured_time_s", "predicted_time_s", "time_error", "band_low_s", "band_high_s", "in_band",
    "band_source", "measured_memory_bytes", "memory_kind", "predicted_memory_bytes",
    "memory_error", "categories", "hardware", "trace_origin",
)  # fmt: skip
"""The columns of ``compare.csv`` (seconds, bytes; errors as fractions). Where the predicted
figures come from: ``hardware`` (the preset the run is simulated on, ``+ overlay`` when a
hardware overlay of the run's machine is set over it: :func:`predicted_with`) and
``trace_origin`` (:mod:`sim.trace.origin`; ``analytic`` for a trace made from the run's
shape); where the measured ones come from: ``source`` (file and row) and ``memory_kind``."""


def predicted_with(ex: Expressed | None, p: Prediction | None) -> dict[str, str]:
    """``hardware`` and ``trace_origin`` of a run's prediction (:data:`COLUMNS`), empty
    strings for a run not expressed or a prediction without a row."""
    hardware = ""
    if ex is not None:
        hardware = ex.hardware + (f" + overlay {ex.overlay}" if ex.overlay else "")
    origin = p.row.trace_origin if p is not None and p.row is not None else ""
    return {"hardware": hardware, "trace_origin": origin}


@dataclass(frozen=True)
class Compared:
    """One run against its prediction (None where not measured or not predicted)."""

    run: MeasuredRun
    expressed: Expressed | None
    reasons: tuple[str, ...]
    prediction: Prediction | None

    def record(self) -> dict[str, Any]:
        """The run's row of ``compare.csv``."""
        r, p, m = self.run, self.prediction, self.run.measured
        lay = r.layout
        t_pred = p.iteration_time_s if p else None
        mem, kind = m.peak_bytes, m.memory_kind
        mem_pred = None
        if p is not None:
            mem_pred = p.allocated_bytes if m.peak_allocated_bytes is not None else p.peak_bytes
        low = high = math.nan
        src = ""
        band = band_of(shipped_bands(), self.expressed.point) if self.expressed else None
        if band is not None and t_pred:
            low, high = band.time_s(t_pred)
            src = band.label()
        t = m.iteration_time_s
        return {
            "name": r.name, "source": r.source, "framework": r.framework, "gpu": r.gpu,
            "num_gpus": r.num_gpus or lay.gpus,
            "layout": f"tp{lay.tp} pp{lay.pp} vp{lay.vp} cp{lay.cp} ep{lay.ep} dp{lay.dp}",
            "expressed": self.expressed is not None,
            "reason": "; ".join(self.reasons) or (p.error if p else ""),
            "measured_time_s": t, "predicted_time_s": t_pred, "time_error": _err(t_pred, t),
            "band_low_s": low, "band_high_s": high,
            "in_band": bool(t and low <= t <= high) if src else None, "band_source": src,
            "measured_memory_bytes": mem, "memory_kind": kind,
            "predicted_memory_bytes": mem_pred, "memory_error": _err(mem_pred, mem),
            "categories": _categories(m.categories, p), **predicted_with(self.expressed, p),
        }  # fmt: skip


def _err(pred: float | None, meas: float | None) -> float | None:
    return pred / meas - 1 if pred and meas else None


def _categories(measured: tuple[tuple[str, float], ...], p: Prediction | None) -> str:
    pred = p.categories if p else {}
    return "; ".join(
        f"{k} {v * 1e3:.1f} ms vs {pred[k] * 1e3:.1f} ms" if k in pred else f"{k} {v * 1e3:.1f} ms"
        for k, v in measured
    )


def compare_runs(runs: Iterable[MeasuredRun], predictor: Predictor | None = None) -> list[Compared]:
    """Each run against its prediction (module doc)."""
    predictor = predictor or Predictor()
    out = []
    for run in runs:
        ex = express(run)
        if isinstance(ex, Expressed):
            out.append(Compared(run, ex, (), predictor.predict(ex)))
        else:
            out.append(Compared(run, None, ex.reasons, None))
    return out


def frame(items: Iterable[Compared]) -> pd.DataFrame:
    """``compare.csv`` as a frame (:data:`COLUMNS`)."""
    return pd.DataFrame([c.record() for c in items], columns=list(COLUMNS))


def summary(df: pd.DataFrame) -> dict[str, float]:
    """Runs, expressed, predicted; MAPE and signed mean error of time and memory."""
    t = df.time_error.dropna().astype(float)
    m = df.memory_error.dropna().astype(float)
    return {
        "runs": len(df), "expressed": int(df.expressed.sum()), "time_n": len(t),
        "time_mape": t.abs().mean() if len(t) else math.nan,
        "time_signed": t.mean() if len(t) else math.nan, "memory_n": len(m),
        "memory_mape": m.abs().mean() if len(m) else math.nan,
        "memory_signed": m.mean() if len(m) else math.nan,
    }  # fmt: skip


def scatter(df: pd.DataFrame, path: Path, title: str = "") -> bool:
    """Predicted against measured time (s) and memory (GiB), log-log with the ±10 % lines,
    drawn to ``path`` atomically; False (nothing drawn) when nothing was predicted."""
    t = df.dropna(subset=["measured_time_s", "predicted_time_s"])
    m = df.dropna(subset=["measured_memory_bytes", "predicted_memory_bytes"])
    if t.empty and m.empty:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, data, x, y, unit, scale in (
        (axes[0], t, "measured_time_s", "predicted_time_s", "iteration time (s)", 1.0),
        (axes[1], m, "measured_memory_bytes", "predicted_memory_bytes", "peak memory (GiB)",
         2.0**30),
    ):  # fmt: skip
        if data.empty:
            ax.set_axis_off()
            continue
        xs, ys = data[x].astype(float) / scale, data[y].astype(float) / scale
        for fw, grp in data.groupby("framework"):
            ax.scatter(grp[x].astype(float) / scale, grp[y].astype(float) / scale, s=10, label=fw)
        lo, hi = min(xs.min(), ys.min()), max(xs.max(), ys.max())
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for f in (0.9, 1.1):
            ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {unit}")
        ax.set_ylabel(f"pipesim predicted {unit}")
        ax.set_title(f"{len(data)} runs; dotted: +-10 %")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()  # drawn whole before a byte reaches the folder
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return True


def compare(
    sources: Iterable[str | Path],
    *,
    out: Path,
    overlay: dict[str, Any] | None = None,
    plot: bool = True,
    **opts: Any,
) -> tuple[pd.DataFrame, list[Path]]:
    """``sim compare``: read, predict, write ``compare.csv`` and ``compare.png`` (module doc).

    Args:
        sources: run files or launch commands (:func:`sim.runs.readers.read_runs`).
        out: the output folder.
        overlay: a hardware overlay to predict with (:mod:`sim.hardware.overlay`).
        plot: draw the scatter plot.
        **opts: what the readers take.

    Raises:
        InputError: an unreadable input or an unwritable folder (nothing is written then).
    """
    runs = [r for s in sources for r in read_runs(s, **opts)]
    check_writable(out, option="--out", directory=True)
    df = frame(compare_runs(runs, Predictor(overlay)))
    out.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out / "compare.csv", df.to_csv(index=False))]
    if plot and scatter(df, out / "compare.png", "pipesim against measured runs"):
        written.append(out / "compare.png")
    return df, written

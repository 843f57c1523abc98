"""Regenerate the shipped prediction bands (``sim/data/bands.csv``) and the README's accuracy table.

Every whole iteration in the repository's validation data that pipesim can predict becomes a
residual (measured / predicted iteration time, :class:`sim.bands.Residual`):

* ``measurements/vtrain/ground_truth_single_h2048.csv``: 720 Megatron-DeepSpeed iterations on one
  8 x A100 node, predicted exactly as ``benchmarks/accuracy/bench_measured.py`` does by default
  (:func:`vtrain_predict.predict`: ``framework: megatron-deepspeed``, ``recompute:full``, 1F1B,
  ``dgx-a100-40gb``, whose preset carries vTrain's measured all-reduce tables);
* ``measurements/megatron-sc21/table1.csv``: Megatron-LM's weak-scaling runs pipesim simulates
  (:func:`measured_sc21.predict_sc21`); measured iteration time from the paper's TFLOP/s per GPU
  and its eq. 3, so the ratio is ``predicted TFLOP/s / measured TFLOP/s``.

The other folders of ``measurements/`` hold no whole iterations (Galvatron's per-layer profiles
and link bandwidths, nccl-tests collectives, a CPU Adam micro-benchmark) and give no residual.
:func:`sim.bands.build_bands` turns the residuals into per-regime bands; this script writes them
with a provenance header, rewrites the README's table between :data:`BEGIN` and :data:`END`, and
the dgx1 answer with its band between :data:`DGX1_BEGIN` and :data:`DGX1_END`.

Run: ``python benchmarks/accuracy/make_bands.py`` (about a minute on an idle core; ``--check`` writes
nothing and exits 1 naming what is stale, as ``tests/test_bands.py`` does).
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.measured_sc21 import FRAMEWORKS, load_sc21, predict_sc21  # noqa: E402
from benchmarks.accuracy.vtrain_predict import FRAMEWORK, predict  # noqa: E402
from benchmarks.accuracy.vtrain_rows import load_vtrain  # noqa: E402
from sim.api import plan  # noqa: E402
from sim.bands import (  # noqa: E402
    HIGH_Q,
    LEVELS,
    LOW_Q,
    MIN_POINTS,
    Band,
    Bands,
    Residual,
    build_bands,
    format_bands,
    parse_bands,
)
from sim.point.rows import ResultRow  # noqa: E402
from sim.report.row_bands import band_of, winner_bands, with_bands  # noqa: E402

BANDS = ROOT / "sim" / "data" / "bands.csv"
README = ROOT / "README.md"
DGX1 = ROOT / "experiments" / "dgx1.yaml"
COMMAND = "python benchmarks/accuracy/make_bands.py"
BEGIN, END = "<!-- bands-table:begin -->", "<!-- bands-table:end -->"
DGX1_BEGIN, DGX1_END = "<!-- dgx1-answer:begin -->", "<!-- dgx1-answer:end -->"


def vtrain_residuals() -> list[Residual]:
    """One residual per vTrain row pipesim predicts (``vtrain_predict.predict``'s defaults)."""
    res = predict(load_vtrain(), "dgx-a100-40gb")
    return [
        Residual(FRAMEWORK, int(r.tensor_parallel), int(r.microbatch_size), ratio, "vtrain")
        for r in res.itertuples(index=False)
        if math.isfinite(ratio := r.iteration_time_ms / r.predicted_ms)
    ]


def sc21_residuals() -> list[Residual]:
    """One residual per Megatron-LM SC'21 run pipesim predicts: predicted / measured TFLOP/s
    per GPU (the same eq. 3 on both sides) is measured / predicted iteration time."""
    res = predict_sc21(load_sc21())
    return [
        Residual(
            FRAMEWORKS[r.ddp],
            int(r.tensor_parallel),
            int(r.microbatch_size),
            r.predicted_tflops / r.tflops_per_gpu,
            "megatron-sc21",
        )
        for r in res.itertuples(index=False)
        if math.isfinite(r.predicted_tflops)
    ]


def header(residuals: list[Residual]) -> list[str]:
    """The provenance lines of the bands file."""
    count = {s: sum(r.source == s for r in residuals) for s in ("vtrain", "megatron-sc21")}
    levels = " > ".join("(" + ", ".join(lv) + ")" if lv else "(all)" for lv in LEVELS)
    return [
        "pipesim prediction bands: measured / predicted whole-iteration time per regime "
        "(sim/bands.py reads this file)",
        f"sources: measurements/vtrain/ground_truth_single_h2048.csv ({count['vtrain']} predicted "
        "iterations, as benchmarks/accuracy/bench_measured.py predicts them); "
        f"measurements/megatron-sc21/table1.csv ({count['megatron-sc21']} runs predicted); "
        "the rest of measurements/ holds no whole iterations",
        f"quantiles p{LOW_Q * 100:.0f} / p50 / p{HIGH_Q * 100:.0f} of measured / predicted; "
        f"regimes with >= {MIN_POINTS} residuals; lookup finest first: {levels}",
        f"command: {COMMAND}",
        f"date: {datetime.date.today().isoformat()}",
    ]


def data_lines(text: str) -> list[str]:
    """The CSV lines of a bands file (its header comments, with the date, left out)."""
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def markdown_table(bands: list[Band]) -> str:
    """The README's accuracy table: one line per regime of the bands file."""
    lines = [
        f"| regime | n | MAPE | signed error | measured / predicted p{LOW_Q * 100:.0f} · p50 · "
        f"p{HIGH_Q * 100:.0f} | data |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for b in bands:
        lines.append(
            f"| {b.regime()} | {b.n} | {b.mape:.1%} | {b.signed_error:+.1%} | "
            f"{b.ratio_low:.2f} · {b.ratio_median:.2f} · {b.ratio_high:.2f} | {b.sources} |"
        )
    return "\n".join(lines)


def dgx1_answer(bands: Bands) -> str:
    """The winners of ``experiments/dgx1.yaml`` with their bands, as the README shows them."""
    p = plan(str(DGX1))
    table = with_bands(p.table()[list(ResultRow.model_fields)], bands)
    lines = []
    for model, w in p.winners.items():
        if w is None:
            lines.append(f"- {model}: no configuration fits")
            continue
        band = band_of(bands, w)
        near = winner_bands(table)[model]["within_band"]
        lo, hi = band.throughput(w.throughput_samples_per_s) if band else (math.nan, math.nan)
        lines.append(
            f"- **{model}**: {w.schedule} p={w.stages} w={w.dp_width} b={w.microbatch_size} "
            f"m={w.microbatches}, {w.throughput_samples_per_s:.1f} samples/s predicted, band "
            f"{lo:.1f}–{hi:.1f} samples/s ({band.label() if band else 'none'}); "
            f"{near['count']} other configurations within each other's band"
        )
    return "\n".join(lines)


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with what lies between the ``begin`` and ``end`` marker lines replaced.

    Raises:
        ValueError: a marker is missing.
    """
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"README.md lacks the markers {begin} ... {end}")
    return text[: i + len(begin)] + "\n" + body + "\n" + text[j:]


def regenerate() -> tuple[str, str]:
    """Predict every residual; returns the bands file's text and the README's new text."""
    residuals = vtrain_residuals() + sc21_residuals()
    text = format_bands(build_bands(residuals), header(residuals))
    bands = parse_bands(text)  # the README shows what the file says, rounded as there
    readme = README.read_text(encoding="utf-8")
    readme = replace_between(readme, BEGIN, END, markdown_table(bands))
    readme = replace_between(readme, DGX1_BEGIN, DGX1_END, dgx1_answer(Bands(bands)))
    return text, readme


def stale(text: str, readme: str) -> list[str]:
    """What the committed files lack of a regeneration (empty: up to date)."""
    out = []
    if not BANDS.is_file() or data_lines(BANDS.read_text(encoding="utf-8")) != data_lines(text):
        out.append(f"{BANDS.relative_to(ROOT)} differs from the validation residuals")
    if README.read_text(encoding="utf-8") != readme:
        out.append("README.md's accuracy table or dgx1 answer differs")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = ap.parse_args()
    text, readme = regenerate()
    if args.check:
        problems = stale(text, readme)
        for p in problems:
            print(f"stale: {p}; regenerate with `{COMMAND}`")
        return 1 if problems else 0
    BANDS.parent.mkdir(parents=True, exist_ok=True)
    BANDS.write_text(text, encoding="utf-8")
    README.write_text(readme, encoding="utf-8")
    print(text)
    print(f"wrote {BANDS.relative_to(ROOT)} and README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

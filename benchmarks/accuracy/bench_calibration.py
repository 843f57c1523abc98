"""``sim calibrate --from-runs`` checked on measured data it was not fitted to.

Three checks (issue 29's closing note; ``--checks`` picks), each with the uncalibrated error
beside the calibrated:

1. ``golden-vtrain``, **across sources, same GPU**: fit the A100 rows of Megatron-LM's
   functional tests (``measured/megatron_golden_a100_gb200.csv``, the expressed A100 rows),
   then predict vTrain's A100 iterations (``vtrain/ground_truth_single_h{1024,2048}.csv``,
   another framework: Megatron-DeepSpeed) with and without the overlay;
2. ``vtrain-golden``: the other way, fit vTrain's h2048 rows, predict the functional tests' A100
   rows and vTrain's h1024 rows;
3. ``simumax-halves``, **across halves of one source**: fit SimuMax's B200 rows with an even
   index (``measured/simumax_b200.csv``), predict the odd ones with and without it.

The overlays are written to ``--out`` (``a100_from_golden.yaml``, ``b200_from_simumax_even.yaml``);
``sim run --hardware-overlay`` and ``sim compare --hardware-overlay`` apply them. The shipped
presets stay uncalibrated: these rows are for checking (HOUSE.md), and the fitted values are
reported, not adopted.

Run: ``python benchmarks/accuracy/bench_calibration.py [--out DIR] [--parameters gemm,kernel_overhead]
[--max-rows N]`` (``--max-rows``: vTrain rows predicted per file, evenly spaced; 0: all).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.bench_measured_data import DATA, SOURCES, read_source  # noqa: E402
from sim.atomic import atomic_write_text  # noqa: E402
from sim.calibrate_runs import PARAMETERS, Fit, fit, mape, overlay_document  # noqa: E402
from sim.compare import compare_runs, frame, summary  # noqa: E402
from sim.runs.predict import Predictor  # noqa: E402
from sim.runs.record import MeasuredRun  # noqa: E402


def report(title: str, result: Fit) -> None:
    print(f"\n== {title}: {len(result.runs)} runs fitted on {result.hardware}")
    for p in PARAMETERS:
        if p.name in result.values:
            print(f"  {p.name:16s} {p.section}.{p.key:24s} preset {result.priors[p.name]:.4g} "
                  f"-> {result.values[p.name]:.4g} +- {result.std[p.name]:.2g}")  # fmt: skip
    for name, why in result.not_fitted.items():
        print(f"  not fitted: {name}: {why}")
    print(f"  in-sample time MAPE: uncalibrated {mape(result.uncalibrated):.1%}, calibrated "
          f"{mape(result.calibrated):.1%}, leave-one-run-out {mape(result.leave_one_out):.1%}")  # fmt: skip


def held_out(title: str, runs: list[MeasuredRun], overlay: dict) -> None:
    before = summary(frame(compare_runs(runs, Predictor())))
    after = summary(frame(compare_runs(runs, Predictor(overlay))))
    print(f"  held out, {title}: {after['time_n']} runs, time MAPE uncalibrated "
          f"{before['time_mape']:.1%} (signed {before['time_signed']:+.1%}) -> calibrated "
          f"{after['time_mape']:.1%} (signed {after['time_signed']:+.1%})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=Path("results/bench_calibration"))
    ap.add_argument("--parameters", default=None, help="comma-separated subset to fit")
    ap.add_argument("--max-rows", type=int, default=0, help="vTrain rows per file (0: all)")
    ap.add_argument("--checks", default="golden-vtrain,vtrain-golden,simumax-halves")
    args = ap.parse_args()
    checks = args.checks.split(",")
    only = args.parameters.split(",") if args.parameters else None
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    golden = read_source("golden", args.data / SOURCES["golden"], None, 0)
    a100 = [r for r in golden if r.gpu.startswith("A100")]
    vt = {n: read_source(n, args.data / SOURCES[n], None, args.max_rows)
          for n in ("vtrain-h2048", "vtrain-h1024")}  # fmt: skip
    if "golden-vtrain" in checks:
        res = fit(a100, only=only, progress=lambda m: print("  ..", m))
        report("A100: Megatron-LM functional tests", res)
        doc = overlay_document(res, [str(args.data / SOURCES["golden"]) + " (A100 rows)"])
        atomic_write_text(args.out / "a100_from_golden.yaml", yaml.safe_dump(doc, sort_keys=False))
        for name, runs in vt.items():
            held_out(f"{name} (Megatron-DeepSpeed on A100)", runs, res.overlay())
    if "vtrain-golden" in checks:
        res = fit(vt["vtrain-h2048"], only=only, progress=lambda m: print("  ..", m))
        report("A100: vTrain h2048 (Megatron-DeepSpeed)", res)
        doc = overlay_document(res, [str(args.data / SOURCES["vtrain-h2048"])])
        atomic_write_text(args.out / "a100_from_vtrain.yaml", yaml.safe_dump(doc, sort_keys=False))
        held_out("vtrain-h1024", vt["vtrain-h1024"], res.overlay())
        held_out("functional tests' A100 rows (Megatron-LM)", a100, res.overlay())
    if "simumax-halves" not in checks:
        print(f"\n{time.perf_counter() - t0:.0f} s wall; overlays in {args.out}")
        return

    simumax = read_source("simumax", args.data / SOURCES["simumax"], None, 0)
    even, odd = simumax[0::2], simumax[1::2]
    res = fit(even, only=only, progress=lambda m: print("  ..", m))
    report("B200: SimuMax rows 0, 2, 4, ...", res)
    doc = overlay_document(res, [str(args.data / SOURCES["simumax"]) + " (even rows)"])
    atomic_write_text(
        args.out / "b200_from_simumax_even.yaml", yaml.safe_dump(doc, sort_keys=False)
    )
    held_out("SimuMax rows 1, 3, 5, ...", odd, res.overlay())
    print(f"\n{time.perf_counter() - t0:.0f} s wall; overlays in {args.out}")


if __name__ == "__main__":
    main()

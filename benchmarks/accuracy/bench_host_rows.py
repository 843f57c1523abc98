"""Host against device time of measured rows, per group: where the simulated iteration goes.

For each expressed row of a source (``golden``: Megatron-LM's functional tests; ``vtrain-h1024``
/ ``vtrain-h2048``), simulates it as ``bench_measured_data.py`` does (:class:`sim.runs.predict.
Predictor`'s hardware and trace) and reads the event log of the rank whose device waited longest
for its host: its compute seconds (forward, backward, recompute) and its ``host_wait`` seconds
per iteration. Prints each row (``-v``) and, per GPU and model family, the rows, MAPE and signed
mean error of the iteration time (error = predicted / measured - 1). Nothing is fitted.

Run: ``PIPESIM_SHARED_DATA=../shared/data python benchmarks/accuracy/bench_host_rows.py
[--source golden] [--match REGEX] [-v]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.memory_rows import GENERATED  # noqa: E402
from sim.config import parse_experiment  # noqa: E402
from sim.events import EventKind  # noqa: E402
from sim.plan.point_row import point_row  # noqa: E402
from sim.point.experiment import Prepared  # noqa: E402
from sim.runs.express import Expressed, express  # noqa: E402
from sim.runs.measured_csv import read_measured_csv  # noqa: E402
from sim.runs.predict import Predictor, build_trace, experiment_of, point_of  # noqa: E402
from sim.runs.vtrain import read_vtrain  # noqa: E402

DATA = Path(os.environ.get("PIPESIM_SHARED_DATA", ROOT.parent / "shared" / "data"))
FILES = {
    "golden": "measured/megatron_golden_a100_gb200.csv",
    "vtrain-h1024": "vtrain/ground_truth_single_h1024.csv",
    "vtrain-h2048": "vtrain/ground_truth_single_h2048.csv",
}


def simulate(ex: Expressed, pr: Predictor):
    """``(iteration seconds, compute seconds, host_wait seconds)`` per iteration of the rank
    that waited longest for its host; None when the row does not simulate."""
    topo = pr.topology(ex.hardware, ex.overlay)
    trace = build_trace(ex, topo)
    exp = parse_experiment(experiment_of(ex, pr.hardware(ex.hardware, ex.overlay), ex.model))
    row, log = point_row(Prepared(exp, "<measured>", topo, {ex.model: trace}), point_of(ex))
    if not row.iteration_time_s or log is None:
        return None
    per: dict[str, Counter] = defaultdict(Counter)
    for e in log.events:
        per[e.device][e.kind] += e.end_s - e.start_s
    dev = max(per, key=lambda d: per[d][EventKind.HOST_WAIT])
    n = len(log.iteration_ends_s) or 1
    compute = per[dev][EventKind.COMPUTE] + per[dev][EventKind.RECOMPUTE]
    return row.iteration_time_s, compute / n, per[dev][EventKind.HOST_WAIT] / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default="golden", choices=sorted(FILES))
    ap.add_argument("--match", default="", help="only rows whose name matches this regex")
    ap.add_argument("-v", action="store_true", help="print every row")
    args = ap.parse_args()
    path = DATA / FILES[args.source]
    runs = read_vtrain(path) if args.source.startswith("vtrain") else read_measured_csv(
        path, generated=GENERATED)  # fmt: skip
    pr, groups = Predictor(), defaultdict(list)
    for run in runs:
        ex = express(run)
        if not isinstance(ex, Expressed) or not re.search(args.match, run.name):
            continue
        try:
            out = simulate(ex, pr)
        except (ValueError, RuntimeError) as exc:
            print(f"not simulated: {run.name}: {exc}")
            continue
        if out is None:
            continue
        t, compute, wait = out
        m = run.measured.iteration_time_s
        gpu = next((g for g in ("A100", "GB200", "H100", "B200") if g in run.gpu), run.gpu)
        fam = "moe" if run.shape.is_moe else run.shape.arch
        groups[gpu, fam].append(t / m - 1)
        groups[gpu, "all"].append(t / m - 1)
        if args.v:
            print(f"{run.name[:72]:72s} {gpu:5s} measured {m:.3f} predicted {t:.3f} "
                  f"({t / m - 1:+.0%}) compute {compute:.3f} host_wait {wait:.3f}")  # fmt: skip
    print(f"{'gpu':6s} {'family':8s} {'rows':>5s} {'MAPE':>7s} {'signed':>7s}")
    for (gpu, fam), errs in sorted(groups.items()):
        mape = statistics.mean(abs(e) for e in errs)
        print(f"{gpu:6s} {fam:8s} {len(errs):5d} {mape:7.1%} {statistics.mean(errs):+7.1%}")


if __name__ == "__main__":
    main()

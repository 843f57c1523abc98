"""One vTrain row's prediction by phase, beside the measured and predicted parts of its group.

For each row named (``h2048-L24-t2p1w1b8B16``: hidden, layers, tensor, pipeline and data
parallel widths, micro-batch size, global batch, as :func:`sim.runs.vtrain.read_vtrain` names
them, without ``gpt-``) this prints:

* measured and predicted iteration time;
* the simulator's seconds per iteration by event kind and stream on each pipeline stage's
  first device (compute, recompute, optimizer, tensor-parallel and data-parallel all-reduces,
  sends, host waits: :class:`sim.events.EventKind`); idle time is what they leave of the
  iteration;
* the row's parts in its ``(h, t, p, w, b)`` group, measured and predicted: the rows are exactly
  linear in the layer count ``L`` and the micro-batch count ``m``
  (``measurements/vtrain/README.md``), ``T = a + c L + m (e + f L)``, so ``a`` (per iteration),
  ``c L`` (per iteration, per layer: the step and the data-parallel reduction), ``m e`` (per
  micro-batch: embedding, head, loads, pipeline fill) and ``m f L`` (the layers) are printed in
  ms for the row (:func:`parts`; a group measured at one ``m`` only gets no parts).

Nothing here feeds the model. Run:
``python benchmarks/accuracy/vtrain_phases.py NAME [NAME ...]`` (``$PIPESIM_SHARED_DATA`` or
``../shared/data``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.config import parse_experiment  # noqa: E402
from sim.events import EventLog  # noqa: E402
from sim.plan.point_row import point_row  # noqa: E402
from sim.point.experiment import Prepared  # noqa: E402
from sim.runs.express import express  # noqa: E402
from sim.runs.predict import Predictor, build_trace, experiment_of, point_of  # noqa: E402
from sim.runs.record import MeasuredRun  # noqa: E402
from sim.runs.vtrain import read_vtrain  # noqa: E402

DATA = Path(os.environ.get("PIPESIM_SHARED_DATA", ROOT.parent / "shared" / "data")) / "vtrain"
NAME = re.compile(r"h(\d+)-L(\d+)-t(\d+)p(\d+)w(\d+)b(\d+)B(\d+)")
PARTS = ("a", "cL", "me", "mfL")


def parts(layers: np.ndarray, m: np.ndarray, times: np.ndarray, row: tuple[int, int]) -> dict:
    """``a, c L, m e, m f L`` of ``T = a + c L + m (e + f L)`` fitted to a group's rows
    (least squares, exact on vTrain's rows) at ``row = (L, m)``, in the unit of ``times``.

    Example (T = 1 + 2 L + m (3 + 4 L)):
        >>> L, m = np.array([1, 2, 1, 2]), np.array([1, 1, 2, 2])
        >>> {k: round(v, 6) for k, v in parts(L, m, 1 + 2 * L + m * (3 + 4 * L), (2, 2)).items()}
        {'a': 1.0, 'cL': 4.0, 'me': 6.0, 'mfL': 16.0}
    """
    x = np.c_[np.ones(len(layers)), layers, m, m * layers]
    a, c, e, f = np.linalg.lstsq(x, times, rcond=None)[0]
    n_layers, n_mb = row
    return {"a": a, "cL": c * n_layers, "me": n_mb * e, "mfL": n_mb * f * n_layers}


def _simulate(pred: Predictor, run: MeasuredRun) -> tuple[float, EventLog | None]:
    """Predicted seconds and event log of one run (as :meth:`Predictor.predict` builds it)."""
    item = express(run)
    topo = pred.topology(item.hardware, item.overlay)
    hw = pred.hardware(item.hardware, item.overlay)
    exp = parse_experiment(experiment_of(item, hw, item.model))
    prep = Prepared(exp, "<measured>", topo, {item.model: build_trace(item, topo)})
    row, log = point_row(prep, point_of(item))
    return float(row.iteration_time_s or float("nan")), log


def phases(log: EventLog) -> pd.DataFrame:
    """Seconds per iteration by device, event kind and stream."""
    per: dict[tuple[str, str, str], float] = defaultdict(float)
    for ev in log.events:
        per[ev.device, str(ev.kind), str(ev.stream)] += ev.end_s - ev.start_s
    n = max(1, len(log.iteration_ends_s))
    out = pd.DataFrame([(d, k, s, v / n) for (d, k, s), v in per.items()],
                       columns=["device", "kind", "stream", "s_per_iter"])  # fmt: skip
    return out.sort_values(["device", "s_per_iter"], ascending=[True, False])


def _group(runs: list[MeasuredRun], key: tuple[int, ...]) -> list[MeasuredRun]:
    out = []
    for r in runs:
        h, _, t, p, w, b, _ = map(int, NAME.search(r.name).groups())  # type: ignore[union-attr]
        if (h, t, p, w, b) == key:
            out.append(r)
    return out


def show(name: str, pred: Predictor) -> None:
    """Print one row's phases and parts (module doc)."""
    h, layers, t, p, w, b, gb = map(int, NAME.fullmatch(name).groups())  # type: ignore[union-attr]
    runs = read_vtrain(DATA / f"ground_truth_single_h{h}.csv")
    run = next(r for r in runs if r.name == f"gpt-{name}")
    measured = run.measured.iteration_time_s
    predicted, log = _simulate(pred, run)
    print(f"{name}: measured {measured * 1e3:.1f} ms, predicted {predicted * 1e3:.1f} ms "
          f"({(predicted / measured - 1) * 100:+.1f} %)")  # fmt: skip
    if log is not None:
        ph = phases(log)
        firsts = ph.groupby("device").s_per_iter.sum().index[:: t * w] if p > 1 else ph.device[:1]
        for dev in firsts:
            body = ph[ph.device == dev]
            print(f"  {dev}: " + ", ".join(f"{k}/{s} {v * 1e3:.2f}" for _, k, s, v in
                                          body[["kind", "stream", "s_per_iter"]].itertuples()))  # fmt: skip
    group = _group(runs, (h, t, p, w, b))
    ms = np.array([r.global_batch // (r.microbatch_size * w) for r in group])
    if len(set(ms)) < 2:
        print("  (one micro-batch count in its group: no parts)")
        return
    ls = np.array([r.shape.layers for r in group])
    meas = np.array([r.measured.iteration_time_s for r in group]) * 1e3
    pr = np.array([_simulate(pred, r)[0] for r in group]) * 1e3
    m = gb // (b * w)
    pm, pp = parts(ls, ms, meas, (layers, m)), parts(ls, ms, pr, (layers, m))
    print("  parts (ms) measured / predicted: "
          + ", ".join(f"{k} {pm[k]:.1f} / {pp[k]:.1f}" for k in PARTS))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help="rows, e.g. h2048-L24-t2p1w1b8B16")
    args = ap.parse_args()
    pred = Predictor()
    for name in args.names:
        if not NAME.fullmatch(name):
            sys.exit(f"vtrain_phases.py: {name!r} is not a row name like h2048-L24-t2p1w1b8B16")
        show(name, pred)


if __name__ == "__main__":
    main()

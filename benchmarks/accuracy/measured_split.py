"""Split vTrain's measured and pipesim's predicted iteration times into per-iteration and
per-micro-batch costs, each a fixed part and a per-layer part.

Within one ``(t, p, w, b)`` group the rows vary the layer count ``L`` and the micro-batch count
``m`` (``B / (b w)``); the measured rows are exactly linear in ``L`` (measurements/vtrain/README.md),
so each group is fitted by least squares as ``T = a + c L + m (e + f L)``: ``a + c L`` per
iteration (step, reductions), ``e + f L`` per micro-batch (``e``: embedding, head, loss, loads;
``f``: one layer's forward, recompute and backward). ``c`` and ``f`` are scaled by ``p`` (per layer
of one stage). This describes the rows; nothing here feeds the model.

Run: ``python benchmarks/accuracy/measured_split.py [predictions.csv]`` (written by ``bench_measured.py``).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

GROUP = ["tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch_size"]


def split(df: pd.DataFrame) -> pd.DataFrame:
    """One row per group with at least two layer counts and two micro-batch counts: ``a, c, e,
    f`` (ms) of the measured (``_meas``) and the predicted (``_pred``) times."""
    rows = []
    for key, g in df.groupby(GROUP):
        if g.layers.nunique() < 2 or g.microbatches.nunique() < 2:
            continue
        x = np.c_[np.ones(len(g)), g.layers, g.microbatches, g.microbatches * g.layers]
        row = dict(zip(["t", "p", "w", "b"], key, strict=True))
        for col, tag in (("iteration_time_ms", "meas"), ("predicted_ms", "pred")):
            a, c, e, f = np.linalg.lstsq(x, g[col].to_numpy(), rcond=None)[0]
            p = row["p"]
            row.update({f"a_{tag}": a, f"c_{tag}": c * p, f"e_{tag}": e, f"f_{tag}": f * p})
        rows.append(row)
    return pd.DataFrame(rows)


def main(path: str) -> None:
    out = split(pd.read_csv(path))
    cols = ["t", "p", "w", "b"] + [f"{k}_{t}" for k in "acef" for t in ("meas", "pred")]
    print(out[cols].round(2).to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "predictions.csv")

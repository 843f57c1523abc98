"""How well predictions rank measured configurations, for ``bench_measured.py``: error by knob
(MAPE and signed mean) and planning quality over the questions "one model, one global batch,
one GPU count" (top-1, regret, Kendall tau between predicted and measured order).
"""

from __future__ import annotations

import math
from itertools import combinations

import pandas as pd

QUESTION = ["hidden", "heads", "seq_len", "layers", "global_batch", "gpus"]
"""A planning question: one model, one global batch, one GPU count."""
KNOBS = ["tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch_size"]


def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-a of two equally long sequences (nan for fewer than 2 items)."""
    pairs = list(combinations(range(len(a)), 2))
    if not pairs:
        return math.nan
    s = sum(
        (1 if (a[i] - a[j]) * (b[i] - b[j]) > 0 else -1 if (a[i] - a[j]) * (b[i] - b[j]) < 0 else 0)
        for i, j in pairs
    )
    return s / len(pairs)


def planning(res: pd.DataFrame) -> pd.DataFrame:
    """One row per question with at least two candidates: pick, top-1, regret, tau."""
    rows = []
    for key, grp in res.groupby(QUESTION):
        if len(grp) < 2:
            continue
        best = grp.iteration_time_ms.min()
        ok = grp.dropna(subset=["predicted_ms"])
        if ok.empty:
            rows.append(
                dict(
                    zip(QUESTION, key, strict=True),
                    candidates=len(grp),
                    top1=False,
                    regret=math.nan,
                )
            )
            continue
        pick = ok.loc[ok.predicted_ms.idxmin()]
        rows.append(
            dict(
                zip(QUESTION, key, strict=True),
                candidates=len(grp),
                predicted=len(ok),
                top1=bool(pick.iteration_time_ms <= best),
                regret=pick.iteration_time_ms / best - 1,
                tau=kendall_tau(list(ok.predicted_ms), list(ok.iteration_time_ms)),
            )
        )
    return pd.DataFrame(rows)


def summary(res: pd.DataFrame) -> pd.DataFrame:
    """MAPE, signed mean error and count overall and per value of each knob."""
    ok = res.dropna(subset=["predicted_ms"])
    rows = [
        dict(group="all", value="", n=len(ok), mape=ok.error.abs().mean(), signed=ok.error.mean())
    ]
    for knob in KNOBS:
        for val, grp in ok.groupby(knob):
            rows.append(
                dict(
                    group=knob,
                    value=int(val),
                    n=len(grp),
                    mape=grp.error.abs().mean(),
                    signed=grp.error.mean(),
                )
            )
    return pd.DataFrame(rows)

"""x86 DGX against Grace rows of one Megatron-Bridge release: measured and predicted ratios.

Megatron-Bridge publishes the same model, layout and release on DGX B200 / B300 (x86 hosts,
GPUs on PCIe switches) and on GB200 / GB300 NVL72 (Grace hosts, NVLink-C2C). A pair of such
rows differs only by the platform (its GPU's clocks and power, its host, its network), so the
ratio ``x86 / Grace`` of their measured step times isolates what the platform costs, and the
same ratio of pipesim's predictions tests the platform's mechanisms alone: an error common to
both rows (a missing kernel, a framework cost) cancels. A per-platform signed error does not
(the two platforms' row mixes differ: models, layouts, releases, recipes).

Pairs: rows of ``measured/megatron_bridge_blackwell.csv`` with the same model, release (the
``table`` column's first field, e.g. ``26.04.01``), GPU count, tp / pp / vp / cp / ep, micro
and global batch and precision, one on ``B200`` and one on ``GB200`` (or ``B300`` and
``GB300``). Their recipes may still differ by the settings the recipe table gives per GPU
(``measurements/megatron-bridge/recipes.csv``: e.g. the CUDA-graph scope, which for Qwen3-30B
in 26.02.01-26.04.01 takes attention on B200 and not on GB200: NVIDIA-NeMo/Megatron-Bridge@f9b6319
``scripts/performance/configs/qwen/qwen3_workload_base_configs.py``
``QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1`` / ``..._GB200_FP8_MX_V1``). ``model_rows.py
--host-as PRESET`` predicts the rows with every host priced alike, which shows what the hosts'
pricing does to the ratios. Predictions: a
``predictions.csv`` of ``bench_measured_data.py`` (``where`` ends in the CSV row number,
``predicted_s``), or ``model_rows.py``'s output (``row``, ``predicted_s``). Nothing is fitted.

Prints each pair: measured and predicted ratio and the predicted ratio's error
(``predicted / measured - 1``; negative: pipesim makes the x86 node too fast against Grace).

Run: ``python benchmarks/accuracy/platform_pairs.py /tmp/s10/base/predictions_bsg.csv
[--data ../shared/data]``
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("PIPESIM_SHARED_DATA", ROOT.parent / "shared" / "data"))
MEASURED = "measured/megatron_bridge_blackwell.csv"
PLATFORMS = (("B200", "GB200"), ("B300", "GB300"))
"""(x86 DGX GPU, Grace NVL72 GPU) of one Blackwell generation."""
KEY = ("model", "release", "num_gpus", "tp", "pp", "vp", "cp", "ep", "mbs", "gbs", "precision")
"""What a pair's two rows share."""


def measured_rows(path: Path) -> pd.DataFrame:
    """The Bridge rows with ``row`` (the CSV row number, header = 1), ``release`` (the table's
    first field) and ``measured_s`` (the step time derived from tokens/s)."""
    df = pd.read_csv(path)
    df["row"] = df.index + 2
    df["release"] = df["table"].str.split("/").str[0].str.strip()
    df["measured_s"] = df["step_time_derived_s"]
    return df


def predicted_by_row(path: Path) -> pd.Series:
    """Predicted seconds by CSV row number from a ``predictions.csv`` (``where``) or a
    ``model_rows.py`` output (``row``); rows without a prediction left out."""
    df = pd.read_csv(path)
    if "row" not in df:
        df = df[df["source"] == "bridge"].copy()
        df["row"] = df["where"].str.rsplit(" ", n=1).str[-1].astype(int)
    df = df.dropna(subset=["predicted_s"])
    return df.set_index(df["row"].astype(int))["predicted_s"]


def pairs(measured: pd.DataFrame, predicted: pd.Series) -> pd.DataFrame:
    """One line per (x86 row, Grace row) pair sharing :data:`KEY`: their rows, measured and
    predicted ``x86 / Grace`` ratios (NaN without both predictions) and ``ratio_error``
    (predicted ratio / measured ratio - 1).

    Example: a model measured 10 s on B200 and 8 s on GB200 (1.25), predicted 9 and 9 (1.0):
    the predicted ratio is 20 % low.

    >>> m = pd.DataFrame({"row": [2, 3], "gpu": ["B200", "GB200"], "measured_s": [10.0, 8.0],
    ...                   **{k: [1, 1] for k in KEY}})
    >>> p = pairs(m, pd.Series({2: 9.0, 3: 9.0}))
    >>> p[["x86_row", "grace_row", "measured_ratio", "predicted_ratio", "ratio_error"]].round(
    ...     3).values.tolist()
    [[2.0, 3.0, 1.25, 1.0, -0.2]]
    """
    out = []
    for x86, grace in PLATFORMS:
        a = measured[measured.gpu == x86]
        b = measured[measured.gpu == grace]
        joined = a.merge(b, on=list(KEY), suffixes=("_x86", "_grace"))
        for _, r in joined.iterrows():
            px, pg = predicted.get(r.row_x86), predicted.get(r.row_grace)
            mr = r.measured_s_x86 / r.measured_s_grace
            pr = px / pg if px is not None and pg is not None else float("nan")
            out.append({"model": r.model, "release": r.release, "num_gpus": r.num_gpus,
                        "pair": f"{x86}/{grace}", "x86_row": r.row_x86,
                        "grace_row": r.row_grace, "measured_ratio": mr,
                        "predicted_ratio": pr, "ratio_error": pr / mr - 1})  # fmt: skip
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("predictions", help="predictions.csv or model_rows.py output")
    ap.add_argument("--data", default=str(DATA), help="the shared data folder")
    args = ap.parse_args()
    df = pairs(measured_rows(Path(args.data) / MEASURED), predicted_by_row(Path(args.predictions)))
    if df.empty:
        sys.exit("no pairs")
    pd.set_option("display.width", 200)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    err = df.ratio_error.dropna()
    print(
        f"{len(err)} pairs predicted: mean |ratio error| {err.abs().mean():.1%}, "
        f"signed {err.mean():+.1%}"
    )


if __name__ == "__main__":
    main()

"""vTrain's rows' errors by tensor-parallel width, micro-batch size and layout, per hidden size.

Reads one or more ``predictions.csv`` written by ``bench_measured.py`` (``--rows`` chooses the
hidden size: ``measurements/vtrain/`` holds h2048, ``../shared/data/vtrain/`` both) and prints,
per hidden size (error = predicted / measured - 1, in %):

* MAPE and signed error by ``t`` x ``b``;
* each ``t`` x ``b`` cell's share of the hidden size's MAPE (points: its rows' summed absolute
  error over all the hidden size's rows), so what to work on first;
* the signed error by layout ``(t, p, w)`` x ``b``.

Nothing here feeds the model. Run:
``python benchmarks/accuracy/vtrain_errors.py OUT_h1024/predictions.csv OUT_h2048/predictions.csv``.
"""

from __future__ import annotations

import sys

import pandas as pd

KEYS = {"tensor_parallel": "t", "pipeline_parallel": "p", "data_parallel": "w"}


def tables(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The three tables of the module doc for one hidden size's rows (``error`` a fraction,
    ``microbatch_size`` as ``b``), in %.

    Example (two rows at t 1, b 1: errors +10 % and -30 %):
        >>> d = pd.DataFrame({"tensor_parallel": [1, 1], "pipeline_parallel": [1, 2],
        ...                   "data_parallel": [1, 1], "microbatch_size": [1, 1],
        ...                   "error": [0.1, -0.3]})
        >>> t = tables(d)
        >>> float(t["mape"].loc[1, 1]), float(t["signed"].loc[1, 1]), float(t["share"].loc[1, 1])
        (20.0, -10.0, 20.0)
    """
    d = df.rename(columns={**KEYS, "microbatch_size": "b"}).assign(
        err=lambda x: 100 * x.error, abs_err=lambda x: 100 * x.error.abs()
    )
    return {
        "mape": d.pivot_table(index="t", columns="b", values="abs_err", aggfunc="mean"),
        "signed": d.pivot_table(index="t", columns="b", values="err", aggfunc="mean"),
        "share": d.pivot_table(index="t", columns="b", values="abs_err", aggfunc="sum") / len(d),
        "layout": d.pivot_table(index=["t", "p", "w"], columns="b", values="err", aggfunc="mean"),
    }


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: vtrain_errors.py PREDICTIONS.csv [PREDICTIONS.csv ...]")
    df = pd.concat([pd.read_csv(p) for p in sys.argv[1:]], ignore_index=True)
    pd.set_option("display.width", 200)
    for h, rows in df.groupby("hidden"):
        t = tables(rows)
        print(f"h{h}: {len(rows)} rows, MAPE {100 * rows.error.abs().mean():.1f} %, "
              f"signed {100 * rows.error.mean():+.1f} %")  # fmt: skip
        for name, title in (("mape", "MAPE by t x b"), ("signed", "signed error by t x b"),
                            ("share", "share of the MAPE (points) by t x b"),
                            ("layout", "signed error by (t, p, w) x b")):  # fmt: skip
            print(f"  {title} (%):")
            print(t[name].round(1).to_string().replace("\n", "\n    ").join(["    ", ""]))


if __name__ == "__main__":
    main()

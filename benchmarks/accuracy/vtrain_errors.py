"""vTrain's rows' errors by tensor-parallel width, micro-batch size and layout, per hidden size.

Reads one or more ``predictions.csv`` written by ``bench_measured.py`` (``--rows`` chooses the
hidden size: ``measurements/vtrain/`` holds h2048, ``../shared/data/vtrain/`` both) or by
``bench_measured_data.py`` (its ``vtrain-h1024`` / ``vtrain-h2048`` rows; the other sources
are skipped) and prints, per hidden size (error = predicted / measured - 1, in %):

* MAPE and signed error by ``t`` x ``b``;
* each ``t`` x ``b`` cell's share of the hidden size's MAPE (points: its rows' summed absolute
  error over all the hidden size's rows), so what to work on first;
* the signed error by layout ``(t, p, w)`` x ``b``.

With ``--before OLD.csv`` (the same rows predicted by another version) it prints instead, per
hidden size, MAPE before and after, and by ``t`` x ``b`` the rows whose absolute error went
down (better) and up (worse) and the cell's MAPE before -> after: both sides of a change.

Nothing here feeds the model. Run:
``python benchmarks/accuracy/vtrain_errors.py OUT_h1024/predictions.csv OUT_h2048/predictions.csv``
or ``python benchmarks/accuracy/vtrain_errors.py NEW/predictions.csv --before OLD/predictions.csv``.
"""

from __future__ import annotations

import argparse

import pandas as pd

KEYS = {"tensor_parallel": "t", "pipeline_parallel": "p", "data_parallel": "w"}
DATA_KEYS = {"tp": "tensor_parallel", "pp": "pipeline_parallel", "dp": "data_parallel",
             "mbs": "microbatch_size"}  # fmt: skip
"""``bench_measured_data.py``'s column names -> ``bench_measured.py``'s."""


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` in ``bench_measured.py``'s columns (``hidden``, ``tensor_parallel``, ...,
    ``error``, ``model``): a ``bench_measured_data.py`` file keeps its vTrain rows, its
    ``time_error`` becomes ``error`` and the hidden size is read off the run's name.

    Example:
        >>> d = pd.DataFrame({"source": ["vtrain-h1024", "golden"], "model": ["gpt-h1024-L12-t2p1w1b1B8", "x"],
        ...                   "tp": [2, 1], "pp": [1, 1], "dp": [1, 1], "mbs": [1, 1],
        ...                   "time_error": [-0.1, 0.5], "error": ["", ""]})
        >>> n = normalize(d)
        >>> list(n.hidden), list(n.tensor_parallel), list(n.error)
        ([1024], [2], [-0.1])
    """
    if "source" not in df.columns:
        return df
    out = df[df.source.astype(str).str.startswith("vtrain")].rename(columns=DATA_KEYS)
    out = out.drop(columns=["error"], errors="ignore").rename(columns={"time_error": "error"})
    return out.assign(hidden=out.model.str.extract(r"-h(\d+)-", expand=False).astype(int))


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


def sides(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per ``(t, b)`` cell of one hidden size: rows whose absolute error went down
    (``better``) and up (``worse``), MAPE before and after (%); rows matched by ``model``.

    Example (one cell, one row better 30 -> 10 %, one worse 5 -> 15 %):
        >>> b = pd.DataFrame({"model": ["x", "y"], "tensor_parallel": [1, 1],
        ...                   "microbatch_size": [1, 1], "error": [-0.3, 0.05]})
        >>> s = sides(b, b.assign(error=[-0.1, 0.15]))
        >>> s[["better", "worse"]].values.tolist(), s[["mape_before", "mape_after"]].round(1).values.tolist()
        ([[1, 1]], [[17.5, 12.5]])
    """
    m = before.merge(after[["model", "error"]], on="model", suffixes=("_before", "_after"))
    m = m.assign(
        a0=100 * m.error_before.abs(), a1=100 * m.error_after.abs(), t=m.tensor_parallel,
        b=m.microbatch_size,
    )  # fmt: skip
    g = m.groupby(["t", "b"])
    return pd.DataFrame({
        "better": g.apply(lambda x: int((x.a1 < x.a0 - 1e-9).sum()), include_groups=False),
        "worse": g.apply(lambda x: int((x.a1 > x.a0 + 1e-9).sum()), include_groups=False),
        "mape_before": g.a0.mean(), "mape_after": g.a1.mean(),
    })  # fmt: skip


def _read(paths: list[str]) -> pd.DataFrame:
    return pd.concat([normalize(pd.read_csv(p)) for p in paths], ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("predictions", nargs="+", help="predictions.csv files")
    ap.add_argument("--before", nargs="+", help="the same rows from another version")
    args = ap.parse_args()
    df = _read(args.predictions)
    old = _read(args.before) if args.before else None
    pd.set_option("display.width", 200)
    for h, rows in df.groupby("hidden"):
        print(f"h{h}: {len(rows)} rows, MAPE {100 * rows.error.abs().mean():.2f} %, "
              f"signed {100 * rows.error.mean():+.2f} %")  # fmt: skip
        if old is not None:
            prev = old[old.hidden == h]
            print(f"  before: MAPE {100 * prev.error.abs().mean():.2f} %, "
                  f"signed {100 * prev.error.mean():+.2f} %; rows better / worse by t x b:")  # fmt: skip
            s = sides(prev, rows).round(1).to_string()
            print(s.replace("\n", "\n    ").join(["    ", ""]))
            continue
        t = tables(rows)
        for name, title in (("mape", "MAPE by t x b"), ("signed", "signed error by t x b"),
                            ("share", "share of the MAPE (points) by t x b"),
                            ("layout", "signed error by (t, p, w) x b")):  # fmt: skip
            print(f"  {title} (%):")
            print(t[name].round(1).to_string().replace("\n", "\n    ").join(["    ", ""]))


if __name__ == "__main__":
    main()

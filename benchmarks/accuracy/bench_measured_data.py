"""Every measured run of ``../shared/data/measured/`` and ``../shared/data/vtrain/`` predicted by
pipesim: rows expressed, error per source and per dimension, planning quality, and every row
not expressed with its reason.

Sources (``--data`` folder, default ``../shared/data`` beside the repository, or
``$PIPESIM_SHARED_DATA``; its README gives their provenance):

* ``measured/simumax_b200.csv`` (43 Megatron-LM runs on 8 x B200, time and memory),
* ``measured/megatron_bridge_blackwell.csv`` (254 Megatron-Bridge runs on B200/B300/GB200/GB300,
  time derived from tokens/s), read with the recipe table shipped in
  ``measurements/megatron-bridge/recipes.csv`` (``--bridge-recipes`` for another: the recompute,
  overlap, CUDA-graph and dispatcher settings the tables omit; :mod:`sim.runs.bridge_recipes`),
* ``measured/megatron_golden_a100_gb200.csv`` (607 Megatron-LM functional tests on A100/GB200,
  time and memory),
* ``vtrain/ground_truth_single_h1024.csv`` and ``_h2048.csv`` (1,440 Megatron-DeepSpeed
  iterations on 8 x A100, time).

Each row is read (:mod:`sim.runs.readers`), expressed (:func:`sim.runs.express.express`: the
reasons of every row that is not are the to-do list of what pipesim lacks) and predicted with
the planner's row path, one simulation per distinct configuration
(:class:`sim.runs.predict.Predictor`). Memory is compared as measured: allocated against the
simulator's peak less its runtime reserve, reserved against its whole peak.

Prints, per source: rows, rows expressed, MAPE and signed mean error of time and of memory;
per dimension (tp, pp, cp, ep, family, GPU, and the golden rows' framework version and
platform: a one-node GB200 test apart, :func:`platform`); planning
quality over the questions with several measured configurations (one model, one GPU count, one
global batch): top-1, mean and max regret, Kendall tau; the rows not expressed grouped by
their first reason, and every reason with the rows it blocks (alone or with others). Writes
``predictions.csv`` (every row; ``approximations``: what the simulation changes of each
expressed run, :attr:`sim.runs.express.Expressed.approximations`), ``not_expressed.csv`` (every row not expressed, all reasons)
and ``scatter.png`` into ``--out``. Nothing here is fitted: the rows are what the model
predicts.

Run: ``python benchmarks/accuracy/bench_measured_data.py [--out DIR] [--max-rows N] [--sources a,b]``
(``--max-rows``: at most N rows per source, evenly spaced, for a quick look).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.memory_rows import COPIED_GOLDEN, GENERATED  # noqa: E402
from benchmarks.accuracy.planning_quality import kendall_tau  # noqa: E402
from sim.compare import scatter  # noqa: E402
from sim.runs.bridge_recipes import read_recipes  # noqa: E402
from sim.runs.express import Expressed, express  # noqa: E402
from sim.runs.measured_csv import read_measured_csv  # noqa: E402
from sim.runs.predict import Predictor  # noqa: E402
from sim.runs.record import MeasuredRun  # noqa: E402
from sim.runs.vtrain import read_vtrain  # noqa: E402

DATA = Path(os.environ.get("PIPESIM_SHARED_DATA", ROOT.parent / "shared" / "data"))  # ../shared
RECIPES = ROOT / "measurements" / "megatron-bridge" / "recipes.csv"
SOURCES = {
    "simumax": "measured/simumax_b200.csv",
    "bridge": "measured/megatron_bridge_blackwell.csv",
    "golden": "measured/megatron_golden_a100_gb200.csv",
    "vtrain-h1024": "vtrain/ground_truth_single_h1024.csv",
    "vtrain-h2048": "vtrain/ground_truth_single_h2048.csv",
}
"""Source name -> file under the data folder."""
DIMENSIONS = ("tp", "pp", "cp", "ep", "family", "gpu", "version", "platform")
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "working", "buffers",
              "reserve")  # fmt: skip
"""The predicted peak's categories written per row (``ResultRow.peak_<c>_bytes``; ``reserve``
holds the runtime reserve, the allocator's margin and the framework's buffers)."""
QUESTION = ("source", "family", "gpu", "num_gpus", "gbs", "seq_len", "precision", "version",
            "shape")  # fmt: skip
"""A planning question: one source's model (its shape) on one GPU count with one global batch
(and, for the functional tests, one framework version)."""
GENERIC = (
    (r"expert parallel \d+ over", "expert parallel N over"),
    (r"expert tensor parallel \d+ != tp \d+", "expert tensor parallel != tp"),
    (r"^\d+ GPUs do not hold tp x pp x cp x dp = \d+", "GPUs do not hold tp x pp x cp x dp"),
    (r"^recompute selective:\S+ with", "recompute selective:<modules> with"),
    (r"^recompute selective:\S+ \(", "recompute selective:<modules> ("),
    (r"^(\S+): not in pipesim's Megatron table.*", r"unknown flag (\1)"),
)
"""Reasons that differ only by numbers or module lists, counted as one."""


def read_source(name: str, path: Path, recipes: Path | None, max_rows: int) -> list[MeasuredRun]:
    """The runs of one source, at most ``max_rows`` evenly spaced (0: all)."""
    if name.startswith("vtrain"):
        runs = read_vtrain(path)
    else:
        rec = read_recipes(recipes) if name == "bridge" and recipes else None
        runs = read_measured_csv(path, recipes=rec, generated=GENERATED)
    if max_rows and len(runs) > max_rows:
        step = len(runs) / max_rows
        runs = [runs[int(i * step)] for i in range(max_rows)]
    return runs


def _version(run: MeasuredRun) -> str:
    for tag in ("[dev_", "[lts_"):
        if tag in run.source or tag in run.name:
            return tag.strip("[_")
    return ""


ONE_NODE_TAG = "_1node["
"""What names a functional test of Megatron-LM's one-node GB200 recipes
(``tests/test_utils/recipes/gb200/*-1node.yaml`` at NVIDIA/Megatron-LM@d98e8a64: ``nodes: 1``,
``gpus: 4``; the other GB200 recipes run ``nodes: 2``, ``gpus: 4``): the test case's name ends
in ``_1node``. Their logged steps are unsteady (``measurements/host/golden_rows.md``, golden6),
so the benchmark reports them apart."""


def platform(name: str, gpu: str, version: str) -> str:
    """The functional tests' platform: ``gpu``, with `` 1-node`` for a one-node GB200 test
    (:data:`ONE_NODE_TAG`); ``""`` for rows of other sources (``version`` empty), so that the
    dimension repeats no ``gpu`` grouping there.

    Example:
        >>> platform("gpt3_mcore_te_tp1_pp1_1node[dev_dgx_gb200]", "GB200", "dev")
        'GB200 1-node'
        >>> platform("gpt3_mcore_te_tp1_pp1[dev_dgx_gb200]", "GB200", "dev")
        'GB200'
        >>> platform("LLAMA3_70B", "B200", "")
        ''
    """
    if not version:
        return ""
    return f"{gpu} 1-node" if ONE_NODE_TAG in name else gpu


def record(source: str, run: MeasuredRun, predictor: Predictor) -> dict:
    """One row of ``predictions.csv``."""
    ex = express(run)
    m, lay, s = run.measured, run.layout, run.shape
    rec = {
        "source": source, "model": run.name, "where": run.source, "gpu": run.gpu,
        "num_gpus": run.num_gpus or lay.gpus, "gbs": run.global_batch, "seq_len": run.seq_len,
        "precision": run.precision, "tp": lay.tp, "pp": lay.pp, "vp": lay.vp, "cp": lay.cp,
        "ep": lay.ep, "dp": lay.dp, "mbs": run.microbatch_size,
        "family": "moe" if s.is_moe else s.arch, "version": _version(run),
        "platform": platform(run.name, run.gpu, _version(run)),
        "shape": f"{s.arch} L{s.layers} h{s.hidden} a{s.heads} e{s.moe_experts}",
        "expressed": isinstance(ex, Expressed), "reasons": "",
        "measured_s": m.iteration_time_s, "predicted_s": math.nan,
        "measured_bytes": m.peak_bytes, "memory_kind": "allocated"
        if m.peak_allocated_bytes is not None else "reserved" if m.peak_bytes else "",
        "predicted_bytes": math.nan, "error": "", "fits": math.nan, "approximations": "",
    } | {f"peak_{c}_bytes": math.nan for c in CATEGORIES}  # fmt: skip
    if not isinstance(ex, Expressed):
        rec["reasons"] = " | ".join(ex.reasons)
        return rec
    rec["approximations"] = " | ".join(ex.approximations)
    p = predictor.predict(ex)
    rec["predicted_s"] = p.iteration_time_s if p.iteration_time_s else math.nan
    mem = p.allocated_bytes if rec["memory_kind"] == "allocated" else p.peak_bytes
    rec["predicted_bytes"] = mem if mem else math.nan
    rec["error"] = p.error
    if p.row is not None and not p.row.error:  # every measured row ran: a no-fit is false
        rec["fits"] = p.fits
        for c in CATEGORIES:
            rec[f"peak_{c}_bytes"] = getattr(p.row, f"peak_{c}_bytes", None) or math.nan
    return rec


def copied(name: str) -> bool:
    """Whether a functional test's golden values are a copy of another case's, not a
    measurement of its own configuration (:data:`~benchmarks.accuracy.memory_rows.COPIED_GOLDEN`,
    named there with a space before the ``[version]`` tag).

    Example:
        >>> copied("hybrid_mr_mcore_te_tp2_pp1_cp1_dgx_a100_1N8G[lts_dgx_a100]")
        True
        >>> copied("hybrid_mr_mcore_te_tp2_pp1_cp1_dgx_a100_1N8G[dev_dgx_a100]")
        False
    """
    return name.replace(" ", "") in {c.replace(" ", "") for c in COPIED_GOLDEN}


def errors(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``time_error`` and ``memory_error`` (predicted / measured - 1), both left
    empty for a row whose measured values are copied from another case (:func:`copied`: the
    row stays in ``predictions.csv``, counted by no error)."""
    df = df.copy()
    own = ~df.model.map(copied)
    df["time_error"] = (df.predicted_s / df.measured_s - 1).where(own)
    df["memory_error"] = (df.predicted_bytes / df.measured_bytes - 1).where(own)
    return df


def _stats(grp: pd.DataFrame) -> dict:
    t, m = grp.time_error.dropna(), grp.memory_error.dropna()
    return {
        "rows": len(grp), "expressed": int(grp.expressed.sum()), "time_n": len(t),
        "time_mape": t.abs().mean(), "time_signed": t.mean(), "mem_n": len(m),
        "mem_mape": m.abs().mean(), "mem_signed": m.mean(),
    }  # fmt: skip


def per_source(df: pd.DataFrame) -> pd.DataFrame:
    rows = [{"source": s, **_stats(g)} for s, g in df.groupby("source", sort=False)]
    rows.append({"source": "all", **_stats(df)})
    return pd.DataFrame(rows)


def per_dimension(df: pd.DataFrame) -> pd.DataFrame:
    ok = df[df.time_error.notna() | df.memory_error.notna()]
    rows = []
    for dim in DIMENSIONS:
        for (src, val), g in ok.groupby(["source", dim], sort=True):
            if str(val) in ("", "nan") or ok[ok.source == src][dim].nunique() < 2:
                continue
            rows.append({"source": src, "dimension": dim, "value": val, **_stats(g)})
    return pd.DataFrame(rows)


def planning(df: pd.DataFrame) -> pd.DataFrame:
    """One row per question with at least two predicted candidates: top-1, regret, tau."""
    ok = df.dropna(subset=["predicted_s", "measured_s"])
    rows = []
    for key, g in ok.groupby(list(QUESTION), dropna=False):
        if len(g) < 2:
            continue
        pick = g.loc[g.predicted_s.idxmin()]
        best = g.measured_s.min()
        rows.append({
            **dict(zip(QUESTION, key, strict=True)), "candidates": len(g),
            "top1": bool(pick.measured_s <= best), "regret": pick.measured_s / best - 1,
            "tau": kendall_tau(list(g.predicted_s), list(g.measured_s)),
        })  # fmt: skip
    return pd.DataFrame(rows)


def generic(reason: str) -> str:
    """``reason`` with its numbers and module lists generalised (:data:`GENERIC`)."""
    for pattern, repl in GENERIC:
        reason = re.sub(pattern, repl, reason)
    return reason.strip()


def reasons_table(df: pd.DataFrame) -> tuple[pd.Series, pd.DataFrame]:
    """Rows not expressed by first reason; and per reason, rows it blocks and rows blocked by
    it alone (what implementing it would unlock)."""
    missing = df[~df.expressed]
    first = missing.reasons.str.split(" | ", regex=False).str[0].map(generic)
    every: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    for text in missing.reasons:
        parts = list(dict.fromkeys(generic(p) for p in text.split(" | ")))
        for p in set(parts):
            every[p] += 1
        if len(parts) == 1:
            alone[parts[0]] += 1
    table = pd.DataFrame(
        [{"reason": r, "rows": n, "only_reason": alone.get(r, 0)} for r, n in every.most_common()]
    )
    return first.value_counts(), table


def _pct(x: float) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1%}"


def _fail(message: str) -> None:
    """Bad input: ``message`` (naming the option) on stderr, exit 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="the shared data folder")
    ap.add_argument("--out", type=Path, default=Path("results/bench_measured_data"))
    ap.add_argument("--max-rows", type=int, default=0, help="rows per source (0: all)")
    ap.add_argument("--sources", default=",".join(SOURCES), help="comma-separated subset")
    ap.add_argument("--bridge-recipes", type=Path, default=RECIPES if RECIPES.is_file() else None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    predictor = Predictor()
    recs = []
    unknown = [n for n in args.sources.split(",") if n not in SOURCES]
    if unknown:
        _fail(f"--sources: unknown source(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    for name in args.sources.split(","):
        path = args.data / SOURCES[name]
        if not path.is_file():
            print(f"{name}: {path} not found, skipped")
            continue
        runs = read_source(name, path, args.bridge_recipes, args.max_rows)
        recs += [record(name, r, predictor) for r in runs]
    if not recs:
        _fail(
            f"--data {args.data}: no measured rows found there; give the shared data folder "
            "(the one holding measured/ and vtrain/) with --data or PIPESIM_SHARED_DATA"
        )
    df = errors(pd.DataFrame(recs))
    wall = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "predictions.csv", index=False)
    df[~df.expressed][["source", "model", "where", "reasons"]].to_csv(
        args.out / "not_expressed.csv", index=False
    )
    pd.set_option("display.width", 250)
    pd.set_option("display.max_colwidth", 120)
    fmt = {c: _pct for c in ("time_mape", "time_signed", "mem_mape", "mem_signed")}
    print(f"{len(df)} rows, {int(df.expressed.sum())} expressed, {wall:.0f} s wall "
          f"({len(predictor._done)} distinct configurations simulated)")  # fmt: skip
    print("\nper source (errors: predicted / measured - 1; MAPE shown with a sign-free +):")
    print(per_source(df).to_string(index=False, formatters=fmt))
    print("\nper dimension:")
    print(per_dimension(df).to_string(index=False, formatters=fmt))
    plan = planning(df)
    print("\nplanning quality (questions with >= 2 predicted measured configurations):")
    for src, g in plan.groupby("source") if len(plan) else []:
        print(f"  {src}: {len(g)} questions, top-1 {g.top1.mean():.0%}, mean regret "
              f"{g.regret.mean():.1%}, max regret {g.regret.max():.1%}, mean Kendall tau "
              f"{g.tau.mean():.2f}")  # fmt: skip
    nofit = df[df.fits.eq(False)]  # noqa: E712 (NaN: not predicted)
    print(f"\nfalse no-fits (measured runs pipesim says do not fit; columns fits, peak_*_bytes "
          f"of predictions.csv): {len(nofit)}")  # fmt: skip
    if len(nofit):
        print(nofit.groupby("source").size().to_string())
    copies = df[df.model.map(copied)]
    if len(copies):
        print(f"\n{len(copies)} rows left out of the errors: golden values copied from another "
              f"case, not a measurement of theirs (memory_rows.COPIED_GOLDEN):")  # fmt: skip
        print(copies.model.to_string(index=False))
    failed = df[df.expressed & df.predicted_s.isna()]
    if len(failed):
        print(f"\n{len(failed)} expressed rows did not run in the simulator:")
        print(failed.error.str[:110].value_counts().to_string())
    first, table = reasons_table(df)
    print(f"\n{int((~df.expressed).sum())} rows not expressed, by first reason (every row and "
          f"all its reasons: {args.out / 'not_expressed.csv'}):")  # fmt: skip
    print(first.to_string())
    print("\nevery reason, with the rows it blocks and the rows it alone blocks:")
    print(table.to_string(index=False))
    view = df.rename(columns={"measured_s": "measured_time_s", "predicted_s": "predicted_time_s",
                              "measured_bytes": "measured_memory_bytes",
                              "predicted_bytes": "predicted_memory_bytes", "source": "framework"})  # fmt: skip
    drawn = scatter(view, args.out / "scatter.png", "pipesim against ../shared/data (by source)")
    print(
        f"\nwrote {args.out / 'predictions.csv'}"
        + (f", {args.out / 'scatter.png'}" if drawn else "")
    )


if __name__ == "__main__":
    main()

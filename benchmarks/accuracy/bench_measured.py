"""Whole iterations measured by others, predicted by pipesim: error and planning quality.

Data: ``measurements/vtrain/ground_truth_single_h2048.csv`` (720 Megatron-DeepSpeed iterations on
one 8 x A100 node, vTrain's published ground truth; provenance in its README). Each row becomes
the configuration it measured, through the README's no-GPU path: an analytic GPT trace timed by
the kernel model on the ``dgx-a100-40gb`` preset, tensor parallelism ``t``, pipeline depth
``p``, data-parallel width ``w``, micro-batch ``b``, ``m = B / (b w)`` micro-batches, run as
``framework: megatron-deepspeed`` (:mod:`sim.framework`), which is what vTrain's settings mean in
pipesim's terms:

* Megatron-DeepSpeed (vTrain ``data/README.md``) -> ``framework: megatron-deepspeed``: DeepSpeed's
  pipeline engine, Megatron's placement (``partition: uniform`` gives every stage ``L/p``
  blocks, the embedding to the first, the head to the last), the tied embedding all-reduced
  between them, 1F1B also with ``m < p``;
* ``use_gradient_bucket: false`` -> data-parallel gradients all-reduced after the backward,
  exposed (the profile's ``dp_bucket_bytes = 0``);
* ``use_checkpoint: true`` -> ``memory_policy: recompute:full`` (every transformer layer);
* ``pipeline_scheduling: 1f1b`` -> ``schedule: 1f1b``.

Collectives are timed as the preset times them: the DGX A100 presets carry vTrain's measured
all-reduce tables for 2-8 GPUs of one server (``measurements/vtrain/allreduce_lut.csv``,
:mod:`sim.hardware.comm_tables`), NCCL's model times the rest; ``--collectives model`` drops the
tables.

``--framework pipesim`` runs the rows as the runtime ``sim validate`` replays (torch's 1F1B
refuses the 48 rows with ``m < p``).

Prints:

* MAPE and signed mean error overall and by TP, PP, DP and micro-batch size;
* planning quality over the questions "one model, one global batch, one GPU count" with the
  measured configurations as candidates: top-1 (pipesim's fastest is the measured fastest),
  mean and max regret (how much slower the measured time of pipesim's pick is than the best
  measured), mean Kendall tau between predicted and measured order;

and writes ``predictions.csv`` and ``scatter.png`` (predicted vs measured) to ``--out``; then
the same for Megatron-LM's SC'21 weak-scaling runs (:mod:`measured_sc21`): predicted against
measured TFLOP/s per GPU, written to ``megatron_sc21.csv``.
Nothing here is fitted: the rows are what the model predicts.

The parts: :mod:`vtrain_rows` reads and checks the rows, :mod:`vtrain_predict` simulates each,
:mod:`planning_quality` scores them; this script draws the scatter, prints and writes.

Run: ``python benchmarks/accuracy/bench_measured.py [--hardware dgx-a100-40gb] [--out DIR] [--rows CSV]``
(``--rows``: other measured iterations in the same column layout, e.g. vTrain's other hidden
sizes or its multi-node rows; a row over one server runs on the fewest servers that hold it,
``Nx-<hardware>``, with vTrain's cluster network, ``--cluster-overlay``, default
``vtrain-a100-cluster``: 800 Gb/s per 8-GPU node, measurements/vtrain/multinode.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.measured_sc21 import load_sc21, predict_sc21, sc21_table  # noqa: E402
from benchmarks.accuracy.planning_quality import planning, summary  # noqa: E402
from benchmarks.accuracy.vtrain_predict import FRAMEWORK, POLICY, check_options, predict  # noqa: E402
from benchmarks.accuracy.vtrain_rows import COLUMNS, VTRAIN, RowsError, load_vtrain  # noqa: E402
from sim.errors import InputError  # noqa: E402
from sim.runs.vtrain import MULTI_NODE_OVERLAY  # noqa: E402


def scatter(res: pd.DataFrame, path: Path) -> bool:
    """Predicted vs measured iteration time, coloured by TP degree, log-log, drawn to ``path``
    (atomically); ``False`` and nothing drawn when no row was predicted."""
    if res.predicted_ms.isna().all():
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = res.dropna(subset=["predicted_ms"])
    fig, ax = plt.subplots(figsize=(6, 6))
    for t, grp in ok.groupby("tensor_parallel"):
        ax.scatter(grp.iteration_time_ms, grp.predicted_ms, s=8, label=f"t = {t}")
    lo, hi = (
        ok[["iteration_time_ms", "predicted_ms"]].min().min(),
        ok[["iteration_time_ms", "predicted_ms"]].max().max(),
    )
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], "k:", lw=0.6)
    ax.plot([lo, hi], [lo * 0.9, hi * 0.9], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("pipesim predicted iteration time (ms)")
    ax.set_title(f"{len(ok)} measured iterations; dotted: +-10 %")
    ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--hardware",
        default="dgx-a100-40gb",
        help="server preset, or a hardware file `sim calibrate --device cuda` wrote on the "
        "measured kind of server (default: %(default)s)",
    )
    ap.add_argument("--out", default="results/bench_measured", help="folder for the CSV and PNG")
    ap.add_argument(
        "--framework",
        default=FRAMEWORK,
        help="framework profile the rows run as (default: %(default)s, as vTrain measured; "
        "pipesim: the runtime sim validate replays)",
    )
    ap.add_argument(
        "--memory-policy",
        default=POLICY,
        help="memory policy the rows run with (default: %(default)s, vTrain's use_checkpoint)",
    )
    ap.add_argument(
        "--collectives",
        choices=("preset", "model"),
        default="preset",
        help="collective times: the preset's (measured all-reduce tables where it has them, "
        "NCCL's model elsewhere; default) or NCCL's model alone",
    )
    ap.add_argument(
        "--rows",
        type=Path,
        default=VTRAIN,
        help="CSV of measured iterations in vTrain's layout (columns: "
        + ", ".join(COLUMNS)
        + "; iteration_time_ms in milliseconds); rows over one server run on the fewest "
        "servers of --hardware that hold them (default: the 720 rows in measurements/vtrain/)",
    )
    ap.add_argument(
        "--cluster-overlay",
        default=MULTI_NODE_OVERLAY,
        help="shipped hardware overlay set over the Nx- cluster of rows over one server "
        "(default: %(default)s, vTrain's 800 Gb/s per node; '' keeps the preset's network)",
    )
    args = ap.parse_args()
    try:
        rows = load_vtrain(args.rows)
        check_options(args.hardware, args.framework, args.memory_policy, args.cluster_overlay)
    except RowsError as exc:
        print(f"error: --rows {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    t0 = time.perf_counter()
    res = predict(rows, args.hardware, args.framework, args.memory_policy, args.collectives,
                  args.cluster_overlay)  # fmt: skip
    wall = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res.to_csv(out / "predictions.csv", index=False)
    drawn = scatter(res, out / "scatter.png")
    pd.set_option("display.width", 200)
    missing = res.predicted_ms.isna().sum()
    print(f"{len(res)} measured iterations, {missing} not predicted, {wall:.1f} s wall")
    if missing:
        print(res[res.predicted_ms.isna()].error_text.str[:100].value_counts().to_string())
    unfit = int((res.predicted_ms.notna() & ~res.fits.astype(bool)).sum())
    if unfit:
        print(
            f"{unfit} predicted rows ran although pipesim's memory model says they do not fit "
            "this GPU (column fits; --hardware dgx-a100-80gb if the runs' A100s had 80 GB)"
        )
    print(summary(res).to_string(index=False, float_format=lambda x: f"{x:+.3f}"))
    plan = planning(res)
    if plan.empty:
        print("planning: no question has two measured configurations")
    else:
        print(
            f"planning: {len(plan)} questions, top-1 {plan.top1.mean():.1%}, "
            f"mean regret {plan.regret.mean():.1%}, max regret {plan.regret.max():.1%}, "
            f"mean Kendall tau {plan.tau.mean():.2f}"
        )
    sc21 = predict_sc21(load_sc21())
    sc21.to_csv(out / "megatron_sc21.csv", index=False)
    print("Megatron-LM SC'21 Table 1 (weak scaling), TFLOP/s per GPU with the paper's eq. 3:")
    print(sc21_table(sc21))
    plot = f" and {out / 'scatter.png'}" if drawn else " (no row predicted: no scatter)"
    print(f"wrote {out / 'predictions.csv'}, {out / 'megatron_sc21.csv'}{plot}")


if __name__ == "__main__":
    main()

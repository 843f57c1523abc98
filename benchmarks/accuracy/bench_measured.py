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

Run: ``python benchmarks/accuracy/bench_measured.py [--hardware dgx-a100-40gb] [--out DIR] [--rows CSV]``
(``--rows``: other measured iterations in the same column layout, e.g. vTrain's other hidden
sizes or its multi-node rows).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.measured_sc21 import load_sc21, predict_sc21, sc21_table  # noqa: E402
from sim.config import MAX_GPUS, parse_experiment  # noqa: E402
from sim.errors import InputError  # noqa: E402
from sim.framework.registry import get_framework  # noqa: E402
from sim.hardware.loader import is_preset, load_hardware  # noqa: E402
from sim.memory.registry import parse_policy  # noqa: E402
from sim.plan.point_row import point_row  # noqa: E402
from sim.point.config import PointConfig  # noqa: E402
from sim.point.experiment import Prepared  # noqa: E402
from sim.runs.vtrain import COLUMNS as VTRAIN_COLUMNS  # noqa: E402
from sim.runs.vtrain import read_vtrain  # noqa: E402
from sim.trace.generator import preset_gpu, transformer_trace  # noqa: E402

VTRAIN = ROOT / "measurements" / "vtrain" / "ground_truth_single_h2048.csv"
VOCAB = 50257
"""Megatron's GPT-2 BPE vocabulary: vTrain's configs do not state one (assumption)."""
FRAMEWORK = "megatron-deepspeed"
"""vTrain's data/README.md: every point collected with Megatron-DeepSpeed; its configs say
``use_gradient_bucket: false`` (all-reduce after the backward), ``use_checkpoint: true``,
``pipeline_scheduling: 1f1b`` (measurements/vtrain/README.md)."""
POLICY = "recompute:full"
"""vTrain's configs say ``use_checkpoint: true``: every transformer layer checkpointed."""
QUESTION = ["hidden", "heads", "seq_len", "layers", "global_batch", "gpus"]
"""A planning question: one model, one global batch, one GPU count."""
KNOBS = ["tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch_size"]


COLUMNS = list(VTRAIN_COLUMNS)
"""The columns a measured-rows CSV must have (vTrain's ``data/ground_truth_*.csv`` layout,
:mod:`sim.runs.vtrain`)."""


class RowsError(ValueError):
    """A measured-rows CSV that cannot be read as vTrain's layout; the message names the file,
    the column or row and the fix."""


def load_vtrain(path: Path = VTRAIN) -> pd.DataFrame:
    """The measured rows of ``path`` (vTrain's column layout, :data:`COLUMNS`), with
    ``microbatches`` added (``B / (b w)``); checked by :func:`sim.runs.vtrain.read_vtrain`.

    Raises:
        RowsError: the file is missing or unreadable, a column is missing, a value is not a
            positive number, or ``gpus != t p w`` or ``B`` is not a multiple of ``b w``.
    """
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError):
        df = None  # read_vtrain says why
    if df is not None and set(COLUMNS) <= set(df.columns):
        if df.empty:
            raise RowsError(f"{path}: no rows (only a header); add measured iterations")
        _check_values(df[COLUMNS].apply(pd.to_numeric, errors="coerce"), path)
    try:
        read_vtrain(path)
    except InputError as exc:
        raise RowsError(str(exc)) from None
    df = pd.read_csv(path)
    num = df[COLUMNS].apply(pd.to_numeric)
    df[COLUMNS[:-1]] = num[COLUMNS[:-1]].astype(int)
    df["iteration_time_ms"] = num.iteration_time_ms
    df["microbatches"] = df.global_batch // (df.microbatch_size * df.data_parallel)
    return df


LIMITS = {"gpus": MAX_GPUS, "layers": 1024, "hidden": 1 << 17, "heads": 1024,
          "seq_len": 1 << 20, "global_batch": 1 << 24, "microbatch_size": 1 << 16}  # fmt: skip
"""Largest value read per column: ``sim.config.MAX_GPUS``, and bounds far above any trained
model (assumptions; they keep one row from running for hours)."""


def _check_values(num: pd.DataFrame, path: Path) -> None:
    """Finite values, whole numbers in the count columns, each below :data:`LIMITS`, heads
    dividing the hidden size and ``tensor_parallel`` dividing the heads.

    Raises:
        RowsError: naming the row (as the file numbers lines) and the column.
    """
    num = num[(num > 0).all(axis=1)]  # missing or non-positive values: read_vtrain names them
    for col in COLUMNS:
        values = num[col]
        for i, v in values.items():
            line = f"{path}: row {int(i) + 2}: {col}"  # type: ignore[call-overload]
            if not math.isfinite(v):
                raise RowsError(f"{line}: {v} is not a finite number")
            if col != "iteration_time_ms" and v != int(v):
                raise RowsError(f"{line}: {v} is not a whole number")
            if col in LIMITS and v > LIMITS[col]:
                raise RowsError(f"{line}: {int(v)} is above the {LIMITS[col]:,} read")
    for i, r in num.iterrows():
        line = f"{path}: row {int(i) + 2}"  # type: ignore[call-overload]
        if r.hidden % r.heads:
            raise RowsError(f"{line}: heads: {int(r.heads)} do not divide hidden {int(r.hidden)}")
        if r.heads % r.tensor_parallel:
            raise RowsError(
                f"{line}: tensor_parallel: {int(r.tensor_parallel)} does not divide the "
                f"{int(r.heads)} heads"
            )


def check_options(hardware: str, framework: str, policy: str) -> None:
    """``--hardware``, ``--framework`` and ``--memory-policy`` before any row is simulated.

    Raises:
        InputError: naming the option.
    """
    try:
        get_framework(framework)
    except KeyError as exc:
        raise InputError(str(exc.args[0]), field="--framework") from None
    try:
        parse_policy(policy)
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc.args[0]), field="--memory-policy") from None
    try:
        topo = load_hardware(hardware, field="--hardware")
    except InputError as exc:
        if exc.field == "--hardware":
            raise
        raise InputError(str(exc), field="--hardware") from None
    if topo.gpus[0].compute is None:
        raise InputError(f"{hardware} has no GPU compute model (a CPU description?)",
                         field="--hardware")  # fmt: skip


def row_hardware(hardware: str | dict, gpus: int, per_server: int) -> str | dict | None:
    """The hardware a row of ``gpus`` GPUs runs on: ``hardware`` itself when one server holds
    them, else ``Nx-<preset>`` with the fewest servers of ``per_server`` GPUs that do (its
    network from the preset; :mod:`sim.hardware.cluster`), or ``None`` when ``hardware`` is a
    description file (``sim calibrate``'s) and not a preset that ``Nx-`` can repeat."""
    if gpus <= per_server:
        return hardware
    base = hardware["base"] if isinstance(hardware, dict) else hardware
    if not is_preset(base):
        return None
    servers = -(-gpus // per_server)
    if isinstance(hardware, dict):
        return {**hardware, "base": f"{servers}x-{hardware['base']}"}
    return f"{servers}x-{hardware}"


def model_hardware(preset: str) -> dict:
    """``preset`` without its measured ``collectives:`` tables, so that NCCL's cost model times
    every collective (``--collectives model``)."""
    return {"base": preset, "name": f"{preset}-nccl-model", "collectives": []}


def predict(
    df: pd.DataFrame,
    hardware: str,
    framework: str = FRAMEWORK,
    policy: str = POLICY,
    collectives: str = "preset",
) -> pd.DataFrame:
    """``df`` with ``predicted_ms``, ``fits`` and ``error_text`` (one simulation per row),
    each row run as ``framework`` runs it (:mod:`sim.framework`); ``collectives="preset"``
    times collectives as the preset does (the DGX A100 presets carry vTrain's measured
    all-reduce tables for 2-8 GPUs of one server), ``"model"`` by NCCL's cost model alone
    (:func:`model_hardware`)."""
    gpu = preset_gpu(hardware)
    base: str | dict = model_hardware(hardware) if collectives == "model" else hardware
    per_server = load_hardware(base).num_gpus
    topos: dict[int, Any] = {}
    traces = {}
    out = []
    for rec in df.itertuples(index=False):
        hw = row_hardware(base, int(rec.gpus), per_server)
        if hw is None:
            why = f"{rec.gpus} GPUs: more than the {per_server} of {hardware} (not a preset)"
            out.append({"predicted_ms": math.nan, "fits": False, "error_text": why})
            continue
        servers = -(-int(rec.gpus) // per_server)
        if servers not in topos:
            try:
                topos[servers] = load_hardware(hw)
            except InputError as exc:  # no multi-server form of this hardware
                topos[servers] = str(exc)
        topo = topos[servers]
        if isinstance(topo, str):
            out.append({"predicted_ms": math.nan, "fits": False, "error_text": topo})
            continue
        name = f"gpt-h{rec.hidden}-a{rec.heads}-L{rec.layers}-s{rec.seq_len}"
        if name not in traces:
            traces[name] = transformer_trace(
                "gpt",
                name=name,
                layers=int(rec.layers),
                hidden=int(rec.hidden),
                heads=int(rec.heads),
                seq_len=int(rec.seq_len),
                vocab=VOCAB,
                microbatch_size=1,
                dtype="fp16",
                gpu=gpu,
            )
        exp = parse_experiment(
            {
                "name": "measured",
                "hardware": hw,
                "models": [{"name": name, "trace": name}],
                "training": {"global_batch": int(rec.global_batch), "dtype": "fp16"},
                "options": {"partition": "uniform"},
                "framework": framework,
            }
        )
        point = PointConfig(
            model=name,
            schedule="1f1b",
            stages=int(rec.pipeline_parallel),
            dp_width=int(rec.data_parallel),
            microbatch_size=int(rec.microbatch_size),
            tensor_parallel=int(rec.tensor_parallel),
            microbatches=int(rec.microbatches),
            memory_policy=policy,
            global_batch=int(rec.global_batch),
            framework=framework,
        )
        row = point_row(Prepared(exp, "<measured>", topo, {name: traces[name]}), point)[0]
        t = row.iteration_time_s
        out.append(
            {
                "predicted_ms": t * 1e3 if t is not None and row.fits else math.nan,
                "fits": row.fits,
                "error_text": row.error,
            }
        )
    res = pd.concat([df.reset_index(drop=True), pd.DataFrame(out)], axis=1)
    res["error"] = res.predicted_ms / res.iteration_time_ms - 1
    return res


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
    args = ap.parse_args()
    try:
        rows = load_vtrain(args.rows)
        check_options(args.hardware, args.framework, args.memory_policy)
    except RowsError as exc:
        print(f"error: --rows {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    t0 = time.perf_counter()
    res = predict(rows, args.hardware, args.framework, args.memory_policy, args.collectives)
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

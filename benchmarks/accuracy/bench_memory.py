"""Measured per-GPU peak memory, predicted by pipesim's memory model: error and fit verdicts.

Every row of ``../shared/data/measured/`` with a measured peak (:mod:`memory_rows`) becomes the
configuration it ran (its model as a decoder or GPT trace, its layout, micro-batching, memory
policy and the framework's memory settings) and is predicted by ``sim memory``'s model
(:func:`sim.point.memory.point_memory`, no simulation): the peak allocated bytes of the rank
the row measured (the maximum over ranks, or the last rank's). Printed: MAPE and signed error
by source, framework version, parallel dimensions and memory policy; reserved against the
measured reserved where given; the fit verdicts (a measured run that ran and that pipesim says
does not fit is a false no-fit; measured runs never OOM'd, so a false fit needs an OOM row);
vTrain's measured configurations (``../shared/data/vtrain/``), which all ran, must all fit.
Nothing is fitted to these rows.

Run: ``python benchmarks/accuracy/bench_memory.py [--source simumax|golden] [--out DIR] [--show N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.memory_fit_rows import sc21_cases, vtrain_cases  # noqa: E402
from benchmarks.accuracy.memory_rows import GIB, MemoryCase, golden_cases, simumax_cases  # noqa: E402
from sim.compute.decoder import DecoderShape  # noqa: E402
from sim.config import parse_experiment  # noqa: E402
from sim.errors import InputError  # noqa: E402
from sim.hardware.loader import load_hardware  # noqa: E402
from sim.point.config import PointConfig  # noqa: E402
from sim.point.experiment import Prepared  # noqa: E402
from sim.point.memory import point_memory  # noqa: E402
from sim.runs.predict import Predictor, build_trace, experiment_of, point_of  # noqa: E402
from sim.trace.decoder import decoder_trace  # noqa: E402
from sim.trace.generator import transformer_trace  # noqa: E402


def case_trace(case: MemoryCase, gpu, dtype: str):
    """The case's model as a trace at its micro-batch size."""
    if "decoder" in case.model:
        shape = DecoderShape.from_dict(dict(case.model["decoder"]))
        return decoder_trace(shape, name="m", microbatch_size=case.mbs, gpu=gpu, dtype=dtype)
    g = dict(case.model["gpt"])
    return transformer_trace(name="m", microbatch_size=case.mbs, gpu=gpu, dtype=dtype, **g)


_TOPOS: dict[tuple[str, int], object] = {}


def topology(preset: str, gpus: int):
    """The preset, or ``Nx-<preset>`` when one server has fewer GPUs (cached)."""
    key = (preset, gpus)
    if key not in _TOPOS:
        one = load_hardware(preset)
        name = preset if gpus <= one.num_gpus else f"{-(-gpus // one.num_gpus)}x-{preset}"
        _TOPOS[key] = (name, one if name == preset else load_hardware(name))
    return _TOPOS[key]


def _prepared(case: MemoryCase) -> tuple[Prepared, PointConfig]:
    """The case's experiment and point: as ``sim import`` expresses its run where it has one
    (:mod:`sim.runs.predict`'s experiment, trace and point), else from the case's fields."""
    ex = case.expressed
    if ex is not None:
        topo = _PREDICTOR.topology(ex.hardware)
        key = (ex.hardware, ex.model, repr(ex.shape), ex.dtype)
        if key not in _PREDICTOR._traces:
            _PREDICTOR._traces[key] = build_trace(ex, topo)
        exp = parse_experiment(experiment_of(ex, ex.hardware, ex.model))
        trace = _PREDICTOR._traces[key]
        return Prepared(exp, "<measured>", topo, {ex.model: trace}), point_of(ex)
    return _case_prepared(case)


_PREDICTOR = Predictor()
"""Hardware and traces built once (:class:`sim.runs.predict.Predictor`'s caches)."""


def predict(case: MemoryCase) -> dict:
    """The case's predicted peaks (GiB) and fit verdict, or the reason it failed."""
    prep, point = _prepared(case)
    pm = point_memory(prep, point)
    rank = pm.ranks[-1] if case.peak == "last" else max(pm.ranks, key=lambda r: r.allocated_bytes)
    return {
        "predicted_gib": rank.allocated_bytes / GIB,
        "predicted_reserved_gib": rank.reserved_bytes / GIB,
        "device_gib": max(r.device_bytes for r in pm.ranks) / GIB,
        "fits": pm.fits,
        "peak_at": rank.peak_at,
        **{f"{k}_gib": v / GIB for k, v in rank.by_category.items()},
    }


def _case_prepared(case: MemoryCase) -> tuple[Prepared, PointConfig]:
    """The experiment and point of a case without a run (vTrain's, SC'21's configurations)."""
    lay = case.layout
    gpus = lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"]
    name, topo = topology(case.preset, gpus)
    memory = dict(case.memory)
    dtype = memory.pop("dtype", "bf16")
    trace = case_trace(case, topo.gpus[0].compute, dtype)
    exp = parse_experiment(
        {
            "name": "measured",
            "hardware": name,
            "models": [{"name": "m", "trace": "m"}],
            "training": {"global_batch": case.gbs, "dtype": dtype},
            "options": {"partition": "uniform"}
            if case.boundaries is None
            else {"boundaries": list(case.boundaries)},
            "framework": case.framework,
            "memory": memory,
        }
    )
    point = PointConfig(
        model="m",
        schedule="interleaved_1f1b" if lay.get("vp", 1) > 1 else "1f1b",
        stages=lay["pp"],
        virtual_stages=lay.get("vp", 1),
        dp_width=lay["dp"],
        microbatch_size=case.mbs,
        tensor_parallel=lay["tp"],
        sequence_parallel=bool(lay.get("sp", False)),
        context_parallel=lay["cp"],
        context_parallel_comm=lay.get("cp_comm", "p2p"),
        expert_parallel=lay["ep"],
        expert_tensor_parallel=lay.get("etp"),
        routing=lay.get("routing", "balanced"),
        microbatches=case.m,
        memory_policy=case.policy,
        global_batch=case.gbs,
        framework=case.framework,
    )
    return Prepared(exp, "<measured>", topo, {"m": trace}), point


def predict_all(cases: list[MemoryCase]) -> pd.DataFrame:
    rows = []
    for c in cases:
        base = {
            "case": c.case,
            "source": c.source,
            "version": c.version,
            "gpu": c.gpu,
            "dims": c.dimensions,
            "policy": c.policy,
            "measured_gib": c.measured_gib,
            "reserved_gib": c.reserved_gib,
            "skip": c.skip,
        }
        if c.skip:
            rows.append(base)
            continue
        try:
            rows.append({**base, **predict(c)})
        except (InputError, ValueError, KeyError) as exc:
            rows.append({**base, "skip": f"not predicted: {exc}"})
    df = pd.DataFrame(rows)
    if "predicted_gib" in df:
        df["error"] = df.predicted_gib / df.measured_gib - 1
        df["reserved_error"] = df.predicted_reserved_gib / df.reserved_gib - 1
    return df


def summary(df: pd.DataFrame, by: str) -> pd.DataFrame:
    ok = df[df.get("error").notna()] if "error" in df else df.iloc[0:0]
    g = ok.groupby(by)
    return pd.DataFrame(
        {
            "n": g.size(),
            "MAPE": g.error.apply(lambda e: e.abs().mean()),
            "signed": g.error.mean(),
            "max|err|": g.error.apply(lambda e: e.abs().max()),
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=["simumax", "golden", "all"], default="all")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--show", type=int, default=20, help="print the N worst rows")
    ap.add_argument(
        "--validation", type=Path, nargs="*", default=[],
        help="validation.csv files of `sim validate` (CPU replays: bench_validation.py writes "
        "them): their measured peaks against the prediction",
    )  # fmt: skip
    ap.add_argument(
        "--no-fits", dest="fits", action="store_false",
        help="skip the vTrain and SC'21 fit checks (1,450 configurations)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    cases: list[MemoryCase] = []
    if args.source in ("simumax", "all"):
        cases += simumax_cases()
    if args.source in ("golden", "all"):
        cases += golden_cases()
    t0 = time.perf_counter()
    df = predict_all(cases)
    wall = time.perf_counter() - t0
    done = df[df.get("error", pd.Series(dtype=float)).notna()] if "error" in df else df.iloc[0:0]
    pd.set_option("display.width", 200)
    print(f"{len(cases)} measured peaks, {len(done)} predicted in {wall:.1f} s")
    for by in ("source", "version", "dims", "policy"):
        print(summary(done, by).to_string(float_format=lambda v: f"{v:.4f}"), "\n")
    if len(done):
        print(f"overall MAPE {done.error.abs().mean():.2%}")
        res = done.dropna(subset=["reserved_gib"])
        if len(res):
            print(f"reserved MAPE {res.reserved_error.abs().mean():.2%} over {len(res)} rows")
        print(f"false no-fits: {int((~done.fits.astype(bool)).sum())}")
    worst = done.reindex(done.error.abs().sort_values(ascending=False).index).head(args.show)
    cols = ["case", "measured_gib", "predicted_gib", "error", "peak_at"]
    print(worst[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    skipped = df[df.skip.astype(str) != ""] if "skip" in df else df.iloc[0:0]
    if len(skipped):
        print(f"\n{len(skipped)} not predicted:")
        print(skipped.skip.value_counts().head(20).to_string())
    ran = fit_checks() if args.fits else pd.DataFrame()
    if args.validation:
        replays(args.validation)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out / "memory_predictions.csv", index=False)
        if len(ran):
            ran.to_csv(args.out / "measured_configurations_fit.csv", index=False)
    return 0


def replays(paths: list[Path]) -> pd.DataFrame:
    """The torch replays' measured peaks (``sim validate``'s ``validation.csv``:
    ``measured_peak_bytes`` against ``predicted_peak_bytes``, the engine's peak, which is the
    rank model's), MAPE by schedule; printed and returned."""
    frames = [pd.read_csv(p) for p in paths]
    df = pd.concat(frames, ignore_index=True).dropna(subset=["measured_peak_bytes"])
    df = df[df.measured_peak_bytes > 0]
    df["error"] = df.predicted_peak_bytes / df.measured_peak_bytes - 1
    by = "schedule" if "schedule" in df else None
    print(f"\nreplays: {len(df)} measured peaks, MAPE {df.error.abs().mean():.2%}")
    if by:
        print(df.groupby(by).error.agg(["count", lambda e: e.abs().mean(), "mean"]).to_string())
    return df


def fit_checks() -> pd.DataFrame:
    """vTrain's and Megatron-LM SC'21's measured configurations, which all ran: how many
    pipesim says fit (the false no-fits are the others), printed and returned."""
    print("\nmeasured configurations that ran (all must fit):")
    frames = []
    for name, cases in (("vtrain", vtrain_cases()), ("sc21", sc21_cases())):
        df = predict_all(cases)
        fits = df.fits.fillna(False).astype(bool)
        print(f"  {name}: {int(fits.sum())} of {len(df)} fit; largest device peak "
              f"{df.device_gib.max():.1f} GiB")  # fmt: skip
        for rec in df[~fits].itertuples(index=False):
            print(f"    false no-fit: {rec.case} ({rec.skip or f'{rec.device_gib:.1f} GiB'})")
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


if __name__ == "__main__":
    raise SystemExit(main())

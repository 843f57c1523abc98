"""Dump the event logs and metrics of a fixed set of configurations, or compare two dumps.

Used to check that a refactoring of the engine leaves its output unchanged (issue 7):
run ``dump`` with the old code, then with the new, then ``compare``; values may differ only at
float round-off (relative 1e-12).

Run: ``python scripts/golden_engine_logs.py dump ROOT OUT.pkl`` (``ROOT``: the checkout whose
``sim`` to import) and ``python scripts/golden_engine_logs.py compare A.pkl B.pkl``.
Configurations: dgx1-v100-16gb (experiments/dgx1.yaml), GPT-2 1.5B and GNMT-16, all five
schedules, p = 4 with dp_width 1 and 2 under every memory policy, plus p = 8 and p = 2 cases.

The shipped experiments (issue 17): ``dump-runs ROOT RESULTS OUT.json`` simulates again every
configuration that ``sim run experiments/NAME.yaml --no-cache --out RESULTS/NAME`` simulated
(the rows of ``results.csv`` the planner did not prune) with the ``sim`` of ``ROOT`` and keeps
the SHA-256 of each event log's records (events, memory, iteration ends, metrics, meta);
``compare-runs A.json B.json`` lists the configurations whose logs are not byte-identical.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pickle
import sys
from pathlib import Path

SCHEDULES = ["gpipe", "1f1b", "pipedream_2bw", "pipedream", "pipemare"]
POLICIES = [
    "none",
    "recompute",
    "recompute:selective",
    "cpu_swap",
    "d2d_swap",
    "zero_offload",
    "chunked",
    "auto",
]


def _points() -> list[tuple]:
    pts = []
    for model, mbs in (("gpt2-1.5b", 1), ("gnmt16", 16)):
        for sch in SCHEDULES:
            for dp in (1, 2):
                pts += [(model, sch, 4, dp, mbs, 8, pol) for pol in POLICIES]
            pts += [
                (model, sch, 8, 1, mbs, 8, "none"),
                (model, sch, 2, 2, mbs, 4, "cpu_swap"),
                (model, sch, 2, 1, mbs, 1, "none"),
            ]
    return pts


def _plain(v):
    return str(v) if isinstance(v, str) else v


def _record(e) -> tuple:
    if dataclasses.is_dataclass(e):
        return tuple(_plain(getattr(e, f.name)) for f in dataclasses.fields(e))
    return tuple(_plain(x) for x in e)


def dump(root: Path, out: Path) -> None:
    sys.path.insert(0, str(root))
    from sim.config import load_experiment
    from sim.point.simulate import evaluate, resolve

    try:
        from sim.point.config import PointConfig
        from sim.point.experiment import prepare
    except ImportError:  # before issue 17
        from sim.config import PointConfig  # type: ignore[attr-defined,no-redef]
        from sim.plan.sweep import prepare  # type: ignore[attr-defined,no-redef]

    exp_file = root / "experiments" / "dgx1.yaml"
    prep = prepare(load_experiment(exp_file), str(exp_file))
    res = {}
    for key in _points():
        model, sch, p, dp, mbs, m, pol = key
        point = PointConfig(
            model=model,
            schedule=sch,
            stages=p,
            dp_width=dp,
            microbatch_size=mbs,
            microbatches=m,
            memory_policy=pol,
            global_batch=m * mbs * dp,
        )
        try:
            r = resolve(prep.exp, point, prep.topology, prep.traces[model])
            met, log = evaluate(r)
        except Exception as exc:  # an invalid point is part of the output too
            res[key] = ("error", type(exc).__name__, str(exc))
            continue
        res[key] = dict(
            events=[_record(e) for e in log.events],
            memory=[_record(e) for e in log.memory],
            ends=list(log.iteration_ends_s),
            metrics=dataclasses.asdict(met),
            meta=dict(log.meta),
        )
    out.write_bytes(pickle.dumps(res))
    print(f"{len(res)} configurations dumped to {out}")


def _digest(log, met) -> str:
    """SHA-256 of a log's records, exact (no round-off allowed)."""
    data = (
        [_record(e) for e in log.events],
        [_record(e) for e in log.memory],
        list(log.iteration_ends_s),
        dataclasses.asdict(met),
        sorted((k, repr(v)) for k, v in log.meta.items()),
    )
    return hashlib.sha256(pickle.dumps(data, protocol=4)).hexdigest()


def dump_runs(root: Path, results: Path, out: Path) -> None:
    sys.path.insert(0, str(root))
    import csv

    from sim.config import load_experiment
    from sim.point.rows import ResultRow
    from sim.point.simulate import evaluate, resolve

    try:
        from sim.point.experiment import prepare
    except ImportError:  # before issue 17
        from sim.plan.sweep import prepare

    res: dict[str, str] = {}
    for exp_file in sorted((root / "experiments").glob("*.yaml")):
        exp = load_experiment(exp_file)
        table = results / exp.name / "results.csv"
        if not table.is_file():
            continue
        prep = prepare(exp, str(exp_file))
        for rec in csv.DictReader(table.open()):
            if rec["error"].startswith("pruned"):
                continue
            fields = {k: v for k, v in rec.items() if k in ResultRow.model_fields and v != ""}
            point = ResultRow.model_validate(fields).point()
            key = f"{exp.name} {point.model_dump_json()}"
            try:
                r = resolve(exp, point, prep.topology, prep.traces[point.model], file=str(exp_file))
                met, log = evaluate(r)
            except Exception as exc:  # an invalid point is part of the output too
                res[key] = f"error {type(exc).__name__}: {exc}"
                continue
            res[key] = _digest(log, met)
    out.write_text(json.dumps(res, indent=0, sort_keys=True))
    print(f"{len(res)} configurations of the shipped experiments dumped to {out}")


def compare_runs(a: Path, b: Path) -> int:
    old, new = json.loads(a.read_text()), json.loads(b.read_text())
    missing = sorted(set(old) ^ set(new))
    bad = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    for k in (missing + bad)[:5]:
        print("DIFF", k[:300])
    print(f"{len(old)} configurations, {len(bad)} event logs differ, {len(missing)} not in both")
    return 1 if bad or missing else 0


def _close(x, y, path: str) -> int:
    """Number of values that differ at round-off; raises on a real difference."""
    if isinstance(x, float) and isinstance(y, (int, float)):
        if x == y:
            return 0
        if math.isfinite(x) and abs(x - y) <= 1e-12 * max(abs(x), abs(y)):
            return 1
        raise AssertionError(f"{path}: {x!r} != {y!r}")
    if isinstance(x, (list, tuple)):
        if len(x) != len(y):
            raise AssertionError(f"{path}: {len(x)} != {len(y)} items")
        return sum(_close(p, q, f"{path}[{i}]") for i, (p, q) in enumerate(zip(x, y, strict=True)))
    if isinstance(x, dict):
        if set(x) != set(y):
            raise AssertionError(f"{path}: keys differ: {set(x) ^ set(y)}")
        return sum(_close(x[k], y[k], f"{path}.{k}") for k in x)
    if x != y:
        raise AssertionError(f"{path}: {x!r} != {y!r}")
    return 0


def compare(a: Path, b: Path) -> int:
    old, new = pickle.loads(a.read_bytes()), pickle.loads(b.read_bytes())
    bad = rounded = 0
    for key in old:
        try:
            rounded += _close(old[key], new[key], str(key))
        except AssertionError as exc:
            bad += 1
            if bad <= 5:
                print("DIFF", str(exc)[:400])
    print(f"{len(old)} configurations, {bad} differ, {rounded} values differ at round-off")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(Path(sys.argv[2]).resolve(), Path(sys.argv[3]))
    elif sys.argv[1] == "dump-runs":
        dump_runs(Path(sys.argv[2]).resolve(), Path(sys.argv[3]), Path(sys.argv[4]))
    elif sys.argv[1] == "compare-runs":
        sys.exit(compare_runs(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))

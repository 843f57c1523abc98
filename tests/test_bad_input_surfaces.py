"""Bad input on the newer surfaces (issue 30 item 12), one test per class: the measured-rows
benchmark's options, the Python API given wrong types, Hugging Face MoE configs on the command
line, routing options and empty lists. Each is exit code 2 (or an InputError) naming the option
or field, with no traceback and nothing written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import sim.api
from benchmarks.accuracy import bench_measured, bench_measured_data
from sim.cli import app
from sim.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
HEADER = ",".join(bench_measured.COLUMNS)
GOOD = "8,32,1,1024,16,24,1024,2,4,1,500"  # gpus ... iteration_time_ms
EXP = {
    "name": "b",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
    "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 4},
}


def _row(**changes: object) -> str:
    cells = dict(zip(bench_measured.COLUMNS, GOOD.split(","), strict=True))
    cells.update({k: str(v) for k, v in changes.items()})
    return ",".join(cells[c] for c in bench_measured.COLUMNS)


MEASURED = [
    ("header-only", HEADER + "\n", [], ["--rows", "no rows"]),
    ("fractional", f"{HEADER}\n{_row(layers=2.5)}\n", [], ["--rows", "row 2: layers", "whole"]),
    ("infinite", f"{HEADER}\n{_row(iteration_time_ms='inf')}\n", [], ["iteration_time_ms"]),
    ("absurd-gpus", f"{HEADER}\n{_row(gpus=10**9)}\n", [], ["row 2: gpus", "16,384"]),
    ("absurd-layers", f"{HEADER}\n{_row(layers=10**7)}\n", [], ["row 2: layers"]),
    ("t-heads", f"{HEADER}\n{_row(heads=16, tensor_parallel=3, gpus=12)}\n", [],
     ["row 2: tensor_parallel", "16 heads"]),
    ("no-hardware", f"{HEADER}\n{GOOD}\n", ["--hardware", "{d}/none.yaml"], ["--hardware"]),
    ("bad-hardware-file", f"{HEADER}\n{GOOD}\n", ["--hardware", "{d}/rows.csv"], ["--hardware"]),
    ("framework", f"{HEADER}\n{GOOD}\n", ["--framework", "nope"], ["--framework", "nope"]),
    ("policy", f"{HEADER}\n{GOOD}\n", ["--memory-policy", "nope"], ["--memory-policy"]),
]  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", MEASURED, ids=[c[0] for c in MEASURED])
def test_bench_measured_options(case, tmp_path, monkeypatch, capsys):
    _, rows, extra, mentions = case
    (tmp_path / "rows.csv").write_text(rows)
    out = tmp_path / "out"
    argv = ["bench_measured.py", "--rows", str(tmp_path / "rows.csv"), "--out", str(out)]
    argv += [a.replace("{d}", str(tmp_path)) for a in extra]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        bench_measured.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for text in mentions:
        assert text in err, (text, err)
    assert not out.exists()


@pytest.mark.parametrize(
    ("options", "mention"),
    [(["--sources", "simumax,nope"], "--sources"), (["--data", "{d}/empty"], "--data")],
    ids=["unknown-source", "empty-data-folder"],
)
def test_bench_measured_data_options(options, mention, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    argv = ["bench_measured_data.py", "--out", str(out)]
    argv += [a.replace("{d}", str(tmp_path)) for a in options]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        bench_measured_data.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and mention in err and "Traceback" not in err
    assert not out.exists()


API = [
    ("int-experiment", lambda d: sim.api.run(3, out=d / "o"), "experiment"),
    ("none-experiment", lambda d: sim.api.plan(None), "experiment"),
    ("int-out", lambda d: sim.api.run(EXP, out=3), "out"),
    ("negative-jobs", lambda d: sim.api.plan(EXP, jobs=-1), "jobs"),
    ("bool-jobs", lambda d: sim.api.run(EXP, out=d / "o", jobs=True), "jobs"),
    ("string-stages", lambda d: sim.api.partition("bert-large", "4"), "stages"),
    ("no-replayer", lambda d: sim.api.validate(d / "w.yaml", replayer=None), "replayer"),
    ("negative-timeout",
     lambda d: sim.api.validate(d / "w.yaml", replayer=_Fake(), timeout_s=-1), "timeout_s"),
    ("string-schedules",
     lambda d: sim.api.validate(d / "w.yaml", replayer=_Fake(), schedules="1f1b"), "schedules"),
    ("string-table", lambda d: sim.api.run(EXP, out=d / "o", table="big"), "table"),
]  # fmt: skip


class _Fake:
    def replay(self, request):  # pragma: no cover - never reached
        raise AssertionError


@pytest.mark.parametrize("case", API, ids=[c[0] for c in API])
def test_python_api_wrong_types(case, tmp_path):
    _, call, field = case
    with pytest.raises(InputError) as exc:
        call(tmp_path)
    assert exc.value.field == field, str(exc.value)
    assert not (tmp_path / "o").exists()


TINY_MIXTRAL = json.loads((ROOT / "examples" / "hf" / "tiny-mixtral-config.json").read_text())
HF = [
    ("zero-experts", {"num_local_experts": 0}, "num_local_experts"),
    ("negative-experts", {"num_local_experts": -2}, "num_local_experts"),
    ("top-k-above-experts", {"num_experts_per_tok": 5}, "num_experts_per_tok"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", HF, ids=[c[0] for c in HF])
def test_hf_moe_config_on_the_command_line(case, tmp_path):
    pytest.importorskip("torch")
    _, change, mention = case
    (tmp_path / "c.json").write_text(json.dumps({**TINY_MIXTRAL, **change}))
    out = tmp_path / "t"
    res = runner.invoke(
        app,
        ["profile", "--out", str(out), "--model", str(tmp_path / "c.json"), "--for-gpu", "H100"],
    )
    assert res.exit_code == 2, res.output
    assert "c.json" in res.output and mention in res.output and "Traceback" not in res.output
    assert not list(tmp_path.glob("t*"))


def _mixtral(routing: str) -> dict:
    return {
        "name": "m",
        "hardware": "dgx-h100",
        "models": [{"name": "mixtral", "trace": "mixtral-8x7b", "global_batch": 64,
                    "routing": routing}],
        "training": {"dtype": "bf16"},
        "sweep": {"schedule": "1f1b", "stages": 4, "dp_width": 2, "microbatch_size": 1,
                  "expert_parallel": 2},
    }  # fmt: skip


@pytest.mark.parametrize(
    "routing,mention",
    [("imbalance:9", "exceeds the 8 experts"), ("histogram:1,2,3", "3 entries")],
)
def test_routing_the_experts_cannot_take(routing, mention, tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump(_mixtral(routing)))
    res = runner.invoke(app, ["run", str(f), "--out", str(tmp_path / "o"), "--no-plots"])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.split())
    assert "models.0.routing" in flat and mention in flat
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "change,field",
    [
        ({"sweep": {**EXP["sweep"], "expert_parallel": []}}, "sweep.expert_parallel"),
        ({"models": [{**EXP["models"][0], "schedule": []}]}, "models.0.schedule"),
        ({"sweep": {**EXP["sweep"], "microbatch_size": []}}, "sweep.microbatch_size"),
    ],
)
def test_empty_lists_name_the_key(change, field, tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({**EXP, **change}))
    res = runner.invoke(app, ["run", str(f), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert field in res.output and "empty list" in res.output

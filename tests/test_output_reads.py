"""Output that reads (issue 30 item 4-6): a compact table that fits 100 columns, ``--wide``,
``--format csv|json`` on standard output, skipped combinations by kind, sequence parallelism
off at t = 1, ``-v``/``-q``, and an unexpected exception as exit code 3."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

import sim.api
import sim.cli.run as cli_run
from sim.cli import app
from sim.plan.sweep import expand
from sim.report.tables import compact_table

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
EXP = {
    "name": "reads",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
    "sweep": {"schedule": ["gpipe", "1f1b"], "stages": [2, 4, 16], "microbatch_size": 4},
}


def _file(tmp_path: Path, exp: dict = EXP) -> str:
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump(exp))
    return str(f)


def _run(tmp_path: Path, *extra: str, exp: dict = EXP):
    args = ["run", _file(tmp_path, exp), "--out", str(tmp_path / "o"), "-j", "1", "--no-plots"]
    return runner.invoke(app, [*args, *extra])


@pytest.fixture(scope="module")
def dgx1_rows() -> pd.DataFrame:
    return sim.api.plan(ROOT / "experiments" / "dgx1.yaml").table()


def test_the_compact_table_fits_100_columns_with_the_band_on_one_line(dgx1_rows):
    for model in ("gnmt16", "gpt2-1.5b"):
        buf = io.StringIO()
        console = Console(file=buf, width=100, force_terminal=False, color_system=None)
        console.print(compact_table(dgx1_rows[dgx1_rows.model == model], top=5, title=model))
        lines = buf.getvalue().splitlines()
        assert max(len(line.rstrip()) for line in lines) <= 100
        rows = [line for line in lines if line.strip()[:2] in {"1 ", "2 ", "3 "}]
        assert rows and all("(" in r and "–" in r and ")" in r for r in rows)  # band inline
    assert "MFU" in buf.getvalue()  # gpt2-1.5b has model FLOPs


def test_default_wide_csv_and_json(tmp_path):
    compact = _run(tmp_path)
    assert compact.exit_code == 0, compact.output
    assert "samples/s (band)" in compact.stdout and "bubble" not in compact.stdout
    wide = _run(tmp_path, "--wide")
    assert "bubble" in wide.stdout
    csv = _run(tmp_path, "--format", "csv")
    assert csv.exit_code == 0
    assert csv.stdout == (tmp_path / "o" / "results.csv").read_text()
    js = _run(tmp_path, "--format", "json")
    records = json.loads(js.stdout)["rows"]
    assert len(records) == len(pd.read_csv(tmp_path / "o" / "results.csv"))
    assert {"schedule", "throughput_samples_per_s", "mfu"} <= set(records[0])


def test_skipped_combinations_are_summarised_by_kind(tmp_path):
    res = _run(tmp_path)
    assert "combinations skipped" in res.stderr
    assert "skipped like: stages x dp_width = 16 exceeds the 8 GPUs" in res.stderr


def test_quiet_and_verbose(tmp_path):
    quiet = _run(tmp_path, "-q")
    assert quiet.exit_code == 0
    assert "note:" not in quiet.stderr and "configuration" not in quiet.stdout
    assert "bert winner:" in quiet.stdout
    verbose = runner.invoke(
        app, ["-v", "run", _file(tmp_path), "--out", str(tmp_path / "o"), "-j", "1", "--no-plots"]
    )
    assert verbose.exit_code == 0
    assert "results.csv" in verbose.stderr  # the files written, at DEBUG


def test_sequence_parallelism_is_off_at_t1(tmp_path):
    base = yaml.safe_load((ROOT / "experiments" / "cpu-gpt-tiny-tp.yaml").read_text())
    base["models"][0]["trace"] = str(ROOT / "traces" / "gpt-tiny-cpu.csv")
    for sps, expected in (([True], {(1, False), (2, True)}), ([False, True], None)):
        exp = {**base, "sweep": {**base["sweep"], "tensor_parallel": [1, 2],
                                 "sequence_parallel": sps, "stages": 1}}  # fmt: skip
        points, skipped = expand(sim.api.load(exp))
        got = {(p.tensor_parallel, p.sequence_parallel) for p in points}
        if expected is not None:
            assert got == expected
        else:
            assert got == {(1, False), (2, False), (2, True)}
            t1 = [p for p in points if p.tensor_parallel == 1]
            assert len(t1) == len({p.model_dump_json() for p in t1})  # each point once
        assert not any("sequence parallelism" in r for _, r in skipped)


def test_an_unexpected_exception_is_exit_3_without_a_traceback(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyError("oops")

    monkeypatch.setattr(cli_run.api, "run", boom)
    res = _run(tmp_path)
    assert res.exit_code == 3
    assert "internal error: KeyError" in res.stderr and "Traceback" not in res.output

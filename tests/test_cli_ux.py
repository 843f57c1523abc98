"""A new user's first hour: what ``sim`` says about their input and where its numbers come from
(each test failed before the fix it names)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from sim.cli import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_analytic_trace_note_names_the_gpu_it_is_timed_on(tmp_path: Path) -> None:
    """gpt2-1.5b ships generated on a V100; on a DGX H100 it is regenerated there, so the note
    of where its times come from names the H100, not the V100 (it named the V100)."""
    exp = {
        "name": "h100",
        "hardware": "dgx-h100",
        "models": [{"name": "g", "trace": "gpt2-1.5b", "global_batch": 8}],
        "sweep": {"schedule": "1f1b", "stages": 4, "dp_width": 1, "microbatch_size": 1},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    res = _run("run", path, "--out", tmp_path / "out", "--jobs", 1, "--no-plots")
    assert res.exit_code == 0, res.output
    note = next(line for line in res.output.splitlines() if "is analytic" in line)
    assert "on H100" in note and "V100" not in note, note

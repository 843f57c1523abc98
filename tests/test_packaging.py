"""Packaging (issue 30 item 10): --version, LICENSE, py.typed, help without stray metavars or
eaten brackets."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim
from sim.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_version():
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.strip() == f"pipesim {sim.__version__}"


def test_license_changelog_contributing_and_py_typed_ship():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == {"text": "MIT"}
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "CHANGELOG.md").is_file() and (ROOT / "CONTRIBUTING.md").is_file()
    assert (ROOT / "sim" / "py.typed").is_file()
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["sim"]
    assert meta["project"]["dynamic"] == ["version"]
    assert meta["tool"]["setuptools_scm"]["fallback_version"]


@pytest.mark.parametrize(
    "command",
    [[], ["run"], ["validate"], ["profile"], ["calibrate"], ["partition"], ["hardware", "show"],
     ["schedule", "show"], ["trace", "show"], ["trace", "import-kineto"]],
)  # fmt: skip
def test_help_has_no_stray_metavars_or_eaten_brackets(command):
    res = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output
    if command == ["run"]:
        assert "pipesim[ray]" in res.output

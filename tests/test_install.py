"""`pip install .` (not editable) still runs the README's main job: trace names and hardware
presets resolve from the installed package, not from the checkout (issue 7)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_for_installation():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("sim", "backends")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


@pytest.mark.timeout(300)
def test_installed_package_runs_the_main_job(tmp_path):
    target = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    if pip.returncode != 0 and "No module named pip" in pip.stderr:
        pytest.skip("pip is not available")
    assert pip.returncode == 0, pip.stderr
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    work = tmp_path / "elsewhere"  # not the checkout: nothing resolves from ROOT
    work.mkdir()
    shutil.copy(ROOT / "experiments" / "dgx1.yaml", work / "dgx1.yaml")
    env = {**os.environ, "PYTHONPATH": str(target)}
    env.pop("PIPESIM_TRACES", None)
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sim.trace.loader as l; print(l.__file__); print(l.traces_dir())",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = where.stdout.split()
    assert lines and all(line.startswith(str(target)) for line in lines), where.stdout
    res = subprocess.run(
        [sys.executable, "-m", "sim.cli", "run", "dgx1.yaml", "--jobs", "2", "--no-plots"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = work / "results" / "dgx1"
    assert (out / "winner.yaml").is_file() and (out / "gnmt16" / "winner.yaml").is_file()

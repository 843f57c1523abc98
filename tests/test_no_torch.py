"""The simulator runs without torch: importing any sim module never loads it."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "sim",
    "sim.cli",
    "sim.api",
    "sim.run",
    "sim.plan.sweep",
    "sim.validate",
    "sim.engine",
    "sim.memory.registry",
    "sim.report.plots",
    "sim.schedules.registry",
    "backends.torch",
    "backends.torch.replay.replayer",  # sim.cli imports it; torch starts in the replay's ranks
    "backends.torch.devices",
    "backends.torch.calibrate.devices",  # sim calibrate; torch starts when it measures
    "backends.torch.calibrate",  # the rooms' packages import nothing
    "backends.torch.replay",
    "backends.torch.profile",
    "backends.torch.parallel",
    "backends.torch.models",
]


def test_sim_modules_do_not_import_torch():
    code = (
        "import importlib, sys\n"
        f"for m in {MODULES!r}: importlib.import_module(m)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr

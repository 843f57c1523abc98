"""An ML-systems engineer's first hour with ``sim`` (session 13's pass): the names, units and
fields a newcomer gets wrong, and what ``sim`` answers (each test failed before its fix)."""

from __future__ import annotations

from typer.testing import CliRunner

from sim.cli import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_a_gpu_name_or_its_case_suggests_the_presets_of_that_gpu() -> None:
    """'dgx-h100-80gb' was answered "did you mean 'dgx-a100-80gb'?" (another GPU, one letter
    away); 'H100', 'B200' and 'DGX-H100' got no suggestion, '8xdgx-h100' one server."""
    cases = {
        "dgx-h100-80gb": "(did you mean 'dgx-h100' or 'grand-teton-h100'?)",
        "H100": "(did you mean 'dgx-h100' or 'grand-teton-h100'?)",
        "B200": "(did you mean 'dgx-b200'?)",
        "DGX-H100": "(did you mean 'dgx-h100'?)",
        "8xdgx-h100": "(did you mean '8x-dgx-h100'?)",
    }
    for name, says in cases.items():
        res = _run("hardware", "show", name)
        assert res.exit_code == 2, res.output
        assert says in res.output, res.output

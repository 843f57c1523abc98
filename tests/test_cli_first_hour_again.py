"""A newcomer's first hour with ``sim``, walked again (session 14): what the console said
that the JSON did not, a table that repeated the answer, a ``--gpu`` that took only presets,
and the small frictions found on the way (each test failed before its fix)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.trace.loader import load_trace

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "hf" / "tiny-llama-config.json"
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    ("gpu", "device"),
    [("H100-SXM5-80GB", "H100-SXM5-80GB"), ("B200", "B200-SXM-180GB"),
     ("A100 80GB", "A100-SXM4-80GB"), ("gh200", "GH200-96GB"), ("dgx-h200", "H200-SXM-141GB")],
)  # fmt: skip
def test_trace_from_config_takes_a_gpu_name(tmp_path, gpu, device) -> None:
    """``--gpu`` took only preset names: 'B200' was "unknown hardware preset"; a GPU model or
    the name a datasheet gives now picks the preset with that GPU ('gh200' the GH200, not
    the H200 its name contains), and a note says which."""
    res = _run("trace", "from-config", TINY, "--seq-len", 64, "--out", tmp_path / "t", "--gpu", gpu)
    assert res.exit_code == 0, res.output
    assert load_trace(tmp_path / "t.csv").device == device
    assert ("the GPU of preset" in res.output) == (gpu != "dgx-h200"), res.output


def test_trace_from_config_lists_the_gpus_for_an_unknown_one(tmp_path) -> None:
    """An unknown ``--gpu`` names the option, every preset and every GPU model it takes."""
    res = _run(
        "trace", "from-config", TINY, "--seq-len", 64, "--out", tmp_path / "t", "--gpu", "X9"
    )
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "option '--gpu': 'X9' is neither a hardware preset nor the GPU of one" in text, text
    assert "dgx-b200" in text and "B200-SXM-180GB" in text and "RTX-4090-24GB" in text, text
    assert not (tmp_path / "t.csv").exists()

"""`sim compare`'s predicted figures say what they were predicted with (compare.csv
``hardware`` and ``trace_origin``, sim.compare.predicted_with)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from sim.cli import app
from sim.cli.compare import caption
from sim.compare import COLUMNS, Compared, predicted_with
from sim.runs.express import Expressed, express
from sim.runs.predict import Prediction
from sim.runs.readers import read_runs

SAMPLE = Path(__file__).resolve().parent / "data" / "runs" / "measured_sample.csv"


def test_predicted_with_names_the_preset_its_overlay_and_the_trace_origin():
    first = read_runs(SAMPLE)[0]  # llama-like on "B200 (8 GPUs, 1 node)"
    ex = express(first)
    assert isinstance(ex, Expressed)
    bare = Prediction(1.0, None, None, True, "")
    got = predicted_with(ex, bare)
    want = ex.hardware + (f" + overlay {ex.overlay}" if ex.overlay else "")
    assert got == {"hardware": want, "trace_origin": ""} and want.startswith("dgx-b200")
    assert predicted_with(None, None) == {"hardware": "", "trace_origin": ""}
    assert {"hardware", "trace_origin"} <= set(COLUMNS)
    record = Compared(first, ex, (), bare).record()
    assert record["hardware"] == want


def test_compare_table_caption_names_hardware_origin_and_band(tmp_path):

    df = pd.DataFrame(
        {"hardware": ["h1", "h1", "h2"], "trace_origin": ["analytic"] * 3, "band_source": ["b"] * 3}
    )
    want = "predicted (pipesim, not measured) on h1, h2, from analytic traces; band: b"
    assert caption(df).startswith(want)
    golden = (
        SAMPLE.parent / "golden" / "gpt" / "gpt3_tiny_tp2_pp2" / "golden_values_dev_dgx_a100.json"
    )
    res = CliRunner().invoke(
        app, ["compare", str(golden), "--no-plot", "--out", str(tmp_path)], env={"COLUMNS": "300"}
    )
    assert res.exit_code == 0, res.output
    assert "predicted (pipesim, not measured) on " in res.output and "analytic traces" in res.output

"""``sim compare``: measured runs against predictions (sim.compare, sim.cli.compare)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.compare import COLUMNS, compare
from sim.events import Event, EventKind, EventLog
from sim.runs.express import express
from sim.runs.predict import Predictor, predicted_categories
from sim.runs.readers import read_runs

DATA = Path(__file__).resolve().parent / "data" / "runs"
GOLDEN = DATA / "golden" / "gpt" / "gpt3_tiny_tp2_pp2" / "golden_values_dev_dgx_a100.json"


def test_predicted_categories_by_hand():
    ev = [(EventKind.OPTIMIZER, "gpu0", 1.0, 1.5), (EventKind.OPTIMIZER, "gpu0", 3.0, 3.5),
          (EventKind.OPTIMIZER, "gpu1", 1.0, 1.2), (EventKind.COMPUTE, "gpu0", 0.0, 1.0)]  # fmt: skip
    log = EventLog(events=[Event(k, d, "compute", "x", s, t) for k, d, s, t in ev],
                   iteration_ends_s=[2.0, 4.0])  # fmt: skip
    # gpu0: 1.0 s of optimizer over 2 iterations -> 0.5 s per iteration
    assert predicted_categories(log, 2.0) == {"optimizer": 0.5, "forward-backward": 1.5}
    assert predicted_categories(None, 2.0) == {}


def test_compare_tiny_run(tmp_path):
    df, written = compare([GOLDEN, DATA / "measured_sample.csv"], out=tmp_path)
    assert list(df.columns) == list(COLUMNS)
    assert [p.name for p in written] == ["compare.csv", "compare.png"]
    assert (tmp_path / "compare.png").stat().st_size > 0
    g = df.iloc[0]
    (run,) = read_runs(GOLDEN)
    pred = Predictor().predict(express(run))  # the same configuration, simulated again
    assert g.predicted_time_s == pytest.approx(pred.iteration_time_s)
    assert g.time_error == pytest.approx(pred.iteration_time_s / 0.23085 - 1)
    # the golden peak is allocated memory: compared with the peak less the runtime reserve
    assert g.predicted_memory_bytes == pytest.approx(pred.allocated_bytes)
    assert g.memory_error == pytest.approx(pred.allocated_bytes / 2.25e9 - 1)
    assert g.in_band == (g.band_low_s <= 0.23085 <= g.band_high_s)
    assert g.trace_origin == "analytic" and g.hardware  # what the prediction was made with
    last = df.iloc[-1]  # the MXFP8 GB300 Qwen3 row: no recipe given, the shared settings
    assert last.expressed and last.predicted_time_s > 0  # (sim.runs.bridge_fallback)
    again = pd.read_csv(tmp_path / "compare.csv")
    assert len(again) == 3 and again.expressed.tolist() == [True, True, True]


def test_cli_compare(tmp_path):
    res = CliRunner().invoke(app, ["compare", str(GOLDEN), "--out", str(tmp_path), "--no-plot"])
    assert res.exit_code == 0, res.output
    assert "1 run, 1 expressed" in res.output and not (tmp_path / "compare.png").exists()
    csv = tmp_path / "rows.csv"
    csv.write_text("model,gpu,tp\nx,B200,1\n")
    bad = CliRunner().invoke(app, ["compare", str(csv), "--out", str(tmp_path / "o")])
    assert bad.exit_code == 2
    assert "rows.csv" in bad.output and "'pp'" in bad.output  # the first missing column


def test_cli_compare_reads_the_bridge_recipe_table_it_is_given(tmp_path):
    missing = tmp_path / "none.csv"
    res = CliRunner().invoke(app, ["compare", str(DATA / "measured_sample.csv"), "--out",
                                   str(tmp_path / "o"), "--no-plot", "--bridge-recipes",
                                   str(missing)])  # fmt: skip
    assert res.exit_code == 2 and "none.csv" in res.output  # the table is read, not skipped

"""`sim run`'s sweep-wide outputs (memory_summary.csv, throughput.png and the memory-policy
plots) say what their figures are predicted with (sim.report.provenance)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

import sim.api
from sim.report.memory_summary import write_memory_summary
from sim.report.provenance import experiment_sources, footnoted, joined, prediction_source


def test_experiment_sources_one_per_model_and_joined_once():
    exp = {
        "name": "s",
        "hardware": "dgx1-v100-16gb",
        "models": [
            {"name": "a", "trace": "gpt2-1.5b", "global_batch": 8},
            {"name": "b", "trace": "gnmt16", "global_batch": 8},
        ],
    }
    got = experiment_sources(sim.api.load(exp))
    assert got == {
        "a": prediction_source("dgx1-v100-16gb", "gpt2-1.5b", "analytic"),
        "b": prediction_source("dgx1-v100-16gb", "gnmt16", "measured"),
    }
    assert joined({"x": "S", "y": "S", "z": "T"}) == "S; T"


def test_memory_summary_csv_has_a_source_per_model(tmp_path):
    rows = [
        dict(model=m, parameters=p, memory_policy=pol, fits=True, throughput_samples_per_s=1.0)
        for m, p in (("small", 1e9), ("big", 2e9))
        for pol in ("none", "auto")
    ]
    write_memory_summary(pd.DataFrame(rows), tmp_path, False, sources={"small": "S1", "big": "S2"})
    csv = pd.read_csv(tmp_path / "memory_summary.csv", index_col="model", keep_default_na=False)
    assert csv.loc["small", "source"] == "S1" and csv.loc["big", "source"] == "S2"


def test_footnoted_adds_the_text_under_any_plot():
    def plot(df: object, path: object) -> Figure:
        fig = Figure(figsize=(3.0, 2.0))
        fig.add_subplot()
        return fig

    assert [t.get_text() for t in footnoted(plot, None, path=None, text="T").texts] == ["T"]
    assert footnoted(plot, None, path=None, text="").texts == []

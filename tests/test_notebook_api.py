"""The notebook API (issue 30 item 9): run and plan take a path, a mapping or an object;
results become DataFrames; every plot draws into ``ax=`` and returns its figure; ``import
sim.api`` imports neither pandas nor matplotlib (they load on first use)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

import sim.api
from sim.config import parse_experiment
from sim.report.gantt import plot_gantt
from sim.report.memory_plots import plot_memory_per_gpu, plot_memory_timeline
from sim.report.memory_summary import (
    plot_max_model_per_policy,
    plot_tflops_vs_size,
    plot_throughput_vs_size,
    tflops_per_gpu,
)
from sim.report.plots import plot_throughput

ROOT = Path(__file__).resolve().parent.parent
EXP = {
    "name": "nb",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
    "sweep": {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 4},
}


@pytest.mark.parametrize("form", ["path", "mapping", "object"])
def test_run_and_plan_take_a_path_a_mapping_or_an_object(tmp_path, form):
    f = tmp_path / "e.yaml"
    f.write_text(__import__("yaml").safe_dump(EXP))
    experiment = {"path": str(f), "mapping": EXP, "object": parse_experiment(EXP)}[form]
    outcome = sim.api.run(experiment, out=tmp_path / "o", plots=False, progress=False)
    assert outcome.code == 0
    frame = outcome.to_frame()
    assert len(frame) == 4 and (tmp_path / "o" / "winner.yaml").is_file()
    plan = sim.api.plan(experiment)
    assert plan.to_frame()["throughput_samples_per_s"].tolist() == pytest.approx(
        frame["throughput_samples_per_s"].tolist(), nan_ok=True
    )


def test_simulation_metrics_and_logs_are_frames():
    one = sim.api.simulate(
        {**EXP, "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 4}}
    )
    row = one.to_frame()
    assert len(row) == 1 and row.loc[0, "schedule"] == "1f1b"
    assert row.loc[0, "iteration_time_s"] == one.metrics.iteration_time_s
    spans = one.log.to_frame()
    assert len(spans) == len(one.log.events)
    assert (spans["duration_s"] >= 0).all()
    mem = one.log.memory_frame()
    peak = mem.groupby("device")["in_use_bytes"].max()
    assert peak.max() == pytest.approx(max(one.metrics.peak_by_device.values()))


def test_every_plot_draws_into_ax_and_returns_its_figure(tmp_path):
    one = sim.api.simulate(
        {**EXP, "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 4}}
    )
    for draw in (plot_gantt, plot_memory_per_gpu, plot_memory_timeline):
        fig = Figure()
        assert draw(one.log, ax=fig.add_subplot()) is fig
        assert draw(one.log) is not None  # a new figure, nothing written
    for method in (one.plot_timeline, one.plot_memory, one.plot_memory_timeline):
        fig = Figure()
        assert method(ax=fig.add_subplot()) is fig
    rows = sim.api.plan(EXP).to_frame()
    fig = Figure()
    assert plot_throughput(rows, ax=fig.add_subplot()) is fig
    sizes = pd.concat([rows, rows.assign(model="big", parameters=rows["parameters"] * 2)])
    sizes = sizes.assign(memory_policy=["none", "recompute"] * (len(sizes) // 2))
    for draw in (plot_max_model_per_policy, plot_throughput_vs_size):
        fig = Figure()
        assert draw(sizes, ax=fig.add_subplot()) is fig
    shape = {"layers": 24, "hidden": 1024, "seq_len": 512, "vocab": 30522}
    table = tflops_per_gpu(sizes, {"bert": shape, "big": shape})
    fig = Figure()
    assert plot_tflops_vs_size(table, tmp_path / "t.png", ax=fig.add_subplot()) is fig
    assert (tmp_path / "t.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="one model"):
        plot_throughput(sizes, ax=Figure().add_subplot())


def test_import_sim_api_loads_neither_pandas_nor_matplotlib():
    code = "import sys, sim.api; print(sorted(m for m in ('pandas', 'matplotlib', 'numpy') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

"""The command line: bad input gets one clear message, exit code 2, no traceback, no files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sim.plan.point_row
import sim.plan.rowcache
from sim.cli import app
from sim.plan.rowcache import open_cache

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

SMALL = {
    "name": "small",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
    "sweep": {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 1},
}


def _write(tmp_path: Path, data, name="exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _bad(tmp_path, data, *must_mention):
    path = _write(tmp_path, data)
    out = tmp_path / "out"
    res = _run("run", path, "--out", out, "--jobs", 1)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert "error:" in res.output
    for text in must_mention:
        assert text in res.output, res.output
    assert not out.exists(), "no partial result files on bad input"
    return res.output


def test_malformed_yaml(tmp_path):
    _bad(tmp_path, "name: x\nmodels: [\n", "exp.yaml", "not valid YAML", "line")


def test_unknown_key(tmp_path):
    _bad(tmp_path, {**SMALL, "sweeep": {}}, "exp.yaml", "sweeep", "unknown key")


def test_unknown_nested_key(tmp_path):
    _bad(tmp_path, {**SMALL, "sweep": {**SMALL["sweep"], "stage": 2}}, "sweep.stage")


def test_unknown_schedule(tmp_path):
    _bad(
        tmp_path,
        {**SMALL, "sweep": {**SMALL["sweep"], "schedule": ["gpipe", "zigzag"]}},
        "sweep.schedule.1",
        "zigzag",
        "1f1b",
    )


def test_unknown_preset(tmp_path):
    _bad(tmp_path, {**SMALL, "hardware": "dgx9"}, "hardware", "dgx9", "dgx1-v100-16gb")


def test_unknown_trace(tmp_path):
    _bad(
        tmp_path,
        {**SMALL, "models": [{"name": "x", "trace": "no-such-trace"}]},
        "models.0.trace",
        "no-such-trace",
    )


def _bad_trace(tmp_path, mutate):
    src = ROOT / "traces" / "bert-large.csv"
    df = pd.read_csv(src)
    mutate(df)
    df.to_csv(tmp_path / "t.csv", index=False)
    shutil.copy(ROOT / "traces" / "bert-large.yaml", tmp_path / "t.yaml")
    return {**SMALL, "models": [{"name": "x", "trace": "t.csv"}]}


def test_trace_with_negative_time(tmp_path):
    data = _bad_trace(tmp_path, lambda df: df.__setitem__("fwd_s", -df["fwd_s"]))
    _bad(tmp_path, data, "t.csv", "fwd_s")


def test_trace_with_missing_time(tmp_path):
    def drop(df):
        df.loc[2, "bwd_s"] = None

    _bad(tmp_path, _bad_trace(tmp_path, drop), "t.csv", "bwd_s", "row")


def test_m_less_than_p_for_single_point(tmp_path):
    data = {
        **SMALL,
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 2}],
        "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 1},
    }
    _bad(tmp_path, data, "exp.yaml", "microbatches >= stages", "2 < 4")


def test_negative_stages(tmp_path):
    _bad(tmp_path, {**SMALL, "sweep": {**SMALL["sweep"], "stages": [0]}}, "sweep.stages")


def test_missing_file(tmp_path):
    res = _run("run", tmp_path / "nope.yaml")
    assert res.exit_code == 2 and "file not found" in res.output


def test_run_writes_everything_and_winner_reruns(tmp_path):
    path = _write(tmp_path, SMALL)
    out = tmp_path / "out"
    res = _run("run", path, "--out", out, "--jobs", 1)
    assert res.exit_code == 0, res.output
    for name in (
        "results.csv",
        "winner.yaml",
        "config.resolved.yaml",
        "throughput.png",
        "memory_per_gpu.png",
        "memory_timeline.png",
        "timeline.png",
        "timeline.json",
    ):
        assert (out / name).is_file(), name
    df = pd.read_csv(out / "results.csv")
    for col in (
        "schedule",
        "stages",
        "dp_width",
        "microbatch_size",
        "microbatches",
        "iteration_time_s",
        "throughput_samples_per_s",
        "bubble_fraction",
        "peak_memory_bytes",
        "fits",
    ):
        assert col in df.columns
    assert len(df) == 4
    winner = yaml.safe_load((out / "winner.yaml").read_text())
    best = df[df.fits].sort_values("throughput_samples_per_s").iloc[-1]
    assert winner["sweep"]["schedule"] == best.schedule
    out2 = tmp_path / "out2"
    res2 = _run("run", out / "winner.yaml", "--out", out2, "--jobs", 1, "--no-plots")
    assert res2.exit_code == 0, res2.output
    again = pd.read_csv(out2 / "results.csv")
    assert len(again) == 1
    assert again.iteration_time_s[0] == pytest.approx(winner["prediction"]["iteration_time_s"])


def test_not_fitting_names_device_peak_and_capacity(tmp_path):
    """GPipe keeps all m stashes: BERT-Large at b=16 on 2 x 16 GB does not fit."""
    data = {
        **SMALL,
        "models": [
            {"name": "bert", "trace": "bert-large", "global_batch": 256, "microbatch_size": 16}
        ],
        "sweep": {"schedule": "gpipe", "stages": 2},
    }
    out = tmp_path / "out"
    res = _run("run", _write(tmp_path, data), "--out", out, "--jobs", 1, "--no-plots")
    assert res.exit_code == 1 and "no configuration fits" in res.output, res.output
    row = pd.read_csv(out / "results.csv").iloc[0]
    assert not row.fits and row.oom_device.startswith("gpu")
    assert row.oom_peak_bytes > row.oom_capacity_bytes == 16160 * 2**20  # as CUDA reports it
    assert row.peak_memory_bytes >= row.oom_peak_bytes


def _cached_keys(out: Path) -> set[str]:
    with open_cache(out / ".cache") as cache:
        return set(cache.iterkeys())


def test_second_run_reuses_cache(tmp_path, monkeypatch):
    path = _write(tmp_path, SMALL)
    out = tmp_path / "out"
    args = ("--jobs", 1, "--no-plots", "--exhaustive")  # every point simulated and cached
    assert _run("run", path, "--out", out, *args).exit_code == 0
    assert len(_cached_keys(out)) == 4
    written = []
    monkeypatch.setattr(sim.plan.rowcache, "cache_entry", lambda *a: written.append(a) or "")
    assert _run("run", path, "--out", out, *args).exit_code == 0
    assert written == []  # every row read from the cache, none simulated or written again


def test_cache_is_not_reused_by_another_model_code(tmp_path, monkeypatch):
    """A row cached by another version of the simulator's source is recomputed, not reused."""
    path = _write(tmp_path, SMALL)
    out = tmp_path / "out"
    args = ("--jobs", 1, "--no-plots", "--exhaustive")  # every point simulated and cached
    assert _run("run", path, "--out", out, *args).exit_code == 0
    before = _cached_keys(out)
    monkeypatch.setattr(sim.plan.point_row, "model_code_hash", lambda: "another-engine")
    assert _run("run", path, "--out", out, *args).exit_code == 0
    after = _cached_keys(out)
    assert len(before) == 4 and before.isdisjoint(after - before) and len(after - before) == 4


def _cut_models(*names: str):
    def cut(exp):
        models = [m for m in exp["models"] if m["name"] in names]
        assert len(models) == len(names), f"{names} are not all models of the experiment"
        return {**exp, "models": models}

    return cut


def _cut_sweep(**values):
    return lambda exp: {**exp, "sweep": {**exp["sweep"], **values}}


# The two longest shipped experiments take 73 and 54 CPU seconds in full, a quarter of the suite's
# 8-minute budget on two cores; here they run on a cut grid that keeps every kind of point they
# have. megatron-scaling: its first model (t 1, no pipeline) and the first interleaved one; every
# one of its ten models is also simulated in full by tests/test_bands.py (the SC'21 table is the
# same ten runs, benchmarks/accuracy/measured_sc21.py). mixtral: the winner's schedule family and
# layout (DualPipeV, p 2, w 16, EP 8), with and without the all-to-all overlap, with and without
# context parallelism and recompute.
CUT_GRID = {
    "megatron-scaling.yaml": _cut_models("gpt-1.7b", "gpt-76b"),
    "mixtral-8x7b-dgx-h100.yaml": _cut_sweep(
        schedule=["dualpipe_v"], stages=[2], dp_width=[16], expert_parallel=[8]
    ),
}


@pytest.mark.parametrize("exp", sorted((ROOT / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_experiment_runs(exp, shipped_run, tmp_path):
    # `sim run EXP --out OUT --jobs 2 --no-plots`, shared with the tests that check more of a
    # shipped experiment's outputs (conftest.py's shipped_run)
    if exp.name in CUT_GRID:
        cut = CUT_GRID[exp.name](yaml.safe_load(exp.read_text()))
        assert cut != yaml.safe_load(exp.read_text())  # the cut still cuts something
        out = tmp_path / "out"
        res = _run("run", _write(tmp_path, cut, exp.name), "--out", out, "--jobs", 2, "--no-plots")
        assert res.exit_code == 0, res.output
        assert (out / "winner.yaml").is_file()
        assert len(pd.read_csv(out / "results.csv")) >= len(cut["models"])
        return
    res = shipped_run(exp.name)
    assert res.exit_code == 0, res.output
    assert (res.out / "winner.yaml").is_file()


def test_schedule_show_and_csv(tmp_path):
    res = _run(
        "schedule", "show", "1f1b", "--stages", 4, "--microbatches", 8, "--csv", tmp_path / "s.csv"
    )
    assert res.exit_code == 0, res.output
    assert "Step 00:" in res.output and "3B0" in res.output
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[0].split(",")[:5] == ["0F0", "0F1", "0F2", "0F3", "0B0"]


def test_schedule_show_m_less_than_p():
    res = _run("schedule", "show", "1f1b", "--stages", 4, "--microbatches", 2)
    assert res.exit_code == 2 and "microbatches" in res.output


def test_partition_json():
    res = _run("partition", "gnmt16", "--stages", 4, "--hardware", "dgx1-v100-16gb", "--json")
    assert res.exit_code == 0, res.output
    import json

    data = json.loads(res.output)
    assert len(data["stages"]) == 4 and data["boundaries"][0] == 0
    assert data["bottleneck_s"] == pytest.approx(max(s["time_s"] for s in data["stages"]))


def test_hardware_show():
    res = _run("hardware", "show", "dgx1-v100-16gb")
    assert res.exit_code == 0 and "gpu7" in res.output
    assert _run("hardware", "show", "nope").exit_code == 2


@pytest.mark.parametrize(
    "cmd,shown",
    [
        (["run"], ["results/<experiment name>/", "[default: 0;"]),
        (
            ["profile"],
            [
                "[default: (fp32; bf16 with --for-gpu)]",
                "[default: cpu]",
                "[default: (4;",
                "cores / 2",
            ],
        ),
        (["calibrate"], ["[default: 2;"]),
        (["validate"], ["[default: 3;", "beside CONFIG"]),
        (["schedule", "show"], ["[default: 1;"]),
        (["partition"], ["the trace's own"]),
    ],
)
def test_help_shows_defaults(cmd, shown):
    res = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    flat = " ".join(res.output.replace("│", " ").split())
    for text in shown:
        assert text in flat, (text, flat)


def test_console_text_keeps_its_square_brackets(tmp_path: Path, capsys) -> None:
    # rich reads "[ray]" and "[0]" as markup tags unless escaped: an error's install
    # instruction and a layer named like an index must print as written
    import typer

    from sim.cli.console import friendly
    from sim.errors import InputError
    from sim.trace.native import write_trace
    from sim.trace.schema import LayerProfile, Trace

    @friendly
    def needs_ray() -> None:
        raise InputError("ray is not installed: pip install 'pipesim[ray]'", field="--executor")

    with pytest.raises(typer.Exit):
        needs_ray()
    assert "pip install 'pipesim[ray]'" in capsys.readouterr().err
    layers = (LayerProfile("blocks[0]", 1e-3, 2e-3, 8.0, 8.0, 8.0),)
    write_trace(Trace("t[x]", layers, 1, "fp32", "cpu", {"source": "test"}), tmp_path / "t")
    res = runner.invoke(app, ["trace", "show", str(tmp_path / "t.csv")])
    assert res.exit_code == 0, res.output
    assert "blocks[0]" in res.output and "t[x]:" in res.output

"""End to end on CPU: profile a real model, calibrate, simulate, replay with torch, compare."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("torch")

from sim.cli import app  # noqa: E402
from tests.helpers import assert_times_reported

runner = CliRunner()


def _ok(*args):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_profile_simulate_replay_compare(tmp_path):
    _ok(
        "profile",
        "--out",
        tmp_path / "tiny",
        "--layers",
        2,
        "--hidden",
        64,
        "--heads",
        2,
        "--seq-len",
        32,
        "--vocab",
        128,
        "-b",
        2,
        "--reps",
        3,
    )
    _ok("calibrate", "--out", tmp_path / "hw.yaml", "--nproc", 2)
    exp = {
        "name": "tiny",
        "hardware": "hw.yaml",
        "models": [{"name": "tiny", "trace": "tiny.csv", "global_batch": 8}],
        "training": {"optimizer": "sgd"},
        "sweep": {"schedule": ["gpipe", "1f1b"], "stages": 2, "microbatch_size": 2},
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    _ok("run", tmp_path / "exp.yaml", "--out", tmp_path / "out", "--jobs", 1, "--no-plots")
    winner = tmp_path / "out" / "winner.yaml"
    out = _ok(
        "validate",
        winner,
        "--nproc",
        2,
        "--device",
        "cpu",
        "-s",
        "gpipe",
        "-s",
        "1f1b",
        "-s",
        "pipedream_2bw",
        "--iterations",
        2,
        "--torch-builtin",
    )
    assert "mean absolute percentage error" in out
    df = pd.read_csv(tmp_path / "out" / "validation.csv")
    for col in (
        "schedule",
        "microbatches",
        "measured_iteration_s",
        "predicted_iteration_s",
        "error",
        "measured_peak_bytes",
        "predicted_peak_bytes",
    ):
        assert col in df.columns
    assert sorted(df.schedule.unique()) == ["1f1b", "gpipe", "pipedream_2bw"]
    assert set(df.runtime) == {"ours", "torch"}
    not_run = df[df.status == "not_run"]
    assert list(zip(not_run.schedule, not_run.runtime, strict=True)) == [("pipedream_2bw", "torch")]
    df = df[df.status == "ok"]
    assert df.all_actions_done.all() and df.losses_finite.all()
    assert (df.numerics == "ok").all(), df[["schedule", "runtime", "grad_max_error"]]
    assert (df.measured_iteration_s > 0).all() and (df.predicted_iteration_s > 0).all()
    row = df.iloc[0]
    assert row.error == pytest.approx(
        (row.predicted_iteration_s - row.measured_iteration_s) / row.measured_iteration_s
    )
    assert all(math.isfinite(x) for x in df.error)
    _assert_errors_bounded(df)
    parts = pd.read_csv(tmp_path / "out" / "validation_breakdown.csv")
    ours = df[df.runtime == "ours"].set_index("schedule")
    for (schedule, rank), g in parts.groupby(["schedule", "rank"]):
        assert list(g.part) == ["F", "B", "STEP", "idle"], (schedule, rank)
        # per rank, the parts' differences add up to measured - predicted iteration time
        want = (
            ours.loc[schedule, "measured_iteration_s"] - ours.loc[schedule, "predicted_iteration_s"]
        )
        assert g.diff_s.sum() == pytest.approx(want, rel=1e-6, abs=1e-9), (schedule, rank)
        assert (g[g.part != "idle"].measured_s > 0).all(), (schedule, rank)
    measured = json.loads((tmp_path / "out" / "measured-1f1b-m4.json").read_text())
    names = {e.get("name") for e in measured["traceEvents"]}
    assert {"0F0", "1B3", "0B3"} <= names  # both ranks' real actions are in the timeline
    assert (tmp_path / "out" / "predicted-1f1b-m4.json").is_file()
    boundaries = yaml.safe_load(winner.read_text())["options"]["boundaries"]
    for schedule in ("gpipe", "1f1b", "pipedream_2bw"):
        timeline = json.loads((tmp_path / "out" / f"measured-{schedule}-m4.json").read_text())
        _assert_actions_measured(timeline, boundaries)


# No test asserts how close a replay's time comes to its prediction: the replay runs on a shared
# CPU where other processes only ever slow it down, so a bound on the time error fails on a busy
# machine (issue 25). How close it comes is measured by benchmarks/accuracy/bench_validation.py, which
# prints the figures. What the tests check of the times is that they were measured and that the
# error column is what the table says it is. Peak memory is not timing: predicted and measured
# agree within 15% (seen: <10%).
MAX_MEMORY_ERROR = 0.15


def _assert_errors_bounded(df: pd.DataFrame) -> None:
    for r in df.itertuples():
        assert_times_reported(r)
        # the counted peak (tensors) is what the CPU prediction models; the measured resident
        # peak adds the process's own buffers (backends.torch.replay.cpu_memory), so it is larger
        err = r.counted_memory_error
        assert abs(err) <= MAX_MEMORY_ERROR, (r.schedule, r.runtime, err)
        assert r.measured_peak_bytes >= 0.9 * r.counted_peak_bytes, (r.schedule, r.runtime)


def _assert_actions_measured(timeline: dict, boundaries) -> None:
    """Every rank's measured timeline has positive-duration forwards and backwards (how long
    they take against the profile is a benchmark's figure, not a test's bound)."""
    for rank in range(len(boundaries)):
        for op in ("F", "B"):
            spans = [
                ev["dur"] * 1e-6
                for ev in timeline["traceEvents"]
                if ev.get("ph") == "X"
                and ev.get("pid") == rank
                and ev.get("cat") == "compute"
                and ev.get("name", "")[1:2] == op
            ]
            assert spans and min(spans) > 0, (rank, op)


def test_validate_rejects_trace_without_model(tmp_path):
    exp = {
        "name": "x",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "g", "trace": "gnmt16", "global_batch": 128, "microbatch_size": 64}],
        "sweep": {"schedule": "gpipe", "stages": 2},
    }
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(exp))
    res = runner.invoke(app, ["validate", str(tmp_path / "x.yaml")])
    assert res.exit_code == 2 and "sim profile" in res.output, res.output


def test_validate_rejects_a_grid(tmp_path):
    res = runner.invoke(app, ["validate", "experiments/cpu-gpt-tiny.yaml"])
    assert res.exit_code == 2 and "validate takes one" in res.output, res.output


@pytest.mark.parametrize(
    "policy,named",
    [("d2d_swap", "d2d_swap"), ("none|chunked", "chunked"), ("zero_offload", "zero_offload")],
)
def test_validate_refuses_a_policy_the_replay_cannot_run(tmp_path, policy, named):
    """Exit 2 naming the option, before any rank starts (no validation.csv written)."""
    root = Path(__file__).resolve().parents[1]
    exp = {
        "name": "x",
        "hardware": str(root / "sim" / "hardware" / "calibrated" / "cpu-2rank.yaml"),
        "models": [
            {
                "name": "g",
                "trace": str(root / "traces" / "gpt-tiny-cpu.csv"),
                "global_batch": 8,
                "microbatch_size": 2,
            }
        ],
        "training": {"optimizer": "adam"},  # chunked with sgd crashes the simulator (reported)
        "sweep": {"schedule": "gpipe", "stages": 2, "memory_policy": policy},
    }
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(exp))
    res = runner.invoke(app, ["validate", str(tmp_path / "x.yaml"), "--nproc", "2"])
    assert res.exit_code == 2, res.output
    assert "sweep.memory_policy" in res.output and named in res.output
    assert "only none, recompute, cpu_swap" in res.output
    assert not (tmp_path / "validation.csv").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_validate_replays_the_multi_stage_schedules(tmp_path):
    """Interleaved1F1B and ZBV (2 stage chunks per rank) replay through torch's
    _PipelineScheduleRuntime from the simulator's CSV and are compared with the prediction."""
    root = Path(__file__).resolve().parents[1]
    exp = {
        "name": "vs",
        "hardware": str(root / "sim" / "hardware" / "calibrated" / "cpu-2rank.yaml"),
        "models": [
            {
                "name": "g",
                "trace": str(root / "traces" / "gpt-tiny-cpu.csv"),
                "global_batch": 8,
                "microbatch_size": 2,
            }
        ],
        "training": {"optimizer": "sgd"},
        "sweep": {"schedule": "interleaved_1f1b", "stages": 2, "virtual_stages": 2},
    }
    (tmp_path / "vs.yaml").write_text(yaml.safe_dump(exp))
    _ok("run", tmp_path / "vs.yaml", "--out", tmp_path / "out", "--no-plots", "--jobs", 1)
    winner = tmp_path / "out" / "winner.yaml"
    _ok(
        "validate",
        winner,
        "--nproc",
        2,
        "-s",
        "interleaved_1f1b",
        "-s",
        "zbv_zero_bubble",
        "--iterations",
        2,
    )
    df = pd.read_csv(tmp_path / "out" / "validation.csv")
    assert sorted(df.schedule) == ["interleaved_1f1b", "zbv_zero_bubble"]
    assert set(df.runtime) == {"torch"} and df.all_actions_done.all() and df.losses_finite.all()
    for r in df.itertuples():  # the bounds stated above for the pipeline replay
        assert_times_reported(r)
        # memory: weights + gradients + tracked saved bytes (counted); the simulator frees a
        # chunk's activations at its W (an over-estimate for split backwards): seen +2 % / +10 %
        assert 0 <= r.counted_memory_error <= 0.25, (r.schedule, r.counted_memory_error)
        assert r.numerics == "ok", (r.schedule, r.grad_max_error)

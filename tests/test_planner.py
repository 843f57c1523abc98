"""The planner: its bounds hold against full simulation, pruning keeps the winner, the output
set records what was pruned, and the executors (local, Ray) give identical results."""

from __future__ import annotations

import builtins
import gc
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli import app
from sim.config import load_experiment, parse_experiment
from sim.errors import InputError
from sim.plan.bounds import BoundModel, resolved_memory_excess
from sim.plan.executors import LocalExecutor, open_executor
from sim.plan.planner import plan_points
from sim.plan.point_row import point_row
from sim.plan.rowcache import open_cache
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.rows import pick_winner
from sim.point.simulate import evaluate, resolve

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

TWO_SERVERS = {
    "name": "planner-2x-h100",
    "hardware": "2x-dgx-h100",
    "models": [{"name": "gpt-ds-20b", "trace": "gpt-ds-20b", "global_batch": 32}],
    "sweep": {
        "schedule": ["gpipe", "1f1b", "pipedream_2bw", "pipedream"],
        "stages": [1, 2, 4, 8],
        "dp_width": [1, 2],
        "tensor_parallel": [1, 2, 4, 8],
        "sequence_parallel": [False, True],
        "microbatch_size": [1, 2, 4],
        "memory_policy": [
            "none",
            "recompute:full",
            "recompute:selective",
            "cpu_swap",
            "zero_offload",
            "zero3",
            "zero3:offload",
            "chunked:64",
            "d2d_swap:weights",
            "none|recompute:full",
        ],
    },
}
"""A two-server grid with tensor parallelism and every kind of memory policy."""


VIRTUAL = {
    "name": "planner-virtual",
    "hardware": "dgx1-v100-32gb",
    "models": [{"name": "gpt", "trace": "gpt2-1.5b", "global_batch": 32}],
    "sweep": {
        "schedule": [
            "interleaved_1f1b",
            "looped_bfs",
            "interleaved_zero_bubble",
            "zbv_zero_bubble",
            "dualpipe_v",
        ],
        "stages": [2, 4],
        "dp_width": [1, 2],
        "microbatch_size": [1, 2],
        "memory_policy": ["none", "recompute:full", "cpu_swap"],
    },
}
"""Schedules with several stages per rank (virtual stages) and split backwards (I, W)."""


def _prep(data: dict):
    exp = parse_experiment(data, file="<test>")
    return prepare(exp, "<test>")


DGX1 = prepare(load_experiment(ROOT / "experiments" / "dgx1.yaml"), "experiments/dgx1.yaml")
H100 = _prep(TWO_SERVERS)
VIRT = _prep(VIRTUAL)
GRIDS = {g: (p, expand(p)[0]) for g, p in (("dgx1", DGX1), ("h100", H100), ("virtual", VIRT))}


@settings(
    max_examples=36,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(grid=st.sampled_from(sorted(GRIDS)), data=st.data())
def test_bounds_hold_against_simulation(grid, data):
    """Every sampled point: memory lower bound <= simulated peak, simulated throughput <=
    throughput upper bound, and the resolved bound <= the peak of its GPU."""
    prep, points = GRIDS[grid]
    point = data.draw(st.sampled_from(points))
    bounds = BoundModel(prep).bounds(point)
    trace = prep.traces[point.model]
    res = resolve(prep.exp, point, prep.topology, trace)
    met, _ = evaluate(res)
    gpu_peak = max(v for k, v in met.peak_by_device.items() if k.startswith("gpu"))
    assert bounds.memory_bytes <= gpu_peak * (1 + 1e-12), (point, bounds, gpu_peak)
    assert met.throughput_samples_per_s <= bounds.throughput_samples_per_s * (1 + 1e-9), (
        point,
        bounds,
        met.throughput_samples_per_s,
    )
    excess = resolved_memory_excess(res)
    if excess is not None:
        gpu, need, cap = excess
        assert need <= met.peak_by_device[gpu] * (1 + 1e-12)
        assert not met.fits


def test_resolved_bound_only_prunes_what_does_not_fit():
    """``screen`` prunes a point once resolved only when the simulator says it does not fit."""
    prep, points = GRIDS["h100"]
    seen = 0
    for point in points[::40]:
        row = point_row(prep, point, screen=True)[0]
        if row.error.startswith("pruned: "):
            seen += 1
            assert not point_row(prep, point)[0].fits, point
    assert seen, "the sample should contain a point pruned once resolved"


def _plan(prep, points, prune: bool):
    with LocalExecutor(prep, 1) as pool:
        return plan_points(prep, points, cache_dir=None, executor=pool, prune=prune)


def test_pruning_keeps_the_winner():
    """On a small grid the pruned sweep and the exhaustive one pick the same winner (per
    model), the pruned one simulates fewer points, and each pruned row says why."""
    exp = load_experiment(ROOT / "experiments" / "dgx1.yaml")
    data = exp.model_dump()
    data["sweep"].update(stages=[2, 4], dp_width=[1, 2])
    data["models"][0]["microbatch_size"] = [32, 64]
    data["models"][1]["microbatch_size"] = [1, 2]
    prep = prepare(parse_experiment(data, file="<test>"), "<test>")
    points = expand(prep)[0]
    pruned, stats = _plan(prep, points, True)
    full, full_stats = _plan(prep, points, False)
    assert stats.simulated < full_stats.simulated == len(points)
    assert stats.pruned_memory + stats.pruned_bound + stats.simulated == len(points)
    assert stats.pruned_bound > 0
    for model in ("gnmt16", "gpt2-1.5b"):
        a = pick_winner([r for r in pruned if r.model == model])
        b = pick_winner([r for r in full if r.model == model])
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a == b
    for a, b in zip(pruned, full, strict=True):
        assert a.point() == b.point()
        if a.error.startswith("pruned: "):
            assert not a.fits and a.throughput_samples_per_s is None
            if "memory" in a.error:
                assert not b.ok, (a.error, b)
            else:
                assert "throughput upper bound" in a.error
        else:
            assert a == b


def test_llama3_70b_question_pruned_as_the_exhaustive_sweep():
    """Issue 28: the shipped 64-H100 Llama-3-70B question (symmetric, periodic; here a grid
    small enough to simulate whole: both schedules x p 2, 4 x t 4, 8 x cp 1, 2): the planner
    picks the exhaustive sweep's winner, simulates fewer points, and every point it pruned
    by memory (interleaved ones too, once resolved) does not fit."""
    data = yaml.safe_load((ROOT / "experiments" / "llama3-70b-64xh100.yaml").read_text())
    data["sweep"].update(stages=[2, 4], tensor_parallel=[4, 8], microbatch_size=[1])
    prep = prepare(parse_experiment(data, file="<test>"), "<test>")
    points = expand(prep)[0]
    assert {p.schedule for p in points} == {"1f1b", "interleaved_1f1b"}
    pruned, stats = _plan(prep, points, True)
    full, _ = _plan(prep, points, False)
    assert stats.simulated < len(points) and stats.pruned_resolved > 0
    assert any(r.schedule == "interleaved_1f1b" and "as partitioned" in r.error for r in pruned), (
        "an interleaved point is pruned by its resolved bound (a rank's chunks together)"
    )
    winner = pick_winner(full)
    assert winner is not None and pick_winner(pruned) == winner
    for a, b in zip(pruned, full, strict=True):
        if a.error.startswith("pruned: memory"):
            assert not b.fits, (a.error, b)
        elif not a.error:
            assert a == b


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


SMALL = {
    "name": "small",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "gpt", "trace": "gpt2-1.5b", "global_batch": 16}],
    "sweep": {
        "schedule": ["gpipe", "1f1b"],
        "stages": [1, 2, 4, 8],
        "microbatch_size": [1, 2],
    },
}


def test_cli_records_pruned_rows_and_exhaustive_agrees(tmp_path):
    """results.csv has a row per point (pruned ones with the reason), config.resolved.yaml the
    planner's counts; --exhaustive simulates everything and picks the same winner; pruned rows
    are not cached."""
    path = _write(tmp_path, SMALL)
    res = runner.invoke(
        app, ["run", str(path), "--out", str(tmp_path / "a"), "-j", "1", "--no-plots"]
    )
    assert res.exit_code == 0, res.output
    assert "planner:" in res.output
    df = pd.read_csv(tmp_path / "a" / "results.csv")
    errors = df["error"].fillna("")
    mem = errors.str.startswith("pruned: memory lower bound")
    assert mem.any() and not df.loc[mem, "fits"].any()
    assert errors[mem].str.contains(r"GiB > capacity [\d.]+ GiB").all()
    resolved = yaml.safe_load((tmp_path / "a" / "config.resolved.yaml").read_text())
    planner = resolved["planner"]
    assert planner["expanded"] == len(df) and planner["prune"] is True
    with open_cache(tmp_path / "a" / ".cache") as cache:
        cached = len(cache)
    assert cached == planner["simulated"]
    res = runner.invoke(
        app,
        ["run", str(path), "--out", str(tmp_path / "b"), "-j", "1", "--no-plots", "--exhaustive"],
    )
    assert res.exit_code == 0, res.output
    full = pd.read_csv(tmp_path / "b" / "results.csv")
    assert not full["error"].astype(str).str.startswith("pruned").any()
    a = yaml.safe_load((tmp_path / "a" / "winner.yaml").read_text())
    b = yaml.safe_load((tmp_path / "b" / "winner.yaml").read_text())
    assert a == b


def test_sweep_prune_false_is_exhaustive(tmp_path):
    data = {**SMALL, "sweep": {**SMALL["sweep"], "prune": False}}
    res = runner.invoke(
        app,
        ["run", str(_write(tmp_path, data)), "--out", str(tmp_path / "o"), "-j", "1", "--no-plots"],
    )
    assert res.exit_code == 0, res.output
    assert "exhaustive" in res.output


def test_unknown_executor_exits_2(tmp_path):
    res = runner.invoke(
        app,
        ["run", str(_write(tmp_path, SMALL)), "--out", str(tmp_path / "o"), "--executor", "spark"],
    )
    assert res.exit_code == 2
    assert "--executor" in res.output
    assert not (tmp_path / "o").exists()


def test_ray_missing_exits_2_saying_how_to_install(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    res = runner.invoke(
        app,
        ["run", str(_write(tmp_path, SMALL)), "--out", str(tmp_path / "o"), "--executor", "ray"],
    )
    assert res.exit_code == 2, res.output
    assert "--executor" in res.output and "pip install" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "o").exists()
    with pytest.raises(InputError):
        open_executor("ray", DGX1, 1)


@pytest.mark.timeout(300)
def test_ray_executor_gives_identical_results(tmp_path):
    """results.csv is identical, byte for byte, with --executor local and --executor ray (a
    local Ray, shut down afterwards)."""
    ray = pytest.importorskip("ray")
    path = _write(tmp_path, SMALL)
    outs = {}
    try:
        for name in ("local", "ray"):
            out = tmp_path / name
            res = runner.invoke(
                app,
                ["run", str(path), "--out", str(out), "-j", "2", "--no-plots", "--no-cache"]
                + ["--executor", name],
            )
            assert res.exit_code == 0, res.output
            outs[name] = (out / "results.csv").read_bytes()
        assert not ray.is_initialized(), "the executor shuts down the Ray it started"
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert outs["local"] == outs["ray"]


def test_weighted_bound_is_the_harmonic_split_of_a_uniform_model():
    """Uniform layers, 1F1B's stashes 4, 3, 2, 1: the bound is ``1 / sum(1 / (alpha P + n_s
    A))``, what the best fractional split (stage ``s`` holding a share ``~ 1 / (alpha P + n_s
    A)``) reaches, and above the plain mean ``(alpha P + min(n) A) / p``."""
    from sim.memory.states import state_bytes
    from sim.plan.bounds import RankTotals, weighted_bound

    tot = RankTotals(
        params=40.0,
        act_bytes=20.0,
        compute_s=1.0,
        max_layer_s=0.25,
        layers=4,
        state=state_bytes("fp16", "adam"),
        groups=((10.0, 5.0, 4),),
    )
    n = (4, 3, 2, 1)
    got = weighted_bound(tot, 2.0, n)
    assert got == pytest.approx(1 / sum(1 / (80 + 20 * k) for k in n))
    assert got > (80 + 20) / 4


@pytest.mark.parametrize("enabled", [True, False])
def test_points_run_with_the_collector_off_and_it_is_restored(enabled):
    # sim.plan.executors.collector_paused: a point's log is made and dropped with the cyclic
    # collector off (no collection walks its records), and the collector's state is restored
    points = GRIDS["dgx1"][1][:3]
    seen: list[bool] = []
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        LocalExecutor(DGX1, jobs=1).map(points, lambda i, row, log: seen.append(gc.isenabled()))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False] * len(points)


def test_the_cli_freezes_what_it_imported():
    # sim.cli._settle_heap (imported above: app): the imported modules' objects are frozen,
    # and the collector is on
    assert gc.get_freeze_count() > 10_000
    assert gc.isenabled()

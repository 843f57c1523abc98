"""A sweep never dies on one point (issue 30 item 1): a point whose simulation raises an
unexpected exception, or whose worker process dies, becomes a row with ``internal error: ...``;
the other points' rows are as without it, the run writes its outputs, names the failed points
and exits with code 3."""

from __future__ import annotations

import os

import pytest
import yaml
from typer.testing import CliRunner

import sim.api
import sim.plan.executors as executors
import sim.plan.point_row as point_row_mod
from sim.cli import app
from sim.errors import EXIT_INTERNAL
from sim.plan.rowcache import open_cache
from sim.point.rows import INTERNAL

EXP = {
    "name": "fail",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
    "sweep": {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 4},
}


def _broken_at(schedule: str, stages: int, real):
    """``real`` (a point's row function) that raises for one point."""

    def row(prep, point, *args, **kwargs):
        if point.schedule == schedule and point.stages == stages:
            raise ZeroDivisionError("a bug")
        return real(prep, point, *args, **kwargs)

    return row


def test_an_exception_in_one_point_is_its_row(monkeypatch):
    good = sim.api.plan(EXP, exhaustive=True).rows
    monkeypatch.setattr(
        point_row_mod, "_point_row", _broken_at("1f1b", 4, point_row_mod._point_row)
    )
    rows = sim.api.plan(EXP, exhaustive=True).rows
    failed = [r for r in rows if r.failed]
    assert [(r.schedule, r.stages) for r in failed] == [("1f1b", 4)]
    assert failed[0].error.startswith(INTERNAL + "ZeroDivisionError: a bug (")
    assert not failed[0].fits and failed[0].throughput_samples_per_s is None
    assert [r for r in rows if not r.failed] == [r for r in good if r.point() != failed[0].point()]


def test_a_row_that_fails_validation_is_an_internal_error(monkeypatch):
    """The issue's crash: a float rounding made a negative peak that ResultRow rejects."""
    real = point_row_mod.row_breakdown

    def negative(*args, **kwargs):
        out = real(*args, **kwargs)
        return {**out, "peak_activations_bytes": -1.9073486328125e-06}

    monkeypatch.setattr(point_row_mod, "row_breakdown", negative)
    rows = sim.api.plan(EXP, exhaustive=True).rows
    assert rows and all(r.failed for r in rows)
    assert "peak_activations_bytes" in rows[0].error and "\n" not in rows[0].error


@pytest.mark.timeout(120)
def test_a_worker_that_dies_fails_only_its_point(monkeypatch):
    real = executors.point_row

    def row(prep, point, **kwargs):
        if point.schedule == "gpipe" and point.stages == 2:
            os._exit(9)  # as if killed
        return real(prep, point, **kwargs)

    monkeypatch.setattr(executors, "point_row", row)  # the forked workers inherit it
    rows = sim.api.plan(EXP, jobs=2, exhaustive=True).rows
    failed = [(r.schedule, r.stages) for r in rows if r.failed]
    assert failed == [("gpipe", 2)]
    assert "worker process" in next(r.error for r in rows if r.failed)
    assert sum(r.ok for r in rows) == 3


def test_run_writes_everything_names_the_point_and_exits_3(tmp_path, monkeypatch):
    monkeypatch.setattr(
        point_row_mod, "_point_row", _broken_at("gpipe", 4, point_row_mod._point_row)
    )
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump(EXP))
    res = CliRunner().invoke(
        app, ["run", str(f), "--out", str(tmp_path / "o"), "-j", "1", "--no-plots"]
    )
    assert res.exit_code == EXIT_INTERNAL, res.output
    assert "1 of 4 configurations failed with an internal error" in res.output
    assert "gpipe p=4" in res.output and "ZeroDivisionError" in res.output
    csv = (tmp_path / "o" / "results.csv").read_text()
    assert csv.count(INTERNAL) == 1
    assert (tmp_path / "o" / "winner.yaml").is_file()
    with open_cache(tmp_path / "o" / ".cache") as cache:
        assert len(cache) and not any(INTERNAL in cache[k] for k in cache.iterkeys())

"""Typed result rows and the one ranking used by every "best configuration" (issue 7)."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest
from pydantic import ValidationError

from sim.point.rows import ResultRow, pick_winner, rank_key
from sim.report.tables import rank_results


def row(**kw) -> ResultRow:
    base = dict(
        model="m",
        schedule="1f1b",
        stages=2,
        dp_width=1,
        microbatch_size=1,
        microbatches=8,
        memory_policy="none",
        global_batch=8,
        parameters=10,
        iteration_time_s=1.0,
        throughput_samples_per_s=8.0,
        bubble_fraction=0.1,
        peak_memory_bytes=1.0,
        fits=True,
    )
    base.update(kw)
    if (
        "iteration_time_s" not in kw
        and "throughput_samples_per_s" in kw
        and kw["throughput_samples_per_s"]
    ):
        base["iteration_time_s"] = base["global_batch"] / kw["throughput_samples_per_s"]
    return ResultRow(**base)


def test_fitting_beats_faster_non_fitting_and_errors_come_last():
    fast_oom = row(throughput_samples_per_s=100.0, fits=False, oom_device="gpu0")
    slow_fit = row(throughput_samples_per_s=2.0)
    broken = ResultRow(
        model="m",
        schedule="gpipe",
        stages=2,
        dp_width=1,
        microbatch_size=1,
        microbatches=8,
        memory_policy="none",
        global_batch=8,
        parameters=10,
        error="bad",
    )
    assert pick_winner([fast_oom, broken, slow_fit]) == slow_fit
    assert sorted([broken, slow_fit, fast_oom], key=rank_key) == [slow_fit, fast_oom, broken]
    assert pick_winner([fast_oom, broken]) is None


def test_ties_go_to_fewer_gpus_then_names_whatever_the_order():
    a = row(schedule="gpipe", stages=4, dp_width=2, global_batch=16, microbatches=8)
    b = row(schedule="1f1b", stages=4, dp_width=1, global_batch=8)
    c = row(schedule="gpipe", stages=4, dp_width=1, global_batch=8)
    for _ in range(5):
        rows = [a, b, c]
        random.shuffle(rows)
        assert sorted(rows, key=rank_key) == [b, c, a]  # 4 GPUs: '1f1b' < 'gpipe'; then 8
        assert pick_winner(rows) == b


def test_table_ranking_is_the_same_ranking():
    rows = [
        row(
            schedule=s, stages=p, throughput_samples_per_s=t, fits=f, oom_device="" if f else "gpu1"
        )
        for s, p, t, f in [
            ("gpipe", 2, 5.0, True),
            ("1f1b", 4, 5.0, True),
            ("1f1b", 2, 9.0, False),
            ("gpipe", 4, 7.0, True),
        ]
    ]
    df = pd.DataFrame([r.model_dump() for r in rows])
    ranked = rank_results(df.sample(frac=1.0, random_state=1))
    assert list(ranked["throughput_samples_per_s"]) == [7.0, 5.0, 5.0, 9.0]
    assert list(ranked["stages"])[1:3] == [2, 4]  # equal throughput: fewer GPUs first
    best = ranked.iloc[0].to_dict()
    assert ResultRow(**best) == pick_winner(rows)


def test_result_row_rejects_impossible_values_and_flags_inconsistent_ones():
    with pytest.raises(ValidationError):
        row(throughput_samples_per_s=-1.0)
    with pytest.raises(ValidationError):
        row(bubble_fraction=1.5)
    with pytest.raises(ValidationError):
        row(iteration_time_s=math.inf)
    assert row().problems() == []
    assert (
        "throughput_samples_per_s"
        in row(throughput_samples_per_s=9.0, iteration_time_s=1.0).problems()[0]
    )
    assert "oom_device" in row(oom_device="gpu0").problems()[0]
    assert row()["schedule"] == "1f1b"

"""benchmarks/accuracy/vtrain_parts.py: which part of composed rows carries a prediction's error,
the serial overflow check's host floor, and micro-batch inversions (hand-computed cases)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.accuracy.vtrain_parts import (
    RAW,
    b_inversions,
    check_host_s,
    step_floor,
    swap_errors,
    with_parts,
)


def _rows(p: int, c: float, f: float, e: float, c_pred: float) -> pd.DataFrame:
    """One (t 2, p, w 1, b 1) group, T = 2 + c L / p + m (e + f L / p), predicted with the step
    per layer ``c_pred`` instead of ``c``."""
    out = []
    for m in (2, 4, 8):
        for L in (12, 16, 20, 24):
            base = 2 + m * (e + f * L / p)
            out.append(dict(zip(RAW, (1024, L, 2, p, 1, 1, m), strict=True)) | {
                "measured_ms": base + c * L / p, "predicted_ms": base + c_pred * L / p})  # fmt: skip
    return pd.DataFrame(out)


def test_a_step_priced_high_is_cleared_by_swapping_the_per_layer_part_only():
    # step 1.0 ms per layer predicted 3.0 ms: every row off by 2 L / p ms, nothing else
    rows = pd.concat([_rows(1, 1.0, 3.0, 4.0, 3.0), _rows(2, 1.0, 3.0, 4.0, 3.0)])
    d = with_parts(rows)
    assert len(d) == 24
    assert d.c_p.to_numpy() - d.c.to_numpy() == pytest.approx([2.0] * 24)  # per layer of a stage
    err = swap_errors(d)
    assert err["cL"] == pytest.approx((0.0, 0.0), abs=1e-9)
    expected = (d.predicted_ms / d.measured_ms - 1).abs().mean() * 100
    for part in ("as predicted", "a", "me", "mfL"):
        assert err[part][0] == pytest.approx(expected)
        assert err[part][1] > 0


def test_overflow_check_host_time_of_a_block_on_the_a100_preset():
    # 8 vectors x ((2 + 1) x 8 us + 10 us) + 4 matrices x (8 us + 10 us) = 272 + 72 = 344 us
    # (dgx-a100-40gb host_overhead: nograd_op 8 us, read 10 us)
    assert check_host_s("dgx-a100-40gb") == pytest.approx(344e-6)


def test_step_floor_flags_steps_below_the_check():
    parts = pd.DataFrame({"t": [2, 2, 8, 8], "p": [1, 1, 1, 2], "w": [1, 1, 1, 1],
                          "b": [1, 2, 1, 1], "c": [0.5, 0.6, 0.1, 9.0]})  # fmt: skip
    out = step_floor(parts, 344e-6).set_index("t")
    assert out.rows_step_ms.tolist() == pytest.approx([0.55, 0.1])  # p 2 left out
    assert out.rows_below_check.tolist() == [False, True]


def test_b_inversions_pair_each_b_with_twice_it():
    s = pd.DataFrame({"t": [8, 8, 8, 2, 2], "b": [1, 2, 4, 1, 2],
                      "f_ms": [5.0, 4.0, 3.7, 3.0, 3.5]})  # fmt: skip
    out = b_inversions(s)
    assert out[["t", "b"]].values.tolist() == [[8, 1], [8, 2]]
    assert out.f_2b_ms.tolist() == [4.0, 3.7]

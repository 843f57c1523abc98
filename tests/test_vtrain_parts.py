"""benchmarks/accuracy/vtrain_parts.py: which part of composed rows carries a prediction's error,
the serial overflow check's host floor, and micro-batch inversions (hand-computed cases)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.accuracy.vtrain_parts import (
    RAW,
    b_inversions,
    block_params,
    check_host_s,
    head_floor_ms,
    head_slopes,
    step_bytes_floor,
    step_floor,
    swap_errors,
    with_parts,
)
from sim.hardware.loader import load_hardware_spec


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


def test_head_floor_per_sample_is_the_head_gemms_at_peak_plus_its_bytes_at_peak():
    # h 2048, t 2: V / t = 50432 / 2 = 25216 (Megatron-DeepSpeed's padding to 128 t).
    # GEMMs: 3 x 2 x 1024 x 25216 x 2048 FLOPs per sample at 312e12 -> 1.01696 ms (compute-bound).
    # Bytes per sample: 52 per logit (fp32 cast 6, max 4, sub 8, exp 8, sum 4, div 8; grad mul 8,
    # cast back 6) x 1024 x 25216 = 1342.70 MB; norm fwd 2 + bwd 3, embedding fwd 2 + bwd 1
    # bytes per element x 1024 x 2048 x 2 = 33.55 MB; token ids 8 x 1024 -> 1376.26 MB at
    # 1555e9 B/s -> 0.88506 ms.
    gemm_ms = 3 * 2 * 1024 * 25216 * 2048 / 312e12 * 1e3
    bytes_ = 52 * 1024 * 25216 + 8 * 1024 * 2048 * 2 + 8 * 1024
    assert head_floor_ms(2048, 2, 312e12, 1555e9) == pytest.approx(gemm_ms + bytes_ / 1555e9 * 1e3)
    assert head_floor_ms(2048, 2, 312e12, 1555e9) == pytest.approx(1.9020, abs=1e-4)


def test_head_slopes_flag_rows_growing_slower_than_the_floor():
    # e = 2 + 1.0 b at t 2 (below the 1.902 ms floor), e = 1 + 9.0 b at t 1 (above); p 2 ignored
    parts = pd.DataFrame({"t": [2, 2, 2, 1, 1, 1, 1], "p": [1, 1, 1, 1, 1, 1, 2],
                          "b": [1, 2, 4, 1, 2, 4, 1], "e": [3.0, 4.0, 6.0, 10.0, 19.0, 37.0, 99.0]})  # fmt: skip
    spec = load_hardware_spec("dgx-a100-40gb").gpu.compute_spec()
    out = head_slopes(parts, 2048, spec).set_index("t")
    assert out.rows_de_db_ms.tolist() == pytest.approx([9.0, 1.0])
    assert out.rows_below_floor.tolist() == [False, True]
    assert (out.model_ms > out.floor_ms).all()  # launch overhead, waves, 85 % of HBM


def test_step_bytes_floor_is_one_blocks_parameters_times_bytes_at_peak():
    # h 2048, t 4: (12 x 2048^2 + 7 x 2048) / 4 + 6 x 2048 = 12,598,784 parameters;
    # x 28 B / 1555 GB/s = 0.22686 ms, x 78 B = 0.63196 ms; p 2 and w 2 rows left out
    parts = pd.DataFrame({"t": [4, 4, 4, 4], "p": [1, 1, 2, 1], "w": [1, 1, 1, 2],
                          "b": [1, 2, 1, 1], "c": [0.25, 0.26, 9.0, 9.0]})  # fmt: skip
    out = step_bytes_floor(parts, 2048, 1555e9, 78.0).iloc[0]
    assert block_params(2048, 4) == 12_598_784
    assert out.rows_step_ms == pytest.approx(0.255)
    assert out.adam_floor_ms == pytest.approx(12_598_784 * 28 / 1555e9 * 1e3)
    assert out.adam_floor_ms == pytest.approx(0.22686, abs=1e-5)
    assert out.code_floor_ms == pytest.approx(0.63196, abs=1e-5)

"""benchmarks/accuracy/vtrain_provenance.py: vTrain's all-reduce formula against a ring, and the
parts read off composed rows (hand-computed cases, synthetic rows)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.accuracy.vtrain_provenance import (
    GIB,
    LAYOUT,
    dp_adjustment_s,
    groups,
    inversion_floor,
    ring_s,
    shared_parts,
    vtrain_comm_s,
)

# 1 GiB in 5 ms over 2 GPUs (busbw 2^30 / 5e-3 x 1 = 214.7 GB/s) and 8 ms over 8 (x 7/4)
LUT = pd.DataFrame({"gpus": [2, 2, 8, 8], "bytes": [2**20, GIB, 2**20, GIB],
                    "time_us": [50.0, 5000.0, 90.0, 8000.0]})  # fmt: skip


def test_vtrain_prices_an_allreduce_above_a_gib_by_bus_bandwidth_without_the_ring_factor():
    # 2 GiB over 8 GPUs: 2048 MiB / (busbw x 1024) s, busbw = 2^30 / 8 ms x 2 x 7 / 8 / 1e9
    busbw = GIB / 8e-3 * 1.75 / 1e9
    assert vtrain_comm_s(2 * GIB, 8, LUT) == pytest.approx(2048 / (busbw * 1024))
    # a ring takes twice the 1 GiB time, 16 ms: 1.75x the formula (the ring factor 2 x 7 / 8)
    assert ring_s(2 * GIB, 8, LUT) == pytest.approx(16e-3)
    assert vtrain_comm_s(2 * GIB, 8, LUT) < ring_s(2 * GIB, 8, LUT) / 1.7
    # up to 1 GiB both read the table
    assert vtrain_comm_s(GIB, 2, LUT) == ring_s(GIB, 2, LUT) == pytest.approx(5e-3)


def test_no_adjustment_without_data_parallelism_or_under_a_gib():
    assert dp_adjustment_s(2048, 24, 1, 1, 1, LUT) == 0.0
    # h 64, 12 layers: a few MB, read from the table both ways
    assert dp_adjustment_s(64, 12, 1, 1, 2, LUT) == pytest.approx(0.0)


def _composed(t: int, p: int, w: int, b: int, s: float, f: float, e: float) -> list[dict]:
    """Rows composed as T = 2 + L (s + (p - 1) f) / p + m (e + f L / p): an ideal 1F1B bubble."""
    return [{"tensor_parallel": t, "pipeline_parallel": p, "data_parallel": w,
             "microbatch_size": b, "global_batch": m * b * w, "layers": L,
             "iteration_time_ms": 2 + L * (s + (p - 1) * f) / p + m * (e + f * L / p)}
            for m in (2, 4, 8) for L in (12, 16, 20, 24)]  # fmt: skip


def test_composed_rows_share_f_and_e_across_widths_and_c_is_step_plus_bubble():
    rows = pd.DataFrame(
        [r for p, w in ((1, 1), (2, 1), (1, 2)) for r in _composed(2, p, w, 1, 0.5, 3.0, 4.0)]
    )
    parts = groups(rows).set_index(["p", "w"])
    assert parts.f.tolist() == pytest.approx([3.0, 3.0, 3.0])
    assert parts.loc[(2, 1), "c"] == pytest.approx(0.5 + 3.0)  # s + (p - 1) f
    shared = shared_parts(groups(rows))
    assert shared.f_spread.iloc[0] == pytest.approx(0.0, abs=1e-9)
    assert shared.groups.iloc[0] == 3


def test_a_layout_faster_at_the_larger_size_forces_error_on_a_monotone_model():
    # two layouts: the larger size runs the first 20 % faster (100 -> 80 ms), the second slower
    small = pd.DataFrame({**{c: [1, 2] for c in LAYOUT}, "iteration_time_ms": [100.0, 50.0]})
    large = small.assign(iteration_time_ms=[80.0, 90.0])
    # predicting both at 80 ms: 20 % on the small row, 0 on the large; any x in [80, 100]
    # costs (100 - x) / 100 + (x - 80) / 80 >= 0.2; per 2 small rows: 10 points of MAPE
    assert inversion_floor(small, large) == (1, pytest.approx(10.0))
    assert inversion_floor(small, small) == (0, 0.0)

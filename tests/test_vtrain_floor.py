"""benchmarks/accuracy/vtrain_floor.py and vtrain_phases.py: the peak-rate floor of a kernel and the per-layer costs
read off rows that are linear in the layer and micro-batch counts (synthetic rows, closed forms)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.accuracy.vtrain_floor import floor_time_s, lut_tables, measured_costs
from sim.compute.kernels import Kernel, gemm, mem
from sim.hardware.gpu_compute import ComputeSpec

SPEC = ComputeSpec("x", matmul_flops=1e14, fp32_flops=1e13, hbm_bandwidth_Bps=1e12, sm_count=100,
                   matmul_efficiency=0.5, attention_efficiency=0.5)  # fmt: skip


def test_floor_is_the_slower_of_flops_and_bytes_at_the_given_rates():
    # 2*1000^3 = 2e9 FLOP at 1e14 * 0.5 = 40 us; 3 * 1000^2 * 2 B = 6e6 B at 1e12 B/s = 6 us
    assert floor_time_s(gemm("g", 1000, 1000, 1000, 2), SPEC, 0.5) == pytest.approx(40e-6)
    assert floor_time_s(gemm("g", 1000, 1000, 1000, 2), SPEC, 1.0) == pytest.approx(20e-6)
    # a memory-bound kernel: bytes at the datasheet peak, no overhead
    assert floor_time_s(mem("m", 5e6), SPEC, 0.5) == pytest.approx(5e-6)
    # a skinny GEMM is bound by its bytes: 2e3 FLOP, 1e9 B -> 1 ms
    assert floor_time_s(Kernel("s", "gemm", 2e3, 1e9, 1, 1, 1), SPEC, 1.0) == pytest.approx(1e-3)


def _rows(t: int, w: int, b: int, ms: list[int], a: float, c: float, e: float, f: float):
    """vTrain-layout rows of T = a + c L + m (e + f L) ms, p = 1, L in 12..24."""
    return [{"gpus": t * w, "global_batch": m * b * w, "microbatch_size": b, "hidden": 64,
             "heads": 16, "layers": L, "seq_len": 1024, "tensor_parallel": t,
             "data_parallel": w, "pipeline_parallel": 1,
             "iteration_time_ms": a + c * L + m * (e + f * L)}
            for m in ms for L in (12, 16, 20, 24)]  # fmt: skip


def test_costs_read_off_linear_rows():
    rows = pd.DataFrame(
        _rows(2, 1, 1, [2, 4, 8], a=5.0, c=0.5, e=3.0, f=2.0)
        + _rows(2, 1, 8, [2], a=5.0, c=0.5, e=20.0, f=9.0)  # one m: c from b = 1
        + _rows(2, 2, 1, [2, 4], a=9.0, c=0.9, e=3.0, f=2.0)  # larger w: not read
    )
    got = measured_costs(rows).set_index("b")
    assert list(got.w) == [1, 1]
    assert got.loc[1, "f_s"] == pytest.approx(2.0e-3)
    assert got.loc[1, "c_s"] == pytest.approx(0.5e-3)
    assert got.loc[8, "c_s"] == pytest.approx(0.5e-3)
    assert got.loc[8, "f_s"] == pytest.approx(9.0e-3)


def test_lut_is_vtrains_table_in_seconds():
    tables = lut_tables()
    assert sorted(tables) == [2, 3, 4, 5, 6, 7, 8]
    assert tables[2].time_s(1048576) == pytest.approx(44.21e-6)  # allreduce_lut.csv, 1 MiB


def test_parts_of_a_linear_group():
    # T = 1 + 2 L + m (3 + 4 L) at L = 24, m = 8: a 1, c L 48, m e 24, m f L 768 (vtrain_phases)
    from benchmarks.accuracy.vtrain_phases import parts

    layers = np.array([12, 24, 12, 24, 16])
    m = np.array([2, 2, 4, 4, 8])
    got = parts(layers, m, 1 + 2 * layers + m * (3 + 4 * layers), (24, 8))
    assert got == pytest.approx({"a": 1.0, "cL": 48.0, "me": 24.0, "mfL": 768.0})

"""The measured datasets as benchmarks/bench_measured.py reads them: Megatron-LM's SC'21 Table 1
(benchmarks/measured_sc21.py) and vTrain's all-reduce table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.bench_measured import model_hardware
from benchmarks.measured_sc21 import eq3_flops, load_sc21, tflops_per_gpu
from sim.engine.hierarchical import collective_plan
from sim.hardware.loader import load_hardware

ROOT = Path(__file__).resolve().parent.parent


def test_eq3_by_hand():
    # 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with B=1, s=6, l=1, h=1, V=16: 96*6*(1+1+1)
    assert eq3_flops(1, 6, 1, 1, 16) == 1728.0
    row = pd.Series({"global_batch": 1, "layers": 1, "hidden": 1, "gpus": 2})
    f = eq3_flops(1, 2048, 1, 1, 51200)
    assert tflops_per_gpu(row, f / 2e12) == pytest.approx(1.0)  # F / (T n) in TFLOP/s


def test_table1_is_self_consistent():
    # the paper's aggregate PFLOP/s is TFLOP/s per GPU x GPUs (the per-GPU figure rounded to
    # 1 TFLOP/s, the aggregate to 0.1 PF/s), its percentage of the A100's 312 TFLOP/s peak
    # rounded to 1 %; w x t x p = GPUs and m b w = B
    df = load_sc21()
    assert len(df) == 10
    rounding = 0.5 * df.gpus / 1e3 + 0.05
    assert ((df.tflops_per_gpu * df.gpus / 1e3 - df.aggregate_pflops).abs() <= rounding).all()
    assert ((df.tflops_per_gpu / 312 * 100 - df.pct_peak).abs() <= 0.5).all()
    assert (df.data_parallel * df.tensor_parallel * df.pipeline_parallel == df.gpus).all()
    assert (df.microbatches * df.microbatch_size * df.data_parallel == df.global_batch).all()


def test_vtrain_all_reduce_table_drives_the_engine():
    # vTrain's measured A100 all-reduce (trace/a100/AR_GPU2_1M_1024M_LUT), shipped in the DGX
    # A100 presets: 4 MiB over 2 GPUs in 61.18 us, 8 MiB in 86.9 us; between them linear in
    # bytes (sim.hardware.comm_tables); --collectives model drops the tables
    topo = load_hardware("dgx-a100-40gb")
    plan = collective_plan(topo, ("gpu0", "gpu1"))
    assert plan.time_s(4 * 2**20, "allreduce") == pytest.approx(61.18e-6)
    assert plan.time_s(6 * 2**20, "allreduce") == pytest.approx(72.72e-6)
    assert plan.time_s(7 * 2**20, "allreduce") == pytest.approx((72.72e-6 + 86.9e-6) / 2)
    assert {t.ranks for t in topo.collectives} == set(range(2, 9))
    assert load_hardware(model_hardware("dgx-a100-40gb")).collectives == ()


def test_preset_tables_are_the_published_lut():
    # the preset's tables hold exactly validation/vtrain/allreduce_lut.csv (provenance)
    lut = pd.read_csv(ROOT / "validation" / "vtrain" / "allreduce_lut.csv")
    topo = load_hardware("dgx-a100-80gb")
    for n, grp in lut.groupby("gpus"):
        (table,) = [t for t in topo.collectives if t.ranks == n]
        assert table.sizes_bytes == tuple(float(b) for b in grp.bytes)
        assert table.times_s == pytest.approx(tuple(grp.time_us * 1e-6))

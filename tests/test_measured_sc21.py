"""Megatron-LM's SC'21 Table 1 as the benchmark reads it (benchmarks/measured_sc21.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.measured_sc21 import eq3_flops, load_sc21, tflops_per_gpu


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

"""`sim run`'s FLOP figures say where they come from (results.csv, winner.yaml,
tflops_per_gpu.csv): the FLOP count's formula and the peak MFU divides by."""

from __future__ import annotations

import pandas as pd
import pytest

import sim.api
from sim.compute.model_flops import FORMULA
from sim.config.load import parse_experiment
from sim.hardware import load_hardware
from sim.plan.point_row import flops_source
from sim.point.rows import ResultRow
from sim.report.memory_summary import NARAYANAN_SOURCE, narayanan_flops, tflops_per_gpu
from sim.report.outputs import winner_config
from tests.helpers import small_gpt2_1f1b

SMALL = small_gpt2_1f1b(global_batch=64)


def test_flops_source_names_the_formula_and_the_datasheet_peak():
    gpu = load_hardware("dgx1-v100-16gb").gpus[0]
    peak = "V100-SXM2-16GB's 125 TFLOP/s fp16 dense peak (datasheet, the hardware description)"
    assert flops_source(gpu, "fp16") == f"{FORMULA}; peak: {peak}"
    assert "15.7 TFLOP/s fp32" in flops_source(gpu, "fp32")  # the non-tensor-core peak


def test_a_simulated_row_carries_its_flops_source_and_winner_yaml_keeps_it():
    win = sim.api.plan(SMALL).winners["gpt"]
    assert win.mfu is not None and win.mfu == pytest.approx(win.flops_per_s_per_gpu / 125e12)
    assert win.flops_source == flops_source(load_hardware("dgx1-v100-16gb").gpus[0], "fp16")
    assert "flops_source" in ResultRow.model_fields  # so a results.csv column
    prediction = winner_config(parse_experiment(SMALL), "x.yaml", win)["prediction"]
    assert prediction["flops_source"] == win.flops_source


def test_tflops_per_gpu_csv_names_narayanans_formula():
    shape = {"seq_len": 1024, "layers": 2, "hidden": 64, "vocab": 100}
    row = dict(model="m", parameters=1, memory_policy="none", fits=True, iteration_time_s=2.0)
    row.update(global_batch=4, stages=2, dp_width=1, tensor_parallel=1)
    table = tflops_per_gpu(pd.DataFrame([row]), {"m": shape})
    assert table["tflops_per_gpu"].iloc[0] == pytest.approx(
        narayanan_flops(4, 1024, 2, 64, 100) / 2.0 / 2 / 1e12
    )
    assert list(table["flops_source"]) == [NARAYANAN_SOURCE]
    assert "eq. 3" in NARAYANAN_SOURCE and "recompute" in NARAYANAN_SOURCE

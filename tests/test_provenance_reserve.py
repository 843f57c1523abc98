"""`sim run`'s ``peak_reserve_bytes`` says where it comes from (results.csv, winner.yaml):
``peak_reserve_source`` names the runtime reserve's, the allocator margin's and the framework
buffers' sources, the three ledger categories the column sums."""

from __future__ import annotations

import sim.api
from sim.config.load import parse_experiment
from sim.hardware import load_hardware
from sim.hardware.capacity import NO_RESERVE, RuntimeReserve
from sim.hardware.provenance import reserve_source
from sim.memory.peak import ROW_CATEGORIES
from sim.memory.rank_memory import BUFFERS_SOURCE
from sim.memory.tensor_program import MARGIN_SOURCE
from sim.plan.point_row import peak_reserve_source
from sim.point.rows import ResultRow
from sim.report.console import reserve_text
from sim.report.outputs import winner_config
from tests.helpers import small_gpt2_1f1b

SMALL = small_gpt2_1f1b(global_batch=16)


def test_peak_reserve_source_names_each_summed_category():
    assert ROW_CATEGORIES["peak_reserve_bytes"] == ("reserve", "allocator", "framework")
    rv = RuntimeReserve()
    text = peak_reserve_source(rv)
    assert text == f"runtime reserve: {reserve_source(rv)}; {MARGIN_SOURCE}; {BUFFERS_SOURCE}"
    assert "CUDA context 400 MiB: assumption" in text
    assert "CUDACachingAllocator" in text and "(assumption)" in MARGIN_SOURCE


def test_peak_reserve_source_of_a_fixed_margin_and_of_a_bare_model():
    fixed = peak_reserve_source(RuntimeReserve(allocator_margin=0.2))
    assert "allocator margin: 0.2 x the activation bytes (set by the hardware description)" in fixed
    bare = peak_reserve_source(NO_RESERVE)
    assert "runtime reserve: none:" in bare
    assert "allocator margin: none" in bare and "framework buffers: none" in bare


def test_a_simulated_row_and_winner_yaml_carry_peak_reserve_source():
    win = sim.api.plan(SMALL).winners["gpt"]
    gpu = load_hardware("dgx1-v100-16gb").gpu(int(win.tightest_gpu.removeprefix("gpu")))
    assert win.peak_reserve_bytes is not None and win.peak_reserve_bytes > 0
    assert win.peak_reserve_source == peak_reserve_source(gpu.reserve)
    assert "peak_reserve_source" in ResultRow.model_fields  # so a results.csv column
    prediction = winner_config(parse_experiment(SMALL), "x.yaml", win)["prediction"]
    assert prediction["peak_reserve_source"] == win.peak_reserve_source


def test_the_console_names_the_winners_reserve_and_its_source():
    win = sim.api.plan(SMALL).winners["gpt"]
    gib = f"{win.peak_reserve_bytes / 2**30:.2f} GiB"
    text = reserve_text(win)
    assert text == (
        f"reserve at {win.tightest_gpu}'s peak (the tightest GPU) {gib}: runtime reserve, "
        "allocator margin and framework buffers; their sources and assumptions: results.csv "
        "peak_reserve_source"
    )
    assert win.peak_reserve_source  # the full text is in results.csv (and the console with -v)

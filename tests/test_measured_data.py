"""The measured datasets as benchmarks/accuracy/bench_measured.py reads them: Megatron-LM's SC'21 Table 1
(benchmarks/accuracy/measured_sc21.py) and vTrain's all-reduce table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.accuracy.measured_sc21 import eq3_flops, load_sc21, tflops_per_gpu
from benchmarks.accuracy.vtrain_predict import model_hardware, row_hardware
from benchmarks.accuracy.vtrain_rows import COLUMNS, RowsError, load_vtrain
from sim.comm.hierarchical import collective_plan
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


def test_dgx_b200_collectives_are_simumax_measured_node():
    # SimuMax's fitted B200 collectives (b200_bf16_ceperm.json high_intra_node, formula of
    # SystemConfig.compute_net_op_time), by hand: an 8-rank all-gather of B = 64 MiB moves
    # 7/8 B at 900 GiB/s x 0.6735 = 650.85 GB/s (90.22 us) after 9.1828 us x 7 + 23.1049 us
    # (87.38 us); 32 MiB: 45.11 + 87.38 us (the table is linear in bytes between its sizes); a
    # 2-rank all-reduce of 4 MiB: 2 x 1/2 x 4 MiB at 900 GiB/s x 0.7424 (5.85 us) after
    # 5.5183 x 2 + 22.2316 us (33.27 us)
    topo = load_hardware("dgx-b200")
    eight = collective_plan(topo, tuple(f"gpu{i}" for i in range(8)))
    rate = 900 * 2**30 * 0.6735
    fixed = (9.1828 * 7 + 23.1049) * 1e-6
    assert eight.time_s(64 * 2**20, "all_gather") == pytest.approx(
        64 * 2**20 * 7 / 8 / rate + fixed, rel=1e-3
    )
    assert eight.time_s(32 * 2**20, "all_gather") == pytest.approx(
        32 * 2**20 * 7 / 8 / rate + fixed, rel=1e-3
    )
    two = collective_plan(topo, ("gpu0", "gpu1"))
    ar = 4 * 2**20 / (900 * 2**30 * 0.7424) + (5.5183 * 2 + 22.2316) * 1e-6
    assert two.time_s(4 * 2**20, "allreduce") == pytest.approx(ar, rel=1e-3)
    assert {(t.kind, t.ranks) for t in topo.collectives} == {
        (k, n) for k in ("allreduce", "all_gather", "reduce_scatter", "alltoall") for n in (2, 4, 8)
    }


def test_preset_tables_are_the_published_lut():
    # the preset's tables hold exactly measurements/vtrain/allreduce_lut.csv (provenance)
    lut = pd.read_csv(ROOT / "measurements" / "vtrain" / "allreduce_lut.csv")
    topo = load_hardware("dgx-a100-80gb")
    for n, grp in lut.groupby("gpus"):
        (table,) = [t for t in topo.collectives if t.ranks == n]
        assert table.sizes_bytes == tuple(float(b) for b in grp.bytes)
        assert table.times_s == pytest.approx(tuple(grp.time_us * 1e-6))


def _rows(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "rows.csv"
    path.write_text(",".join(COLUMNS) + "\n" + "\n".join(lines) + "\n")
    return path


def test_rows_of_another_file_get_their_microbatch_count(tmp_path):
    # m = B / (b w): 64 / (2 x 4) = 8
    df = load_vtrain(_rows(tmp_path, "16,64,2,1024,16,24,1024,2,4,2,300.5"))
    assert df.microbatches.tolist() == [8]
    assert df.iteration_time_ms.tolist() == [300.5]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("15,64,2,1024,16,24,1024,2,4,2,300", "row 2: gpus must be"),  # 2 x 2 x 4 = 16
        ("16,60,2,1024,16,24,1024,2,4,2,300", "row 2: gpus must be"),  # 60 % 8 != 0
        ("16,64,0,1024,16,24,1024,2,4,2,300", "row 2: 0 is not a positive number"),
        ("16,64,x,1024,16,24,1024,2,4,2,300", "row 2: 'x' is not a positive number"),
    ],
)
def test_bad_rows_are_named(tmp_path, line, says):
    with pytest.raises(RowsError, match=says):
        load_vtrain(_rows(tmp_path, line))


def test_missing_column_is_named(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("gpus,global_batch\n8,8\n")
    with pytest.raises(RowsError, match="missing column.*microbatch_size"):
        load_vtrain(path)


def test_rows_over_one_server_run_on_the_fewest_servers():
    assert row_hardware("dgx-a100-40gb", 8, 8) == "dgx-a100-40gb"
    assert row_hardware("dgx-a100-40gb", 9, 8) == "2x-dgx-a100-40gb"
    assert row_hardware("dgx-a100-40gb", 64, 8) == "8x-dgx-a100-40gb"
    spec = row_hardware(model_hardware("dgx-a100-40gb"), 16, 8)
    assert spec["base"] == "2x-dgx-a100-40gb" and spec["collectives"] == []
    assert load_hardware(spec).num_gpus == 16


def test_a_calibrated_file_is_not_repeated_into_servers():
    # `Nx-` repeats presets only: a row larger than a calibrated machine is not predicted
    calibrated = str(ROOT / "sim" / "hardware" / "calibrated" / "cpu-2rank.yaml")
    assert row_hardware(calibrated, 2, 2) == calibrated
    assert row_hardware(calibrated, 4, 2) is None

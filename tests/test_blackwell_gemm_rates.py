"""The Blackwell presets' GEMM efficiencies per format from Transformer Engine's own GEMM
benchmark, and SimuMax's B200 node as a shipped overlay its rows run with (issue 26).

Sources: NVIDIA/TransformerEngine@d0067d0 docs/examples/gemm_profiling/gemm_profiling.rst
(B300 SXM6 AC, --pre-quantize, per-layer ms: BF16 13.102, FP8 current 6.812, NVFP4 3.764);
MAMF, stas00/ml-engineering@744d01e compute/accelerator/README.md (TFLOPS: BF16 B200 1745.0,
B300 1769.0, GB200 1822; FP8 e4m3 B200 3432.5, B300 3353.3, GB200 3615.6); SimuMax's
b200_bf16_ceperm.json matmul efficient_factor 0.4878.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.hardware.loader import load_hardware
from sim.hardware.overlay import bundled_overlay, list_overlays
from sim.import_runs import hardware_of
from sim.runs.express import express
from sim.runs.predict import Predictor
from sim.runs.readers import read_runs

# one layer's 12 GEMMs, 2 M K N each: 3 passes x 2 x 15872 x (4096 x 12288 + 4096 x 4096 +
# 4096 x 16384 + 16384 x 4096 = 201,326,592)
FLOPS = 3 * 2 * 15872 * 201_326_592
TE_TFLOPS = {f: FLOPS / (ms * 1e-3) / 1e12 for f, ms in
             (("bf16", 13.102), ("fp8", 6.812), ("nvfp4", 3.764))}  # fmt: skip
FP4_OVER_FP8 = 6.812 / 3.764


def _gpu(preset: str):
    return load_hardware(preset).gpus[0].compute


def test_te_benchmark_flop_rates_by_hand():
    assert FLOPS == 19_172_734_009_344
    assert TE_TFLOPS["bf16"] == pytest.approx(1463.34, abs=0.01)
    assert TE_TFLOPS["fp8"] == pytest.approx(2814.55, abs=0.01)
    assert TE_TFLOPS["nvfp4"] == pytest.approx(5093.71, abs=0.01)


def test_b300_runs_te_measured_rates():
    b300 = _gpu("dgx-b300")
    for fmt in ("bf16", "fp8", "nvfp4"):
        rate = b300.matmul_rate(fmt) / 1e12
        assert rate == pytest.approx(TE_TFLOPS[fmt], rel=1e-3)  # rounded to 3 digits
    assert b300.matmul_rate("mxfp8") == b300.matmul_rate("fp8")


@pytest.mark.parametrize(
    ("preset", "bf16_mamf", "fp8_mamf", "bf16_peak", "fp8_peak", "fp4_peak"),
    [("dgx-b200", 1745.0, 3432.5, 2250, 4500, 9000),
     ("gb200-nvl72", 1822.0, 3615.6, 2500, 5000, 10000)],
)  # fmt: skip
def test_b200_and_gb200_move_te_rates_by_mamf(preset, bf16_mamf, fp8_mamf, bf16_peak, fp8_peak,
                                              fp4_peak):  # fmt: skip
    # the B300 fraction of peak x (this GPU's MAMF fraction / B300's), per format
    gpu = _gpu(preset)
    bf16 = TE_TFLOPS["bf16"] / 2250 * (bf16_mamf / bf16_peak) / (1769.0 / 2250)
    fp8 = TE_TFLOPS["fp8"] / 4500 * (fp8_mamf / fp8_peak) / (3353.3 / 4500)
    assert gpu.matmul_efficiency == pytest.approx(bf16, abs=5e-4)
    assert gpu.low_rate("fp8").efficiency == pytest.approx(fp8, abs=5e-4)
    # NVFP4: TE's NVFP4 speed-up over FP8 (1.810) on this GPU's FP8 rate
    fp4 = fp8 * fp8_peak * FP4_OVER_FP8 / fp4_peak
    assert gpu.low_rate("nvfp4").efficiency == pytest.approx(fp4, abs=5e-4)


def test_gb300_runs_b300_fractions_of_its_own_peaks():
    # GB300 is B300's GPU (sm_103): TE's B300 rates as fractions of the B300 datasheet peaks
    # (2250 / 4500 / 14000), rounded to 3 digits, of GB300's peaks (2500 / 5000 / 15000)
    gb300 = _gpu("gb300-nvl72")
    for fmt, b300_peak, gb300_peak in (("bf16", 2250, 2500), ("fp8", 4500, 5000),
                                       ("mxfp8", 4500, 5000)):  # fmt: skip
        te = TE_TFLOPS["fp8" if fmt == "mxfp8" else fmt]
        frac = round(te / b300_peak, 3)
        assert gb300.matmul_rate(fmt) / 1e12 == pytest.approx(frac * gb300_peak, rel=1e-9)
    assert gb300.matmul_efficiency == 0.650 and gb300.low_rate("fp8").efficiency == 0.625


def test_gb300_nvfp4_is_the_b300_sustained_random_data_bound():
    # B300 (same sm_103 silicon) at 1100 W, NVFP4 16384 x 16384 x 15360 on random data, 5,000
    # iterations: 6902 TFLOPS (QuickRunCUDA NVFP4_CUTEDSL_THROTTLE_DEEP_DIVE.md); GB300 at 1400 W
    # runs at least that. B300's TE fraction (0.364) would put GB300 below it: 5460 < 6902
    gb300 = _gpu("gb300-nvl72").low_rate("nvfp4")
    b300_fraction_on_gb300 = round(TE_TFLOPS["nvfp4"] / 14000, 3) * 15000
    assert b300_fraction_on_gb300 == pytest.approx(5460) and b300_fraction_on_gb300 < 6902
    assert gb300.efficiency == round(6902 / 15000, 3) == 0.460
    assert gb300.peak_flops * gb300.efficiency / 1e12 == pytest.approx(6902, rel=1e-3)


def test_simumax_node_is_a_shipped_overlay():
    assert "simumax-b200" in list_overlays()
    assert bundled_overlay("simumax-b200") == {"gpu": {"matmul_efficiency": 0.488}}


def test_simumax_rows_run_on_their_node_and_others_on_the_preset(tmp_path):
    sample = tmp_path / "rows.csv"
    lines = (Path(__file__).parent / "data" / "runs" / "measured_sample.csv").read_text()
    lines = lines.splitlines()
    row = lines[1]
    sample.write_text("\n".join([lines[0], row, "simumax_b200_v1_2" + row[len("pipesim_test") :]]))
    plain, simumax = read_runs(sample)
    assert plain.hardware_overlay == "" and simumax.hardware_overlay == "simumax-b200"
    pred = Predictor()
    a, b = express(plain), express(simumax)
    assert a.hardware == b.hardware == "dgx-b200" and a.key != b.key
    assert pred.topology(a.hardware, a.overlay).gpus[0].compute.matmul_efficiency == 0.642
    assert pred.topology(b.hardware, b.overlay).gpus[0].compute.matmul_efficiency == 0.488
    # sim import writes the node as an inline hardware over the preset
    assert hardware_of(a) == "dgx-b200"
    assert hardware_of(b) == {"base": "dgx-b200", "gpu": {"matmul_efficiency": 0.488}}
    # the same run on the slower node takes longer
    ta, tb = pred.predict(a).iteration_time_s, pred.predict(b).iteration_time_s
    assert ta is not None and tb is not None and tb > ta

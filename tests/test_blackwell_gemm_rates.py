"""The Blackwell presets' GEMM efficiencies per format from Transformer Engine's own GEMM
benchmark, and SimuMax's B200 node as a shipped overlay its rows run with (issue 26).

Sources: NVIDIA/TransformerEngine@d0067d0 docs/examples/gemm_profiling/gemm_profiling.rst
(B300 SXM6 AC, --pre-quantize, per-layer ms: BF16 13.102, FP8 current 6.812, MXFP8 7.161,
NVFP4 3.764);
MAMF, stas00/ml-engineering@744d01e compute/accelerator/README.md (TFLOPS: BF16 B200 1745.0,
B300 1769.0, GB200 1822; FP8 e4m3 B200 3432.5, B300 3353.3, GB200 3615.6); SimuMax's
b200_bf16_ceperm.json matmul efficient_factor 0.4878; B300 zero-filled against random-data rates
at its 1100 W limit, ademeure/QuickRunCUDA b300_clean (B300_TRUE_REFERENCE.md @0992a72 §2,
NVFP4_CUTEDSL_THROTTLE_DEEP_DIVE.md @2070c70), for GB300.
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
             (("bf16", 13.102), ("fp8", 6.812), ("mxfp8", 7.161), ("nvfp4", 3.764))}  # fmt: skip
FP4_OVER_FP8 = 6.812 / 3.764


def _gpu(preset: str):
    return load_hardware(preset).gpus[0].compute


def test_te_benchmark_flop_rates_by_hand():
    assert FLOPS == 19_172_734_009_344
    assert TE_TFLOPS["bf16"] == pytest.approx(1463.34, abs=0.01)
    assert TE_TFLOPS["fp8"] == pytest.approx(2814.55, abs=0.01)
    assert TE_TFLOPS["mxfp8"] == pytest.approx(2677.38, abs=0.01)
    assert TE_TFLOPS["nvfp4"] == pytest.approx(5093.71, abs=0.01)


def test_b300_runs_te_measured_rates():
    b300 = _gpu("dgx-b300")
    for fmt in ("bf16", "fp8", "mxfp8", "nvfp4"):
        rate = b300.matmul_rate(fmt) / 1e12
        assert rate == pytest.approx(TE_TFLOPS[fmt], rel=1e-3)  # rounded to 3 digits


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


# B300 at its 1100 W limit, zero-filled against random data (QuickRunCUDA b300_clean): cuBLAS
# 8192^3 BF16 2246 / 1883, FP8 4393 / 3984 (B300_TRUE_REFERENCE.md §2); NVFP4 16384 x 16384 x
# 15360, CuTe DSL, 5,000 iterations, 8112 / 6902 (NVFP4_CUTEDSL_THROTTLE_DEEP_DIVE.md)
POWER_LIMIT_LOSS = {"bf16": 2246 / 1883, "fp8": 4393 / 3984, "nvfp4": 8112 / 6902}


def test_gb300_runs_b300_rates_with_their_power_limit_loss_bought_back():
    # GB300 is B300's GPU (sm_103) at 1400 W: TE's B300 rate of each format times what B300's
    # 1100 W limit costs it on random data, as a fraction of GB300's peak (rounded to 3 digits)
    gb300 = _gpu("gb300-nvl72")
    for fmt, peak, eff in (("bf16", 2500, 0.698), ("fp8", 5000, 0.621), ("nvfp4", 15000, 0.399)):
        assert round(TE_TFLOPS[fmt] * POWER_LIMIT_LOSS[fmt] / peak, 3) == eff
        rate = gb300.matmul_rate(fmt) / 1e12
        assert rate == pytest.approx(TE_TFLOPS[fmt] * POWER_LIMIT_LOSS[fmt], rel=1e-3)
    assert gb300.matmul_efficiency == 0.698
    # MXFP8: TE's B300 rate x FP8's power-limit loss (assumption), 2677.38 x 1.10266 / 5000
    assert round(2677.38 * 4393 / 3984 / 5000, 3) == 0.590
    assert gb300.low_rate("mxfp8").efficiency == 0.590
    # B300's fraction of its datasheet peak on GB300's (until issue 26 item 6): x 15000 / 14000,
    # less than the x 1.175 NVFP4 loses to B300's power limit
    assert round(TE_TFLOPS["nvfp4"] / 14000, 3) * 15000 == pytest.approx(5460)


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

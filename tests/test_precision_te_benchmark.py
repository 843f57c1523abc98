"""Low precision against Transformer Engine's own GEMM benchmark (issue 26 item 1): the cast
bytes of its autocast mode, hand-computed, and the Blackwell presets' MXFP8 GEMM rate it
measures (benchmarks/accuracy/bench_te_gemm_profile.py prints the timings)."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.bench_te_gemm_profile import autocast_cast_bytes, layer_shapes
from sim.hardware.loader import load_hardware

TE_FP8_CURRENT_MS, TE_MXFP8_MS = 6.812, 7.161
"""Per-layer pre-quantized GEMM ms on B300 (TransformerEngine@d0067d0
docs/examples/gemm_profiling/gemm_profiling.rst line 148)."""


def test_te_benchmark_runs_twelve_gemms_of_one_layer():
    shapes = layer_shapes()
    assert len(shapes) == 12
    assert shapes[0] == (15872, 4096, 12288)  # QKV forward
    assert shapes[4] == (15872, 12288, 4096)  # QKV input gradient: K and N swapped
    assert shapes[8] == (4096, 15872, 12288)  # QKV weight gradient: M is the hidden size


def test_te_benchmark_autocast_cast_bytes_hand_computed():
    # inputs [M, K] of the 12 calls: 15872 x (28672 + 36864 + 28672) = 1,495,269,376 elements;
    # weights [K, N]: 201,326,592 (forward) + 201,326,592 (input gradient)
    # + 15872 x 36864 = 585,105,408 (weight gradient) = 987,758,592 elements.
    inputs, weights = 1_495_269_376, 987_758_592
    # current scaling on Blackwell: amax read 2 + cast read 2 + one FP8 copy 1 = 5 B each
    assert autocast_cast_bytes("fp8-tensorwise") == pytest.approx(5 * (inputs + weights))
    # MXFP8: input read 2 + row- and column-wise copies 2 x (1 + 1/32) = 4.0625 B;
    # weight (row-wise only, the input needs no gradient) 2 + 1.03125 = 3.03125 B
    assert autocast_cast_bytes("mxfp8") == pytest.approx(4.0625 * inputs + 3.03125 * weights)
    assert autocast_cast_bytes("bf16") == 0.0


@pytest.mark.parametrize("preset", ["dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72"])
def test_blackwell_mxfp8_gemms_at_te_measured_fraction_of_fp8(preset):
    # TE's B300 benchmark runs the same 12 GEMMs in 7.161 ms in MXFP8 and 6.812 ms with
    # per-tensor FP8, the MXFP8 calls swizzling both operands' scales as training's TE 2.6-2.17
    # does (sim.compute.precision): MXFP8 at 6.812 / 7.161 = 0.9513 of the FP8 rate, same peak
    # (each preset's efficiency rounded to 3 digits)
    spec = load_hardware(preset).gpus[0].compute
    fp8, mx = spec.low_rate("fp8"), spec.low_rate("mxfp8")
    assert TE_FP8_CURRENT_MS / TE_MXFP8_MS == pytest.approx(0.9513, abs=1e-4)
    assert mx.peak_flops == fp8.peak_flops
    assert mx.efficiency == pytest.approx(fp8.efficiency * 0.9513, abs=1e-3)

"""Transformer Engine GroupedLinear's per-expert loop on the device (issue 26): the floor per
expert GEMM SimuMax measured (sim.compute.measured) and the per-expert casts of split_quantize
(sim.compute.quantize), each with a hand-computed case."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.kernels import BACK_TO_BACK_S, gemm_time_s, kernel_time_s
from sim.compute.measured import TE_LOOP_GEMM_FLOOR_S
from sim.compute.moe import grouped
from sim.compute.precision import get_recipe
from sim.compute.quantize import quantize_layer
from sim.hardware.loader import load_hardware


def _gpu(preset: str):
    gpu = load_hardware(preset).gpus[0].compute
    assert gpu is not None
    return gpu


def test_a_small_expert_gemm_of_te_loop_takes_at_least_the_measured_floor():
    """8 experts of 64 rows, [64, 512] @ [512, 1024] in MXFP8 on a B200: 67 MFLOP each would take
    well under a microsecond at any measured rate, but TE's loop costs 8.6 us per GEMM
    (SimuMax: 154 and 308 rows of (5120, 1536) take the same time per GEMM), so 8 x 8.6 us
    plus the kernel overhead; the same GEMM in TE's fused grouped MLP (no loop) and on an H100
    (no table) have no floor."""
    b200 = _gpu("dgx-b200")
    up = grouped("expert_up[64]", 64, 1024, 512, 2, 8, "fwd")
    low = replace(up, precision="mxfp8")
    measured = 2 * 154 * 5120 * 1536 / (0.125 * 2250e12)
    assert TE_LOOP_GEMM_FLOOR_S == pytest.approx(measured, rel=1e-2)
    want = b200.kernel_overhead_s + 8 * 8.6e-6
    assert kernel_time_s(low, b200, "bf16") == pytest.approx(want)
    fused = grouped("expert_up[64]", 64, 1024, 512, 2, 8, "fwd", fused=True)
    assert kernel_time_s(fused, b200, "bf16") == pytest.approx(gemm_time_s(fused, b200, "bf16"))
    assert kernel_time_s(fused, b200, "bf16") < want / 4
    h100 = _gpu("dgx-h100")
    assert kernel_time_s(up, h100, "bf16") == pytest.approx(gemm_time_s(up, h100, "bf16"))


def test_grouped_experts_cast_per_expert_under_mxfp8_and_once_under_delayed_scaling():
    """Two row groups: 2 experts of 128 rows and 1 of 256, [n, 64] @ [64, 32], on a B200. MXFP8
    casts each expert's input apart: one kernel of (2 x 128 + 256) x 64 = 32768 elements (the
    groups' inputs summed) standing for 3 launches, timed as the kernel overhead, 2 x 0.56 us
    and its bytes at the HBM rate; its output gradients likewise. Delayed scaling's fused
    multi-cast is one launch."""
    b200 = _gpu("dgx-b200")
    fwd = [grouped("expert_up[128]", 128, 32, 64, 2, 2, "fwd"),
           grouped("expert_up[256]", 256, 32, 64, 2, 1, "fwd")]  # fmt: skip
    bwd = [grouped("d_expert_up_in[128]", 128, 64, 32, 2, 2, "dgrad"),
           grouped("d_expert_up_in[256]", 256, 64, 32, 2, 1, "dgrad")]  # fmt: skip
    mx = get_recipe("mxfp8")
    f, i, _ = quantize_layer((fwd, bwd, []), mx, b200.low_rate("mxfp8"))
    cast = next(k for k in f if k.name == "quantize_expert_up")
    dcast = next(k for k in i if k.name == "quantize_dgrad_expert_up")
    assert (cast.batch, dcast.batch) == (3, 3)
    per = 2 + 2 * (1 + 1 / 32)  # read bf16, write row- and column-wise MXFP8 with E8M0 scales
    assert cast.bytes == pytest.approx(32768 * per)
    want = b200.kernel_overhead_s + 2 * BACK_TO_BACK_S + cast.bytes / b200.hbm_rate_Bps()
    assert kernel_time_s(cast, b200, "bf16") == pytest.approx(want)
    delayed = get_recipe("fp8-delayed")
    f, _, _ = quantize_layer((fwd, bwd, []), delayed, b200.low_rate("fp8"))
    assert next(k for k in f if k.name == "quantize_expert_up").batch == 1


def test_an_mxfp8_expert_weight_gradient_takes_at_least_its_fp32_main_grad_traffic():
    """DeepSeek-V3's up projection at 128 rows, 32 experts, weight gradient in MXFP8 on a B200:
    the measured 16-bit fraction (0.077 of 2250 TFLOPS on SimuMax's node) scaled by MXFP8's rate
    would take about 0.53 ms, but accumulating into each expert's fp32 main_grad reads and
    writes 32 x 4096 x 7168 x 8 bytes = 7.5 GB, 1.41 ms at 0.666 of 8 TB/s (SimuMax measured
    the 16-bit GEMM itself at that traffic: 43.1 us per expert)."""
    b200 = _gpu("dgx-b200")
    wgrad = replace(
        grouped("d_expert_up_w[128]", 7168, 4096, 128, 2, 32, "wgrad"), precision="mxfp8"
    )
    traffic = 32 * 4096 * 7168 * 8 / (8e12 * 0.666)
    assert traffic == pytest.approx(1.411e-3, rel=1e-3)
    assert kernel_time_s(wgrad, b200, "bf16") == pytest.approx(b200.kernel_overhead_s + traffic)

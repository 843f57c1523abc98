"""cuDNN's measured causal attention at head dim 128 (sim.compute.cudnn_attention): GB300 at the
benchmark's FLOP/s, FP8 formats on the B200 family at the BF16 table times the measured format
ratio; hand-computed from the published CSV rows (NVIDIA/cudnn-frontend@3929da2)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.cudnn_attention import rate_flops
from sim.compute.kernels import kernel_time_s
from sim.compute.measured import attention_efficiency
from sim.hardware.loader import load_hardware


def _gpu(preset: str):
    gpu = load_hardware(preset).gpus[0].compute
    assert gpu is not None
    return gpu


def _pair(b: int, heads: int, hd: int = 128):
    """Forward and backward flash kernels of ``b`` samples x ``heads`` heads at 4096 tokens."""
    args = ("flash", b, 4096, heads * hd, heads, 2)
    return (attention_fwd(*args, causal=True, dropout=False)[0],
            attention_bwd(*args, causal=True, dropout=False)[0])  # fmt: skip


def test_gb300_mxfp8_backward_runs_at_cudnns_1143_tflops():
    """8 samples x 32 heads (Qwen3-30B-A3B at micro-batch 8), 4K tokens, MXFP8 attention:
    backward FLOPs 2.5 x 4 b s^2 h / 2 = 2.5 x 2 x 8 x 4096^2 x 4096 = 2.75e12 at the CSV's
    1143 TFLOPS (GB300, top_left, mxfp8, bwd): 2.405 ms; the forward at 2272 TFLOPS."""
    gb300 = _gpu("gb300-nvl72")
    fwd, bwd = (replace(k, precision="mxfp8") for k in _pair(8, 32))
    assert bwd.flops == pytest.approx(2.5 * 2 * 8 * 4096**2 * 4096)
    want = gb300.kernel_overhead_s + max(bwd.flops / 1143e12, bwd.bytes / gb300.hbm_rate_Bps())
    assert kernel_time_s(bwd, gb300, "bf16") == pytest.approx(want)
    assert rate_flops(fwd, gb300, "bf16") == pytest.approx(2272e12)


def test_gb300_bf16_below_the_measured_heads_falls_as_the_b200_table():
    """2 x 32 = 64 heads (half the benchmark's 128) at 4K, BF16 forward: 1703 TFLOPS times the
    B200 table's 0.872 / 0.997 (64 against 128 heads at 4096)."""
    fwd, _ = _pair(2, 32)
    assert rate_flops(fwd, _gpu("gb300-nvl72"), "bf16") == pytest.approx(1703e12 * 0.872 / 0.997)


def test_b200_fp8_attention_is_the_bf16_table_times_the_measured_format_ratio():
    """4 x 32 = 128 heads at 4K on B200: the SimuMax BF16 factors 0.997 / 0.832 (halved for the
    causal mask) of 2250 TFLOPS, times GB200's MXFP8 / BF16 ratio 1685 / 1408 forward and
    1054 / 1148 backward; in BF16 this table does not time it (the B200 table does)."""
    b200 = _gpu("dgx-b200")
    fwd, bwd = _pair(4, 32)
    assert rate_flops(fwd, b200, "bf16") is None
    fwd8, bwd8 = (replace(k, precision="mxfp8") for k in (fwd, bwd))
    assert rate_flops(fwd8, b200, "bf16") == pytest.approx(0.997 / 2 * 2250e12 * 1685 / 1408)
    assert rate_flops(bwd8, b200, "bf16") == pytest.approx(0.832 / 2 * 2250e12 * 1054 / 1148)


def test_fp8_ratio_is_taken_at_the_kernels_length_interpolated_in_log2():
    """16 heads at 8192 tokens on GB200 (the ratio's table): MXFP8 forward 1902 against BF16
    1574 TFLOPS, backward 1287 against 1332, FP8 forward 2047 / 1574, times the kernel's BF16
    rate from the B200 table; at 5792 tokens (2^12.5 within 1e-5), between 4096 (1685 / 1408)
    and 8192, the ratio of the TFLOPS interpolated halfway."""
    gb200 = _gpu("gb200-nvl72")
    args = ("flash", 1, 8192, 16 * 128, 16, 2)
    fwd = attention_fwd(*args, causal=True, dropout=False)[0]
    bwd = attention_bwd(*args, causal=True, dropout=False)[0]

    def bf16(k):
        eff = attention_efficiency(k, gb200, "bf16")
        assert eff is not None
        return eff * gb200.peak_flops("bf16")

    for k, fmt, ratio in ((fwd, "mxfp8", 1902 / 1574), (bwd, "mxfp8", 1287 / 1332),
                          (fwd, "fp8", 2047 / 1574)):  # fmt: skip
        assert rate_flops(replace(k, precision=fmt), gb200, "bf16") == pytest.approx(
            bf16(k) * ratio
        )
    mid = replace(fwd, m=int(2**12.5), n=int(2**12.5))
    ratio = ((1685 + 1902) / 2) / ((1408 + 1574) / 2)
    got = rate_flops(replace(mid, precision="mxfp8"), gb200, "bf16")
    assert got == pytest.approx(bf16(mid) * ratio, rel=1e-5)


def test_other_head_dims_are_not_covered():
    """Head dim 256 is neither the measured 128 nor a 64-wide head (below): None."""
    fwd, _ = _pair(2, 64, hd=256)
    assert rate_flops(replace(fwd, precision="mxfp8"), _gpu("gb300-nvl72"), "bf16") is None


def test_gb300_64_wide_heads_run_at_the_gb300_table_times_fa4s_ratio():
    """GPT-OSS's full-attention kernel at micro-batch 4 (4 x 64 = 256 heads of 64, 4K tokens)
    on GB300: forward 1703 TFLOPS (the BF16 table at 4K, 256 >= 128 heads: no scaling) x FA4's
    64/128 forward ratio 708 / 1062, backward 1248 (the 128-wide rate); an MXFP8 forward keeps
    that BF16 speed, an MXFP8 backward is left to fp8_attention_speed (None); GB200 keeps the
    B200 table (None here). Before, the flat 0.70 x 2500 = 1750 TFLOPS timed both passes."""
    gb300 = _gpu("gb300-nvl72")
    fwd, bwd = _pair(4, 64, hd=64)
    want_fwd = 1703e12 * 708 / 1062
    assert rate_flops(fwd, gb300, "bf16") == pytest.approx(want_fwd)
    assert rate_flops(bwd, gb300, "bf16") == pytest.approx(1248e12)
    assert rate_flops(replace(fwd, precision="mxfp8"), gb300, "bf16") == pytest.approx(want_fwd)
    assert rate_flops(replace(bwd, precision="mxfp8"), gb300, "bf16") is None
    assert rate_flops(fwd, _gpu("gb200-nvl72"), "bf16") is None
    assert kernel_time_s(fwd, gb300, "bf16") == pytest.approx(
        gb300.kernel_overhead_s + max(fwd.flops / want_fwd, fwd.bytes / gb300.hbm_rate_Bps())
    )

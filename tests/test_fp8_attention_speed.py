"""FP8 attention's full causal backward at head dim 64 on Blackwell
(sim/compute/fp8_attention_speed.py): the measured time of cuDNN's windowed FP8 backward, which visits every causal tile (head dim 128:
tests/test_cudnn_attention.py). Expectations are hand-computed from cudnn-frontend@3929da2's
published result rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.fp8_attention_speed import fp8_hd64_bwd_rate_flops
from sim.compute.kernels import kernel_time_s
from sim.hardware.loader import load_hardware


def _gpu(name: str):
    gpu = load_hardware(name).gpus[0].compute
    assert gpu is not None
    return gpu


def test_head_dim_64_backward_takes_the_windowed_fp8_backward_time():
    """GPT-OSS's full layer, 4 samples x 64 heads of 64 at 4096 tokens: the benchmark's 2 x 128
    heads, the same work. The MXFP8 backward takes GB200's windowed MXFP8 backward, 2.080 ms
    (GB300: 1.871 ms), plus the launch overhead, whatever the 16-bit rate."""
    bwd = attention_bwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)[0]
    mx = replace(bwd, precision="mxfp8")
    for name, ms in (("gb200-nvl72", 2.080), ("gb300-nvl72", 1.871)):
        gpu = _gpu(name)
        assert kernel_time_s(mx, gpu, "bf16") == pytest.approx(gpu.kernel_overhead_s + ms * 1e-3)


def test_what_is_not_measured_keeps_the_16_bit_speed():
    """No FP8 format, a 64-wide forward, a window, head dim 96, or an H100: None; the kernel
    time then equals the 16-bit one."""
    gb200 = _gpu("gb200-nvl72")
    fwd64 = attention_fwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)[0]
    win = attention_bwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False, window=128)
    hd96 = attention_bwd("flash", 1, 4096, 16 * 96, 16, 2, causal=True, dropout=False)[0]
    bwd64 = attention_bwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)[0]
    assert fp8_hd64_bwd_rate_flops(bwd64, gb200) is None
    for k in (fwd64, win[0], hd96):
        assert fp8_hd64_bwd_rate_flops(replace(k, precision="mxfp8"), gb200) is None
    assert kernel_time_s(replace(fwd64, precision="mxfp8"), gb200, "bf16") == pytest.approx(
        kernel_time_s(fwd64, gb200, "bf16")
    )
    h100 = _gpu("dgx-h100")
    assert fp8_hd64_bwd_rate_flops(replace(bwd64, precision="fp8"), h100) is None

"""Ring attention's per-step kernels (sim/parallel/ring_steps.py; TE v2.9 context_parallel.py
AttnFuncWithCPAndKVP2P) timed on cuDNN's measured causal and unmasked tables
(sim/compute/unmasked_attention.py; cudnn-frontend@3929da2 llama3.1 GB200/GB300), hand-computed."""

from __future__ import annotations

import pytest

from sim.compute.kernels import Kernel, kernel_time_s
from sim.compute.unmasked_attention import no_mask_tflops
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.ring_steps import ring_slowdown, with_ring_steps

GB200 = ComputeSpec("GB200", 2500e12, 80e12, 8e12, 148, 0.6, 0.70)
H100 = ComputeSpec("H100-SXM", 989e12, 67e12, 3.35e12, 132, 0.7, 0.6)


def test_no_mask_table_interpolates_in_log2():
    # GB300 BF16 backward: 1429 at 4096, 1531 at 8192; halfway in log2 the mean
    assert no_mask_tflops("GB300", "bf16", "bwd", 2**12.5) == pytest.approx((1429 + 1531) / 2)
    assert no_mask_tflops("GB200", "mxfp8", "fwd", 1024) == 1754  # clamped to 2048
    assert no_mask_tflops("GB200", "nvfp4", "fwd", 4096) is None


def test_cp4_ring_slowdown_by_hand():
    # GB200 BF16 forward, 32768 tokens over 4 ranks: step 0 causal over 8192 keys (1574
    # TFLOPS); 3 later steps, each half an unmasked 4096-key (1599) and half an unmasked
    # 8192-key kernel (1771); each step 1/4 of the work. One causal 32768 kernel: 1622.
    steps = 1 / 1574 + 3 / 2 * (1 / 1599 + 1 / 1771)
    assert ring_slowdown("GB200", "bf16", "fwd", 32768, 4) == pytest.approx(steps / (4 / 1622))
    assert ring_slowdown("GB200", "bf16", "fwd", 32768, 1) == 1.0
    assert ring_slowdown(None, "bf16", "fwd", 32768, 4) == 1.0  # no table: unchanged
    assert ring_slowdown("GB300", "nvfp4", "bwd", 8192, 2) == 1.0  # unmeasured format


def test_ring_slows_only_the_rank_attention_core():
    # cp = 2 over s = 8192: the rank's 4096 queries against 8192 keys; compute-bound
    flops = 4.0 * 4096 * 8192 * 128 * 64 * 0.5
    core = Kernel("flash_attn_fwd", "attn", flops, 0.0, 4096, 8192, 128, 64)
    swa = Kernel("flash_attn_fwd", "attn", flops, 0.0, 4096, 8192, 128, 64, window=128)
    other = Kernel("qkv", "gemm", flops, 0.0, 4096, 8192, 128)
    out = with_ring_steps([core, swa, other], 8192, 2, GB200, "bf16")
    f = ring_slowdown("GB200", "bf16", "fwd", 8192, 2)
    assert f == pytest.approx((1 / 1408 + 0.5 * (1 / 1433 + 1 / 1599)) / (2 / 1574))
    assert out[0].slowdown == pytest.approx(f) and out[1:] == [swa, other]
    over = GB200.kernel_overhead_s
    base = kernel_time_s(core, GB200, "bf16") - over
    assert kernel_time_s(out[0], GB200, "bf16") - over == pytest.approx(f * base)
    assert with_ring_steps([core], 8192, 2, H100, "bf16") == [core]  # no cuDNN table

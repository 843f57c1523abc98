"""64-wide heads on Blackwell (sim/compute/hd64_attention.py): the forward runs at the measured
FLOP-rate ratio of head dim 64 to 128 times the 128-wide table's efficiency; the backward does
not change. Each expectation is hand-computed from the published figures."""

from __future__ import annotations

import pytest

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.hd64_attention import hd64_forward_ratio, narrow_head_ratio
from sim.compute.measured import attention_efficiency
from sim.hardware.loader import load_hardware


def _b200():
    gpu = load_hardware("dgx-b200").gpus[0].compute
    assert gpu is not None
    return gpu


def test_ratio_is_the_measured_tflops_ratio_interpolated_in_log2():
    """FA4 causal forward, B200: 708 / 1062 at 4096, 561 / 899 at 2048; 2896 is halfway in
    log2; clamped beyond 4096 and below 1024 (384 / 660)."""
    assert hd64_forward_ratio(4096) == pytest.approx(708 / 1062)
    mid = (561 / 899 + 708 / 1062) / 2
    assert hd64_forward_ratio(2**11.5) == pytest.approx(mid)
    assert hd64_forward_ratio(32768) == pytest.approx(708 / 1062)
    assert hd64_forward_ratio(256) == pytest.approx(384 / 660)


def test_narrow_head_ratio_applies_to_narrow_forwards_only():
    """The one lookup both tables use: 708 / 1062 for a 64-wide forward at 4096 keys, 1.0 for
    its backward (no measurement: unchanged) and for a 128-wide head (nearer 128 in log2)."""
    assert narrow_head_ratio(64, 4096, backward=False) == pytest.approx(708 / 1062)
    assert narrow_head_ratio(64, 4096, backward=True) == 1.0
    assert narrow_head_ratio(128, 4096, backward=False) == 1.0


def test_b200_head_dim_64_forward_is_the_128_row_times_the_ratio():
    """GPT-OSS's full layer at 4096 tokens, 4 samples x 64 heads of 64: 256 heads clamp to
    SimuMax's 128-head row at 4096 (forward 0.997, backward 0.832, non-causal convention,
    halved); the forward times 708 / 1062, the backward unchanged."""
    b200 = _b200()
    fwd = attention_fwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)[0]
    bwd = attention_bwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)[0]
    assert fwd.k == 64
    assert attention_efficiency(fwd, b200, "bf16") == pytest.approx(0.997 / 2 * 708 / 1062)
    assert attention_efficiency(bwd, b200, "bf16") == pytest.approx(0.832 / 2)


def test_head_dim_128_is_untouched():
    """A 128-wide head at 4096 with 64 heads keeps SimuMax's 0.872 / 2."""
    fwd = attention_fwd("flash", 1, 4096, 64 * 128, 64, 2, causal=True, dropout=False)[0]
    assert attention_efficiency(fwd, _b200(), "bf16") == pytest.approx(0.872 / 2)

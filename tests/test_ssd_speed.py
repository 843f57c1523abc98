"""Mamba-2's SSD scan kernels at their measured share of HBM bandwidth (sim.compute.ssd_speed):
the fraction recomputed from the published H100 micro-benchmark, and the kernels timed by it."""

from __future__ import annotations

import pytest

from sim.compute.kernels import kernel_time_s, mem
from sim.compute.ssd_speed import SSD_HBM_FRACTION, is_ssd, ssd_hbm_rate_Bps
from sim.compute.ssm import MambaShape, _scan_fwd
from sim.hardware.loader import load_hardware

H100 = load_hardware("dgx-h100").gpus[0].compute
GRANITE = MambaShape(heads=128, head_dim=64, state=128, groups=1, chunk=256)
"""granite-4.0-h-small's mixer, the shape of vllm-project/vllm#27299's micro-benchmark."""
TOKENS_PER_S = 1.262327e7
"""vllm#27299 (2025-10-25 comment, H100): the unfused forward at sequence 8192."""


def test_fraction_is_the_h100_measurement():
    """The five forward kernels of 8192 tokens (32 chunks of 256, no gate) move 857.7 MB; at
    0.649 ms less five 5 us launches that is 0.410 of 3.35 TB/s, and timed with the fraction
    they take the measured time."""
    kernels = _scan_fwd(GRANITE, 8192 // 256, 2, 1, z=False)
    assert [k.name for k in kernels] == [
        "ssd_chunk_cumsum", "ssd_chunk_state", "ssd_state_passing", "ssd_bmm_cb",
        "ssd_chunk_scan"]  # fmt: skip
    moved = sum(k.bytes for k in kernels)
    assert moved == pytest.approx(857.735168e6)
    measured_s = 8192 / TOKENS_PER_S
    fraction = moved / (3.35e12 * (measured_s - 5 * H100.kernel_overhead_s))
    assert fraction == pytest.approx(SSD_HBM_FRACTION, abs=5e-4)
    total = sum(kernel_time_s(k, H100, "bf16") for k in kernels)
    assert total == pytest.approx(measured_s, rel=2e-3)


def test_only_scan_kernels_are_slowed():
    """A copy of the same bytes keeps the preset's HBM efficiency (0.85 on dgx-h100)."""
    scan, copy = mem("ssd_state_passing", 1e9), mem("copy", 1e9)
    assert is_ssd(scan) and not is_ssd(copy)
    assert kernel_time_s(scan, H100, "bf16") == pytest.approx(5e-6 + 1e9 / (3.35e12 * 0.410))
    assert kernel_time_s(copy, H100, "bf16") == pytest.approx(5e-6 + 1e9 / (3.35e12 * 0.85))


def test_rate_carries_to_other_gpus_per_sm():
    """The H100 rate over its 132 SMs, times another GPU's SMs, bounded by the HBM fraction:
    B200 (148 SMs, 8 TB/s) 0.410 x 3.35e12 x 148 / 132 = 1.540 TB/s instead of 3.28 TB/s;
    GB300 (160 SMs) 1.665 TB/s; an A100 40 GB (108 SMs, 1555 GB/s) keeps 0.410 of its HBM."""
    h100_sm = 0.410 * 3.35e12 / 132
    assert ssd_hbm_rate_Bps(3.35e12, 132) == pytest.approx(0.410 * 3.35e12)
    assert ssd_hbm_rate_Bps(8e12, 148) == pytest.approx(h100_sm * 148)
    assert ssd_hbm_rate_Bps(8e12, 148) == pytest.approx(1.5400e12, rel=1e-4)
    assert ssd_hbm_rate_Bps(8e12, 160) == pytest.approx(1.6648e12, rel=1e-4)
    assert ssd_hbm_rate_Bps(1.555e12, 108) == pytest.approx(0.410 * 1.555e12)
    b200 = load_hardware("dgx-b200").gpus[0].compute
    scan = mem("ssd_state_passing", 1e9)
    assert kernel_time_s(scan, b200, "bf16") == pytest.approx(5e-6 + 1e9 / (h100_sm * 148))

"""Mamba-2's SSD scan kernels at their measured share of HBM bandwidth (sim.compute.ssd_speed):
the fraction recomputed from the published H100 micro-benchmark, and the kernels timed by it."""

from __future__ import annotations

import pytest

from sim.compute.kernels import kernel_time_s, mem
from sim.compute.ssd_speed import (
    SSD_BWD_RATE_RATIO,
    SSD_HBM_FRACTION,
    is_ssd,
    is_ssd_bwd,
    ssd_hbm_rate_Bps,
)
from sim.compute.ssm import MambaShape, _scan_bwd, _scan_fwd
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


TFLA = MambaShape(heads=128, head_dim=64, state=64, groups=1, chunk=256)
"""The TFLA benchmark's ``mamba2`` kernel (module doc: "Backward measurement")."""


def test_backward_ratio_is_the_tfla_measurement():
    """8 x 8192 tokens (T = 65,536, 256 chunks): forward 7.074 ms, forward + backward 44.376 ms.
    Copies at 0.85 x 3.35 TB/s plus 5 us each: conv 2 x T x 8320 x 2 B = 2.181 GB forward,
    3.272 GB backward; harness T/8 x 8192 x 2 B (loss), T x 8192 x 2 B + T/8 x 8192 x 2 B
    (gradient of out[0]), T x 16640 x 6 B (bf16 -> fp32) and x 12 B (in-place accumulate).
    The forward's kernels then run at r_f = 7.365 GB / (6.303 ms - 5 launches), the
    backward's own at 0.741 r_f once the four recomputed kernels are priced at r_f."""
    t, chunks, copy_Bps = 65536, 256, 0.85 * 3.35e12
    copies = [2 * t * 8320 * 2, 3 * t * 8320 * 2, t // 8 * 8192 * 2,
              t * 8192 * 2 + t // 8 * 8192 * 2, t * 16640 * 6, t * 16640 * 12]  # fmt: skip
    conv_f, conv_b, *harness = (5e-6 + b / copy_Bps for b in copies)
    fwd, bwd = _scan_fwd(TFLA, chunks, 2, 1), _scan_bwd(TFLA, chunks, 2, 1)
    recomputed, own = bwd[:4], bwd[4:]
    assert not any(map(is_ssd_bwd, recomputed)) and all(map(is_ssd_bwd, own))
    r_f = sum(k.bytes for k in fwd) / (7.074272e-3 - conv_f - 5 * 5e-6)
    assert r_f == pytest.approx(1.173e12, rel=1e-3)
    bwd_s = 44.375969e-3 - 7.074272e-3 - conv_f - conv_b - sum(harness)
    own_s = bwd_s - sum(5e-6 + k.bytes / r_f for k in recomputed) - len(own) * 5e-6
    ratio = sum(k.bytes for k in own) / own_s / r_f
    assert ratio == pytest.approx(SSD_BWD_RATE_RATIO, abs=1e-3)
    back, again = mem("ssd_bwd_dz", 1e9), mem("ssd_chunk_state", 1e9)
    assert kernel_time_s(back, H100, "bf16") == pytest.approx(
        5e-6 + 1e9 / (3.35e12 * 0.410 * 0.741)
    )
    assert kernel_time_s(again, H100, "bf16") == pytest.approx(5e-6 + 1e9 / (3.35e12 * 0.410))

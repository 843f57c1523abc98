"""Hybrid-EP's NVLink efficiency is the kernel-only measurement (sim.comm.ep_dispatch,
"Measurement type"): Megatron's dispatch_with_permute runs no D2D copy inside an NVLink domain,
and pipesim prices the all-gather, preprocessing, sync and permute kernels apart."""

import pytest

from sim.comm.ep_dispatch import efficiency


def test_hybridep_16_sm_point_is_the_b200_kernel_only_figure():
    # DeepEP@94a9f8f6 docs/README_Hybrid-EP.md, B200, 16 SMs, "Only Kernel Time":
    # BF16 dispatch 734.95, combine 673.84 GB/s of 900: (734.95 + 673.84) / 2 / 900.
    assert efficiency("hybridep", "blackwell", "nvl", 16) == pytest.approx(0.7826611, rel=1e-6)
    # halfway to the 32-SM GB200 kernel-only point, (764 + 737) / 2 / 900 = 0.8338889
    assert efficiency("hybridep", "blackwell", "nvl", 24) == pytest.approx(0.8082750, rel=1e-6)

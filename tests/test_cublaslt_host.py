"""Transformer Engine's per-call cuBLASLt set-up (sim/compute/cublaslt_host.py)."""

from __future__ import annotations

import pytest

from sim.compute.cublaslt_host import gemm_setup_s
from sim.hardware.host_ops import HostOverhead


def test_setup_is_raft_call_less_a_launch_scaled_as_the_cxx_dispatch():
    # NVIDIA/raft#1736: ~10 us from the wrapper to the launch without memoisation; the bare
    # launch is 3 us (tritonbench#1017): 7 us on the reference host
    assert gemm_setup_s() == pytest.approx(7e-6)
    # the reference preset's op (9.8 us, its launch share 3 us): the same 7 us
    assert gemm_setup_s(HostOverhead(op_s=9.8e-6)) == pytest.approx(7e-6)
    # C++ library work, priced at the host's C++ work per op (op less launch) over the
    # reference's 6.8 us: a host with 13.6 us of it (16.6 - 3.0) pays twice as much
    assert gemm_setup_s(HostOverhead(op_s=16.6e-6, launch_s=3e-6)) == pytest.approx(14e-6)
    # a dearer launch inside the same op leaves less C++ work: 9.8 - 6.6 = 3.2 us, 3.2/6.8 x 7
    assert gemm_setup_s(HostOverhead(op_s=9.8e-6, launch_s=6.6e-6)) == pytest.approx(
        3.2 / 6.8 * 7e-6
    )
    # without a launch of its own a host's set-up scales as its eager op (every x86 preset)
    assert gemm_setup_s(HostOverhead(op_s=19.6e-6)) == pytest.approx(14e-6)

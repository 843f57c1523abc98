"""Transformer Engine's per-call cuBLASLt set-up (sim/compute/cublaslt_host.py)."""

from __future__ import annotations

import pytest

from sim.compute.cublaslt_host import gemm_setup_s
from sim.hardware.host_ops import HostOverhead


def test_setup_is_raft_call_less_a_launch_scaled_as_the_eager_op():
    # NVIDIA/raft#1736: ~10 us from the wrapper to the launch without memoisation; the bare
    # launch is 3 us (tritonbench#1017): 7 us on the reference host
    assert gemm_setup_s() == pytest.approx(7e-6)
    # the reference preset's op (9.8 us): the same 7 us
    assert gemm_setup_s(HostOverhead(op_s=9.8e-6)) == pytest.approx(7e-6)
    # C++ library work, priced at the host's eager-op ratio: a host whose op takes twice the
    # reference's pays twice as much, whatever its driver launch costs
    assert gemm_setup_s(HostOverhead(op_s=19.6e-6, launch_s=3e-6)) == pytest.approx(14e-6)
    assert gemm_setup_s(HostOverhead(op_s=9.8e-6, launch_s=6e-6)) == pytest.approx(7e-6)

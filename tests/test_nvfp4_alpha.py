"""NVFP4's per-tensor scale kernel before each GEMM (sim/compute/nvfp4_alpha.py): one
single-thread launch per cuBLASLt GEMM, one per expert in GroupedLinear's loop."""

from __future__ import annotations

import pytest

from sim.compute.kernels import BACK_TO_BACK_S, gemm, kernel_time_s
from sim.compute.moe import grouped
from sim.compute.nvfp4_alpha import ALPHA_BYTES, ALPHA_PREFIX
from sim.compute.precision import get_recipe
from sim.compute.quantize import quantize_layer
from sim.hardware.loader import load_hardware


def test_one_scale_kernel_per_nvfp4_gemm_and_per_expert():
    # 64 local experts' fc1 (forward, input gradient, weight gradient: all three NVFP4 under
    # TE's recipe) and a dense linear: the grouped passes launch 64 scale kernels each (one per
    # expert GEMM, TE cublaslt_gemm.cu@71bbefb 363-384 inside the per-expert loop 969-1022),
    # the dense GEMM one. On the device the 64 run as one chain: the kernel overhead of the
    # first and 63 back-to-back launches of 0.56 us (the bytes, 64 x 12, are nothing).
    # MXFP8 GEMMs launch none.
    b200 = load_hardware("dgx-b200").gpus[0].compute
    assert b200 is not None
    layer = (
        [grouped("expert_up[256]", 256, 512, 1024, 2, 64, "fwd"), gemm("qkv", 512, 768, 1024, 2)],
        [grouped("d_expert_up_in[256]", 256, 1024, 512, 2, 64, "dgrad")],
        [grouped("d_expert_up_w[256]", 1024, 512, 256, 2, 64, "wgrad")],
    )
    nvfp4 = get_recipe("nvfp4")
    phases = quantize_layer(layer, nvfp4, b200.low_rate("nvfp4"), te=(2, 14))
    alphas = [[k for k in ks if k.name.startswith(ALPHA_PREFIX)] for ks in phases]
    assert [[(k.name, k.batch) for k in ks] for ks in alphas] == [
        [("nvfp4_alpha_expert_up[256]", 64), ("nvfp4_alpha_qkv", 1)],
        [("nvfp4_alpha_d_expert_up_in[256]", 64)],
        [("nvfp4_alpha_d_expert_up_w[256]", 64)],
    ]
    chain = alphas[0][0]
    assert chain.bytes == 64 * ALPHA_BYTES
    expected = b200.kernel_overhead_s + 63 * BACK_TO_BACK_S + chain.bytes / b200.hbm_rate_Bps()
    assert kernel_time_s(chain, b200, "bf16") == pytest.approx(expected)
    mx = quantize_layer(layer, get_recipe("mxfp8"), b200.low_rate("mxfp8"))
    assert not [k for ks in mx for k in ks if k.name.startswith(ALPHA_PREFIX)]

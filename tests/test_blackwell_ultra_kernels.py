"""B300 and GB300 kernel speeds (issue 26): which of the B200's measured kernel tables carry over
(sim.compute.measured, module doc), each with a hand-computed expectation."""

from __future__ import annotations

import pytest

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.kernels import kernel_time_s
from sim.compute.measured import attention_efficiency, grouped_gemm_efficiency, permute_time_s
from sim.compute.moe import grouped
from sim.hardware.loader import load_hardware


def _gpu(preset: str):
    gpu = load_hardware(preset).gpus[0].compute
    assert gpu is not None
    return gpu


def test_b300_runs_the_b200_attention_table_at_the_same_absolute_speed():
    """64 heads of 128 at 4096 tokens: SimuMax's B200 factors 0.872 forward / 0.729 backward
    (non-causal convention) are 0.436 / 0.3645 of 2250 TFLOPS; B300's dense BF16 peak is the
    same 2250, so the same fractions and the same seconds."""
    b300, b200 = _gpu("dgx-b300"), _gpu("dgx-b200")
    fwd = attention_fwd("flash", 1, 4096, 64 * 128, 64, 2, causal=True, dropout=False)[0]
    bwd = attention_bwd("flash", 1, 4096, 64 * 128, 64, 2, causal=True, dropout=False)[0]
    assert attention_efficiency(fwd, b300, "bf16") == pytest.approx(0.436)
    assert attention_efficiency(bwd, b300, "bf16") == pytest.approx(0.3645)
    t = b300.kernel_overhead_s + fwd.flops / (2250e12 * 0.436)
    assert kernel_time_s(fwd, b300, "bf16") == pytest.approx(t)
    assert kernel_time_s(fwd, b300, "bf16") == pytest.approx(kernel_time_s(fwd, b200, "bf16"))


def test_b300_runs_the_b200_grouped_gemm_and_permute_measurements():
    """DeepSeek-V3's experts at 128 rows: forward 0.208 of 2250 TFLOPS on SimuMax's B200 node,
    whose dense GEMMs ran at 0.4878: on B300 0.208 / 0.4878 of its own dense rate;
    a permute of t = 4096 tokens into P = 8192 rows of 7168 bf16: (4096 + 3 x 8192) x 14336
    bytes at 0.5008 x 8000 GiB/s plus two 30 us launches."""
    b300 = _gpu("dgx-b300")
    up = grouped("expert_up[128]", 128, 4096, 7168, 2, 32, "fwd")  # relative to the dense rate
    assert grouped_gemm_efficiency(up, b300, "bf16") == pytest.approx(
        0.208 / 0.4878 * b300.matmul_efficiency
    )

    class Perm:  # the fields permute_time_s reads
        name, m, n, k = "permute", 4096, 8192, 7168 * 2

    want = (4096 + 3 * 8192) * 14336 / (0.5008 * 8000 * 2**30) + 60e-6
    assert permute_time_s(Perm(), b300) == pytest.approx(want)


def test_gb300_attention_at_cudnns_rate_grouped_gemms_relative_to_dense():
    """GB300 (1400 W, dense BF16 2500 TFLOPS: not the measured HGX B200's clock and power
    point) has no SimuMax attention table: its head-dim-128 causal attention runs at cuDNN's
    own GB300 measurement (sim.compute.cudnn_attention: 1703 TFLOPS forward in BF16 at 4K over
    128 heads, 64 heads here: x 0.872 / 0.997 by the B200 table); its grouped GEMMs run at the
    B200 node's fraction relative to the dense rate (0.208 / 0.4878 of GB300's own)."""
    gb300 = _gpu("gb300-nvl72")
    fwd = attention_fwd("flash", 1, 4096, 64 * 128, 64, 2, causal=True, dropout=False)[0]
    up = grouped("expert_up[128]", 128, 4096, 7168, 2, 32, "fwd")
    assert attention_efficiency(fwd, gb300, "bf16") is None
    assert grouped_gemm_efficiency(up, gb300, "bf16") == pytest.approx(
        0.208 / 0.4878 * gb300.matmul_efficiency
    )
    rate = 1703e12 * 0.872 / 0.997
    assert kernel_time_s(fwd, gb300, "bf16") == pytest.approx(
        gb300.kernel_overhead_s + max(fwd.flops / rate, fwd.bytes / gb300.hbm_rate_Bps())
    )


def test_ssd_scan_kernels_carry_their_triton_tensors_bytes():
    """H=2 heads of P=4, N=8, G=1, Q=4, T=8 tokens (c=2 chunks), bf16 (d=2): x-like tensors
    T*H*P = 64 elements, B/C 64, fp32 dt/dA_cumsum 16 each, CB c*G*Q*Q = 32 (fp32), states
    c*H*P*N = 128. _chunk_state_fwd reads B, x, dt, dA and writes fp32 states:
    64*2 + 64*2 + 2*16*4 + 128*4 = 896 bytes; _chunk_scan_fwd reads CB (fp32), x, z, C,
    states (bf16), dt, dA and writes out, out_x: 128 + 256 + 128 + 256 + 128 + 256 = 1152.
    Backward FLOPs of the scan kernels (recomputation included) sum to
    T*H*(10PN + 3QP) + 6*T*G*Q*N = 7424."""
    from sim.compute.ssm import MambaShape, mamba_bwd, mamba_fwd, ssd_bwd_flops

    ms = MambaShape(heads=2, head_dim=4, state=8, groups=1, conv_kernel=4, chunk=4)
    fwd = {k.name: k for k in mamba_fwd(ms, 16, 8, 1, 2)}
    assert fwd["ssd_chunk_state"].bytes == 896
    assert fwd["ssd_chunk_scan"].bytes == 1152
    dx, _ = mamba_bwd(ms, 16, 8, 1, 2)
    scan = [k for k in dx if k.name.startswith("ssd_") and k.kind == "gemm"]
    assert sum(k.flops for k in scan) == ssd_bwd_flops(ms, 8) == 7424


def test_megatron_transposes_zxbcdt_and_y_only_for_several_samples():
    """MambaMixer._ssm_training copies in_proj's output (T x in_width) to (b, l, d) and y
    (T x d_i) back: 2*T*w*d bytes each when b > 1, a view when b = 1; in_width of H=2, P=4,
    G=1, N=8: 2*8 + 2*8 + 2 = 34."""
    from sim.compute.ssm import MambaShape, mamba_fwd

    ms = MambaShape(heads=2, head_dim=4, state=8, groups=1, conv_kernel=4, chunk=4)
    two = {k.name: k.bytes for k in mamba_fwd(ms, 16, 8, 2, 2)}
    one = {k.name for k in mamba_fwd(ms, 16, 8, 1, 2)}
    assert two["zxbcdt_to_bld"] == 2 * 16 * 34 * 2 and two["y_to_lbd"] == 2 * 16 * 8 * 2
    assert "zxbcdt_to_bld" not in one and "y_to_lbd" not in one

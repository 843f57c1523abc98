"""Transformer Engine's fused grouped MLP in MXFP8 casts two of its four GEMM operands: the
other two come quantized out of its GLU and dGLU kernels (sim.compute.fused_mlp_casts)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.moe import moe_bwd, moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.compute.precision import get_recipe
from sim.compute.quantize import quantize_layer
from sim.hardware.loader import load_hardware


def _casts(shape: MoEShape, fmt: str) -> dict[str, float]:
    """``{cast: bytes}`` of a MoE layer's kernels (4 experts of 256 rows, bf16) under TE's
    ``fmt`` recipe on a B200."""
    gpu = load_hardware("dgx-b200").gpus[0].compute
    assert gpu is not None
    rows = (256.0,) * 4
    dx, dw = moe_bwd(shape, 1024, 1024, rows, 2)
    out = quantize_layer((moe_fwd(shape, 1024, 1024, rows, 2), dx, dw), get_recipe(fmt),
                         gpu.low_rate(fmt))  # fmt: skip
    return {k.name: k.bytes for part in out for k in part if k.name.startswith("quantize_")}


def test_fused_mxfp8_mlp_casts_only_the_first_input_and_the_second_output_gradient():
    """h 64, f_e 32 gated (first GEMM 64 wide), 4 x 256 = 1024 rows. MXFP8 casts both usages
    of a bf16 tensor at 2 + 2 x (1 + 1/32) = 4.0625 bytes per element. Fused: the first GEMM's
    input (1024 x 64) and the second GEMM's output gradient (1024 x 64), 266,240 bytes each, and
    nothing else; TE's GroupedLinear also casts the second GEMM's input (1024 x 32) and the first
    GEMM's output gradient (1024 x 64). Fused NVFP4 (TE 2.17) casts all four."""
    shape = MoEShape(hidden=64, experts=4, top_k=1, expert_ffn=32)
    fused = replace(shape, fused_grouped_mlp=True)
    per = 2 + 2 * (1 + 1 / 32)
    assert _casts(fused, "mxfp8") == {
        "quantize_expert_up": pytest.approx(1024 * 64 * per),
        "quantize_dgrad_expert_down": pytest.approx(1024 * 64 * per),
    }
    loop = _casts(shape, "mxfp8")
    assert loop["quantize_expert_down"] == pytest.approx(1024 * 32 * per)
    assert loop["quantize_dgrad_expert_up"] == pytest.approx(1024 * 64 * per)
    assert set(_casts(fused, "nvfp4")) == set(loop)

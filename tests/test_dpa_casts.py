"""TE's casts around MXFP8 attention (sim/compute/dpa_casts.py): Q, K, V quantized in the forward
(3 casts + 4 scale passes), the output gradient in the backward (1 + 4), 4.3125 bytes an
element; hand-computed for GPT-OSS's full layer, and absent without FP8 attention."""

from __future__ import annotations

import pytest

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.dpa_casts import MXFP8_CAST_BYTES, dpa_casts
from sim.compute.kernels import gemm
from sim.compute.precision import TE, get_recipe
from sim.compute.precision_rules import LayerRules
from sim.compute.quantize import quantize_layer
from sim.hardware.loader import load_hardware


def _gpt_oss_layer():
    """4 x 4096 tokens; QKV width 64 x 64 + 2 x 8 x 64 = 5120 from hidden 2880."""
    fwd = [gemm("qkv", 4 * 4096, 5120, 2880, 2)]
    fwd += attention_fwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)
    bwd = attention_bwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)
    return fwd, bwd


def test_bytes_per_element_is_read_two_write_two_mxfp8_copies_and_their_scales():
    """2 + 2 x (1 + 1/32) + 2 x 2 x 2/32 = 4.3125."""
    assert MXFP8_CAST_BYTES == pytest.approx(4.3125)


def test_gpt_oss_full_layer_casts_qkv_forward_and_dout_backward():
    """Forward: 16384 x 5120 elements x 4.3125 bytes, 7 launches; backward: the output's
    16384 x 64 x 64 elements, 5 launches; quantize_layer adds them only with the rule."""
    fwd, bwd = _gpt_oss_layer()
    f, b = dpa_casts(fwd, "mxfp8")
    assert (f[0].bytes, f[0].batch) == (16384 * 5120 * 4.3125, 7)
    assert (b[0].bytes, b[0].batch) == (16384 * 4096 * 4.3125, 5)
    assert dpa_casts(fwd, "fp8") == ([], [])
    gb200 = load_hardware("gb200-nvl72").gpus[0].compute
    mx = get_recipe("mxfp8", TE)
    assert gb200 is not None and mx is not None
    rate = gb200.low_rate("mxfp8")
    on = quantize_layer((fwd, bwd, []), mx, rate, LayerRules(attention=True))
    off = quantize_layer((fwd, bwd, []), mx, rate, LayerRules())
    names = ({k.name for k in on[0]} - {k.name for k in off[0]},
             {k.name for k in on[1]} - {k.name for k in off[1]})  # fmt: skip
    assert names == ({"quantize_dpa_qkv"}, {"quantize_dpa_dout"})

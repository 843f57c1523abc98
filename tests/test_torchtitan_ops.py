"""torchtitan's eager Llama kernels (sim.compute.torchtitan_ops): hand-computed small cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.decoder import layer_kernels
from sim.compute.decoder_shape import DecoderShape
from sim.compute.torchtitan_ops import (
    kv_repeat_bwd,
    kv_repeat_fwd,
    rms_norm_fp32_bwd,
    rms_norm_fp32_fwd,
    rope_complex_bwd,
    rope_complex_fwd,
)


def _bytes(kernels) -> float:
    return sum(k.bytes for k in kernels)


def test_fp32_rms_norm_moves_36_bytes_an_element_forward_and_92_backward():
    # 2 rows of 4 bf16 elements (E = 8): forward cast 6E, pow 8E, mean 4E + 4r, add and rsqrt
    # 8r each, x * rstd 8E + 4r, cast back 6E, * weight 4E + 2h = 288 + 48 + 8 = 344 bytes
    fwd = rms_norm_fp32_fwd("n", 2, 4, 2)
    assert len(fwd) == 8 and _bytes(fwd) == 344
    # backward: 92E (6+4+2+6+12+8+4+4+8+8+12+12+6 per element) + 40r + 2 x 2h = 736 + 80 + 16
    bwd = rms_norm_fp32_bwd("n", 2, 4, 2)
    assert len(bwd) == 16 and _bytes(bwd) == 832


def test_complex_rope_casts_to_fp32_and_back_around_a_complex_multiply():
    # 256 bf16 elements, table [s=4, hd/2=4] complex64 = 128 bytes: cast 6 x 256, multiply
    # 8 x 256 + 128, cast back 6 x 256; backward adds the conjugated table's clone (2 x 128)
    fwd, bwd = rope_complex_fwd("q", 256, 4, 8, 2), rope_complex_bwd("q", 256, 4, 8, 2)
    assert [len(fwd), len(bwd)] == [3, 4]
    assert _bytes(fwd) == 1536 + 2176 + 1536 and _bytes(bwd) == 1536 + 256 + 2176 + 1536


def test_repeat_kv_copies_keys_and_values_to_every_query_head():
    # 100 bf16 elements over kv heads repeated 4 times: read 200 bytes, write 800
    assert _bytes(kv_repeat_fwd("k", 100, 4, 2)) == 1000 == _bytes(kv_repeat_bwd("k", 100, 4, 2))
    assert kv_repeat_fwd("k", 100, 1, 2) == [] == kv_repeat_bwd("k", 100, 1, 2)


def test_llama_block_and_head_take_the_eager_kernels_in_place_of_the_fused_ones():
    m = DecoderShape(2, 64, 4, 16, 100, 128, kv_heads=2)  # b=1: 16 tokens, hd 16
    t, h, d = 16, 64, 2
    e, q, k = t * h, t * 4 * 16, t * 2 * 16
    base = [layer_kernels("block", m, 1, d)[i] for i in (0, 1)]
    for flags, extra_fwd, extra_bwd in (
        # two norms: (36E + 24r + 2h) - 4E forward, (92E + 40r + 4h) - 6E backward
        ({"norm_fp32": True}, 2 * (32 * e + 24 * t + 2 * h), 2 * (86 * e + 40 * t + 4 * h)),
        # Q and K: 20N + 4 s hd forward, 20N + 12 s hd backward, less the fused 4N each way
        ({"rope_complex": True}, 16 * (q + k) + 2 * 4 * t * 16, 16 * (q + k) + 2 * 12 * t * 16),
        ({"kv_repeat": True}, 2 * k * d * 3, 2 * k * d * 3),  # 4 heads over 2: x2 copies
    ):
        fwd, bi, _ = layer_kernels("block", replace(m, **flags), 1, d)
        assert _bytes(fwd) - _bytes(base[0]) == pytest.approx(extra_fwd)
        assert _bytes(bi) - _bytes(base[1]) == pytest.approx(extra_bwd)
    hf, hi, _ = layer_kernels("head", replace(m, norm_fp32=True), 1, d)
    plain_f, plain_i, _ = layer_kernels("head", m, 1, d)
    assert _bytes(hf) - _bytes(plain_f) == pytest.approx(32 * e + 24 * t + 2 * h)
    assert _bytes(hi) - _bytes(plain_i) == pytest.approx(86 * e + 40 * t + 4 * h)

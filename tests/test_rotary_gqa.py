"""Rotary position embedding under grouped-query attention (sim/compute/transformer.py)."""

from __future__ import annotations

from sim.compute.transformer import BlockShape, attention_half_fwd


def test_rotary_embedding_rotates_the_keys_own_heads():
    # grouped-query attention: 32 query heads, 8 key heads of 128 on 4096 tokens, bf16. The
    # rotation reads and writes Q (4096 x 4096 x 2) and K (4096 x 1024 x 2), not K at Q's width
    shape = BlockShape(4096, 32, 4096, 14336, gated=True, rotary=True, kv_heads=8)
    names = {k.name: k.bytes for k in attention_half_fwd(shape, 1, 2)}
    assert names["rotary_q"] == 2 * 4096 * 4096 * 2
    assert names["rotary_k"] == 2 * 4096 * 1024 * 2

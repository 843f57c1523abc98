"""Dropout's activation bytes in the decoder trace (issue 27): by hand.

Megatron-LM's GPT defaults train with attention and hidden dropout 0.1: every block keeps a
1-byte mask after its attention projection and after its MLP, the embedding one after the
embedding, and unfused attention keeps the mask and the dropped-out probabilities beside the
softmax output (Korthikanti et al. §4.1: ``5as^2b`` at 16 bit).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.decoder import layer_act_bytes, scores_act_bytes
from sim.compute.decoder_shape import DecoderShape
from sim.compute.moe_shape import MoEShape

H, A, S, V, F, B = 64, 4, 32, 256, 128, 2
SHAPE = DecoderShape(layers=2, hidden=H, heads=A, seq_len=S, vocab=V, ffn_hidden=F)


@pytest.mark.parametrize("attention", ["flash", "math"])
def test_a_block_keeps_two_masks_and_unfused_attention_its_dropout(attention):
    """bf16 (d = 2), b = 2, no tp: masks 2 x s*b*h bytes; math adds 3 x a*s*s*b (mask 1 B +
    output 2 B per score) to the 2 x a*s*s*b of the probabilities."""
    off = replace(SHAPE, attention=attention)
    on = replace(off, dropout=True)
    diff = layer_act_bytes("block", on, B, 2) - layer_act_bytes("block", off, B, 2)
    scores = A * S * S * B * 3 if attention == "math" else 0
    assert diff == 2 * S * B * H + scores
    if attention == "math":
        assert scores_act_bytes(off, B, 2) == A * S * S * B * 2


def test_masks_follow_sequence_and_tensor_parallelism():
    """tp 2 with sequence parallelism: masks over s/2 rows; the math scores over a/2 heads."""
    off = replace(SHAPE, attention="math")
    on = replace(off, dropout=True)
    diff = layer_act_bytes("block", on, B, 2, tp=2, sp=True) - layer_act_bytes(
        "block", off, B, 2, tp=2, sp=True
    )
    assert diff == 2 * (S // 2) * B * H + (A // 2) * S * S * B * 3


def test_the_embedding_keeps_one_mask_and_a_moe_block_two():
    on = replace(SHAPE, dropout=True)
    assert (
        layer_act_bytes("embedding", on, B, 2) - layer_act_bytes("embedding", SHAPE, B, 2)
        == S * B * H
    )
    moe = MoEShape(hidden=H, experts=4, top_k=1, expert_ffn=F)
    off_m = replace(SHAPE, moe=moe)
    on_m = replace(off_m, dropout=True)
    assert (
        layer_act_bytes("moe_block", on_m, B, 2) - layer_act_bytes("moe_block", off_m, B, 2)
        == 2 * S * B * H
    )


def test_dropout_round_trips_and_is_left_out_at_its_default():
    assert "dropout" not in SHAPE.to_dict()
    on = replace(SHAPE, dropout=True)
    assert on.to_dict()["dropout"] is True
    assert DecoderShape.from_dict(on.to_dict()) == on

"""Parameters Megatron keeps whole on every tensor rank (sim.parallel.replicated): the
position embedding, LayerNorms and row-parallel biases are not split by ``t``."""

from __future__ import annotations

from sim.framework.tied_embedding import share_head_weight
from sim.hardware.loader import load_hardware
from sim.parallel.shard import shard_trace
from sim.trace.generator import transformer_trace

A100 = load_hardware("dgx-a100-40gb").gpus[0].compute


def test_rank_gradient_bytes_keep_the_position_embedding_whole():
    """GPT h 2048, 24 layers, s 1024, V 51200 (GPT-2's padded for t 8), fp16, t 8, p 1: one
    rank's gradients as Megatron's modules hold them, counted by hand: per block
    12h^2/8 (weights) + 3h/8 + 4h/8 (QKV, fc1 biases) + 2h (row-parallel biases) + 4h
    (LayerNorms) = 6,305,536; word embedding 51200/8 x 2048 = 13,107,200; position
    embedding 1024 x 2048 = 2,097,152 (whole); final LayerNorm 4,096. 166,541,312 x 2 B =
    333,082,624 B (before: everything / 8, 328,889,344 B)."""
    h, s, v = 2048, 1024, 51200
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=24,
        hidden=h,
        heads=16,
        seq_len=s,
        vocab=v,
        microbatch_size=1,
        gpu=A100,
    )
    rank = share_head_weight(shard_trace(trace, 8, False, None).trace, 8)  # p = 1: one copy
    expected = 2 * (24 * 6_305_536 + 13_107_200 + 2_097_152 + 4_096)
    assert sum(x.param_bytes for x in rank.layers) == expected == 333_082_624
    emb = rank.layers[0]
    assert emb.param_bytes == 2 * (13_107_200 + 2_097_152)


def test_one_rank_is_unchanged():
    """At t 1 nothing is split: the trace's own parameter bytes."""
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=2,
        hidden=64,
        heads=4,
        seq_len=32,
        vocab=128,
        microbatch_size=1,
        gpu=A100,
    )
    assert shard_trace(trace, 1, False, None).trace.layers == trace.layers

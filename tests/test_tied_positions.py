"""Megatron-DeepSpeed's last stage builds a whole EmbeddingPipe, position embedding included
(sim.framework.tied_positions): with p > 1 its head holds s x h more parameters."""

from __future__ import annotations

from sim.framework import get_framework
from sim.hardware.loader import load_hardware
from sim.schedules import OneFOneB
from sim.trace.generator import transformer_trace

A100 = load_hardware("dgx-a100-40gb").gpus[0].compute


def _gpt():
    return transformer_trace(
        "gpt", name="g", layers=4, hidden=64, heads=4, seq_len=32, vocab=128,
        microbatch_size=1, gpu=A100,
    )  # fmt: skip


def _head_bytes(trace) -> float:
    return sum(x.param_bytes for x in trace.layers if x.name == "head")


def test_last_stage_holds_a_second_position_table():
    """p = 2: the head gains 32 x 64 fp16 elements (4,096 B); its word-embedding copy stays.
    p = 1: one module, the head's copy of the word embedding (128 x 64 x 2 B) taken out."""
    fw, trace = get_framework("megatron-deepspeed"), _gpt()
    head = _head_bytes(trace)
    assert _head_bytes(fw.tie(trace, OneFOneB(2, 4))) == head + 32 * 64 * 2
    assert _head_bytes(fw.tie(trace, OneFOneB(1, 4))) == head - 128 * 64 * 2


def test_megatron_lm_keeps_no_position_table_on_the_last_stage():
    """Megatron-LM's last stage builds only the word embedding: unchanged at p = 2."""
    trace = _gpt()
    assert _head_bytes(get_framework("megatron-lm").tie(trace, OneFOneB(2, 4))) == _head_bytes(
        trace
    )

"""A decoder with MTP depths keeps a copy of the word embedding on the MTP stage, all-reduced
with the first stage's at every step (Megatron-Core ``gpt_model.py`` l.173-174,
``finalize_model_grads.py`` l.146-147; :func:`sim.trace.decoder.tied_groups`): hand counts on a
tiny untied decoder (V = 32, h = 8, bf16: the embedding is 32 x 8 x 2 = 512 B). Its gradient
is all-reduced in the ``main_grad`` dtype (``finalize_model_grads.py`` l.250-258; fp32 under
bf16 unless the gradients are reduced in bf16: :func:`sim.parallel.finalize_grads.
main_grad_bytes`), as is a GPT trace's tied embedding between its first and last stage."""

from __future__ import annotations

import pytest
from test_finalize_grads import H100, LINK_BPS, _toy_gpus

from sim.compute.decoder import DecoderShape
from sim.config import parse_experiment
from sim.hardware.loader import load_hardware
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.trace.decoder import decoder_trace
from sim.trace.generator import transformer_trace

MTP = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, mtp_layers=1)  # embedding, block, mtp, head


def _run(shape, stages: int, framework: str = "megatron-lm", memory: dict | None = None):
    hw = _toy_gpus()
    trace = (
        decoder_trace(shape, name="q", microbatch_size=1, gpu=H100)
        if isinstance(shape, DecoderShape)
        else shape
    )
    exp = parse_experiment({
        "name": "x", "hardware": hw, "models": [{"name": "m", "trace": "q"}],
        "training": {"global_batch": 2, "iterations": 2}, "framework": framework,
        "options": {"boundaries": [0, 2]} if stages == 2 else {}, "memory": memory or {},
    })  # fmt: skip
    point = PointConfig(
        model="m", schedule="1f1b", stages=stages, dp_width=1, tensor_parallel=1,
        microbatch_size=1, microbatches=2, memory_policy="none", global_batch=2,
        framework=framework,
    )  # fmt: skip
    res = resolve(exp, point, load_hardware(hw), trace)
    _, log = evaluate(res)
    return res, [e for e in log.events if e.name.startswith("tied allreduce")]


def test_mtp_stage_holds_a_copy_of_the_embedding_and_all_reduces_it():
    """p = 2, stages [embedding, block] [mtp, head]: the MTP depth holds 512 B more (bf16
    weights) than at p = 1, and each of the two GPUs joins one all-reduce per step (2
    iterations) of the fp32 main gradient, 32 x 8 x 4 = 1024 B: a ring of 2 moves B/2 twice,
    B / 375 GB/s from the
    later arrival; 512 B with the gradients reduced in bf16."""
    one, none = _run(MTP, 1)
    two, events = _run(MTP, 2)
    assert none == []
    assert two.trace.layers[2].param_bytes - one.trace.layers[2].param_bytes == 512.0
    assert (
        sorted((e.device, e.nbytes) for e in events)
        == [("gpu0", 1024.0)] * 2 + [("gpu1", 1024.0)] * 2
    )
    for step in (events[0:2], events[2:4]):  # from the later arrival
        ring_s = max(e.end_s for e in step) - max(e.start_s for e in step)
        assert ring_s == pytest.approx(1024.0 / LINK_BPS, rel=1e-6)
    _, bf16 = _run(MTP, 2, memory={"grad_reduce_in_bf16": True})
    assert {e.nbytes for e in bf16} == {512.0} and len(bf16) == 4


@pytest.mark.parametrize(
    "dtype, framework, nbytes",
    [
        ("bf16", "megatron-lm", 256 * 64 * 4.0),  # fp32 main_grad
        ("fp16", "megatron-lm", 256 * 64 * 2.0),  # fp16: no fp32 main gradients
        ("bf16", "megatron-deepspeed", 256 * 64 * 2.0),  # the param's .grad (engine.py l.240)
    ],
    ids=["megatron-bf16", "megatron-fp16", "megatron-deepspeed"],
)
def test_gpt_tied_embedding_all_reduce_in_the_gradient_dtype(dtype, framework, nbytes):
    """A GPT trace (V = 256, h = 64) with tied embeddings on 2 stages: the first and the last
    stage all-reduce the V x h embedding gradient once per step, 4 B an element with
    Megatron-LM's fp32 main gradients, 2 B otherwise."""
    gpt = transformer_trace(
        "gpt", name="q", layers=2, hidden=64, heads=4, seq_len=128, vocab=256,
        microbatch_size=1, dtype=dtype, gpu=H100,
    )  # fmt: skip
    _, events = _run(gpt, 2, framework)
    assert {e.nbytes for e in events} == {nbytes} and len(events) == 2 * 2


def test_no_mtp_no_copy():
    plain = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16)
    assert decoder_trace(plain, name="q", microbatch_size=1, gpu=H100).shared == ()

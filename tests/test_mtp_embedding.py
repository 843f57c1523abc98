"""A decoder with MTP depths keeps a copy of the word embedding on the MTP stage, all-reduced
with the first stage's at every step (Megatron-Core ``gpt_model.py`` l.173-174,
``finalize_model_grads.py`` l.146-147; :func:`sim.trace.decoder.tied_groups`): hand counts on a
tiny untied decoder (V = 32, h = 8, bf16: the embedding is 32 x 8 x 2 = 512 B)."""

from __future__ import annotations

from test_finalize_grads import H100, _toy_gpus

from sim.compute.decoder import DecoderShape
from sim.config import parse_experiment
from sim.hardware.loader import load_hardware
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.trace.decoder import decoder_trace

MTP = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, mtp_layers=1)  # embedding, block, mtp, head


def _run(shape: DecoderShape, stages: int):
    hw = _toy_gpus()
    trace = decoder_trace(shape, name="q", microbatch_size=1, gpu=H100)
    exp = parse_experiment({
        "name": "x", "hardware": hw, "models": [{"name": "m", "trace": "q"}],
        "training": {"global_batch": 2, "iterations": 2}, "framework": "megatron-lm",
        "options": {"boundaries": [0, 2]} if stages == 2 else {},
    })  # fmt: skip
    point = PointConfig(
        model="m", schedule="1f1b", stages=stages, dp_width=1, tensor_parallel=1,
        microbatch_size=1, microbatches=2, memory_policy="none", global_batch=2,
        framework="megatron-lm",
    )  # fmt: skip
    res = resolve(exp, point, load_hardware(hw), trace)
    _, log = evaluate(res)
    return res, [e for e in log.events if e.name.startswith("tied allreduce")]


def test_mtp_stage_holds_a_copy_of_the_embedding_and_all_reduces_it():
    """p = 2, stages [embedding, block] [mtp, head]: the MTP depth holds 512 B more than at
    p = 1, and each of the two GPUs joins one 512 B all-reduce per step (2 iterations)."""
    one, none = _run(MTP, 1)
    two, events = _run(MTP, 2)
    assert none == []
    assert two.trace.layers[2].param_bytes - one.trace.layers[2].param_bytes == 512.0
    assert (
        sorted((e.device, e.nbytes) for e in events)
        == [("gpu0", 512.0)] * 2 + [("gpu1", 512.0)] * 2
    )


def test_no_mtp_no_copy():
    plain = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16)
    assert decoder_trace(plain, name="q", microbatch_size=1, gpu=H100).shared == ()

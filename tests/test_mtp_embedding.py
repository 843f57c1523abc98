"""A decoder with MTP depths keeps a copy of the word embedding on the MTP stage, all-reduced
with the first stage's at every step (Megatron-Core ``gpt_model.py`` l.173-174,
``finalize_model_grads.py`` l.146-147; :func:`sim.trace.decoder.tied_groups`): hand counts on a
tiny untied decoder (V = 32, h = 8, bf16: the embedding is 32 x 8 x 2 = 512 B). Its gradient
is all-reduced in the ``main_grad`` dtype (``finalize_model_grads.py`` l.250-258; fp32 under
bf16 unless the gradients are reduced in bf16: :func:`sim.parallel.finalize_grads.
main_grad_bytes`), as is a GPT trace's tied embedding between its first and last stage;
DeepSpeed's bf16 pipelines reduce an fp32 gradient too, and under Megatron FSDP each rank reduces
its shard."""

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
        ("bf16", "megatron-deepspeed", 256 * 64 * 4.0),  # BF16_Optimizer's fp32 _hp_grad
        ("fp16", "megatron-deepspeed", 256 * 64 * 2.0),  # the fp16 weight.grad
    ],
    ids=["megatron-bf16", "megatron-fp16", "megatron-deepspeed-bf16", "megatron-deepspeed-fp16"],
)
def test_gpt_tied_embedding_all_reduce_in_the_gradient_dtype(dtype, framework, nbytes):
    """A GPT trace (V = 256, h = 64) with tied embeddings on 2 stages: the first and the last
    stage all-reduce the V x h embedding gradient once per step, 4 B an element with
    Megatron-LM's fp32 main gradients and with DeepSpeed's bf16 (``_exec_reduce_tied_grads``
    reduces ``weight._hp_grad``, the ``BF16_Optimizer``'s fp32 gradient: microsoft/DeepSpeed@
    f5dde36 ``deepspeed/runtime/pipe/engine.py`` l.239-240, ``runtime/bf16_optimizer.py``
    l.124, l.285), 2 B with fp16 (``weight.grad``)."""
    gpt = transformer_trace(
        "gpt", name="q", layers=2, hidden=64, heads=4, seq_len=128, vocab=256,
        microbatch_size=1, dtype=dtype, gpu=H100,
    )  # fmt: skip
    _, events = _run(gpt, 2, framework)
    assert {e.nbytes for e in events} == {nbytes} and len(events) == 2 * 2


def test_no_mtp_no_copy():
    plain = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16)
    assert decoder_trace(plain, name="q", microbatch_size=1, gpu=H100).shared == ()


def _four_gpus() -> dict:
    """:func:`_toy_gpus` with two more GPUs on the same switches (p = 2 x w = 2)."""
    hw = _toy_gpus()
    gpu_links = [x for x in hw["links"] if x["a"] in ("gpu0", "gpu1")]
    more = [dict(x, a={"gpu0": "gpu2", "gpu1": "gpu3"}[x["a"]]) for x in gpu_links]
    return hw | {"num_gpus": 4, "links": hw["links"] + more}


@pytest.mark.parametrize("shard, nbytes", [(1, 1024.0), (2, 256.0)])
def test_megatron_fsdp_all_reduces_its_shard_of_the_mtp_embedding(shard, nbytes):
    """p = 2, w = 2: the MTP stage's copy of the word embedding (V = 32 x h = 8 = 256
    elements, fp32 main gradient: 1024 B) is all-reduced with the first stage's; under
    Megatron FSDP over dp_shard 2 each rank all-reduces its local shard
    (``_allreduce_embedding_grad`` takes ``grad._local_tensor``,
    NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/distributed/finalize_model_grads.py``
    l.251-253, all-reduced l.258), 128 elements in Megatron-FSDP's gradient dtype, the
    model's bf16 by default (``megatron_fsdp_main_grads_dtype`` None:
    ``megatron_fsdp/param_and_grad_buffer.py`` l.2313-2322; it never reads
    ``grad_reduce_in_fp32``): 128 x 2 B = 256 B."""
    hw = _four_gpus()
    trace = decoder_trace(MTP, name="q", microbatch_size=1, gpu=H100)
    exp = parse_experiment({
        "name": "x", "hardware": hw, "models": [{"name": "m", "trace": "q"}],
        "training": {"global_batch": 4, "iterations": 2}, "framework": "megatron-lm",
        "options": {"boundaries": [0, 2]},
    })  # fmt: skip
    point = PointConfig(
        model="m", schedule="1f1b", stages=2, dp_width=2, dp_shard=shard, tensor_parallel=1,
        microbatch_size=1, microbatches=2, memory_policy="none", global_batch=4,
        framework="megatron-lm",
    )  # fmt: skip
    _, log = evaluate(resolve(exp, point, load_hardware(hw), trace))
    events = [e for e in log.events if e.name.startswith("tied allreduce")]
    assert sorted((e.device, e.nbytes) for e in events) == [
        (f"gpu{g}", nbytes) for g in range(4) for _ in range(2)
    ]

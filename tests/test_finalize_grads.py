"""Megatron-Core's ``finalize_model_grads`` all-reduce over the tensor group after the
data-parallel reduction (:mod:`sim.parallel.finalize_grads`, :meth:`sim.engine.step.RankStep.
run`): hand counts of the norm and QK-norm gradients of a tiny decoder, the all-reduce's bytes
and its time by the ring closed form, and the cases where it does not run."""

from __future__ import annotations

import pytest
from test_tensor_parallel import two_gpus

from sim.compute.decoder import DecoderShape
from sim.compute.mla import MLAShape
from sim.config import parse_experiment
from sim.engine.step import FINALIZE_TP
from sim.events import EventKind, Stream
from sim.hardware.loader import load_hardware
from sim.parallel.finalize_grads import tp_summed_params
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.trace.decoder import decoder_trace
from sim.trace.generator import transformer_trace

H100 = load_hardware("dgx-h100").gpus[0].compute
# h = 8, 2 heads of 4, 2 KV heads, SwiGLU f = 16, V = 32, one block, Qwen3's QK-norm
QWEN = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, head_dim=4, qk_norm=True)
PLAIN = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, head_dim=4)
LINK_BPS = 375e9


def _toy_gpus() -> dict:
    """Two GPUs on one switch at 375 GB/s without latency, of a model NCCL's cost model does
    not know: collectives take the ring algorithm's time."""
    hw = two_gpus()
    hw["gpu"]["model"] = "toy"
    for link in hw["links"]:
        link["latency"] = "0 us"
    return hw


def _finalize_events(shape, t: int, sp: bool, framework: str = "megatron-lm") -> list:
    hw = _toy_gpus()
    trace = (
        shape
        if not isinstance(shape, DecoderShape)
        else decoder_trace(shape, name="q", microbatch_size=1, gpu=H100)
    )
    exp = parse_experiment({
        "name": "x", "hardware": hw, "models": [{"name": "m", "trace": "q"}],
        "training": {"global_batch": 2, "iterations": 2}, "framework": framework,
    })  # fmt: skip
    point = PointConfig(
        model="m", schedule="1f1b", stages=1, dp_width=1, tensor_parallel=t,
        sequence_parallel=sp, microbatch_size=1, microbatches=2, memory_policy="none",
        global_batch=2, framework=framework,
    )  # fmt: skip
    _, log = evaluate(resolve(exp, point, load_hardware(hw), trace))
    return [e for e in log.events if FINALIZE_TP in e.name]


@pytest.mark.parametrize("sp, params", [(True, 32), (False, 8)], ids=["sp", "no-sp"])
def test_tp2_allreduces_the_norm_and_qk_norm_gradients_once_per_step(sp, params):
    """Sequence parallelism at t = 2: the block's input and pre-MLP norms (2 x 8), its
    QK-norms (2 x 4) and the head's final norm (8): 32 parameters; without it the QK-norms
    alone (8: each rank normalises its own heads). Megatron-LM keeps fp32 main gradients
    under bf16: 4 B each, 128 B (32 B). A ring of 2 all-reduces B in 2(t-1) = 2 steps of
    B/t each: B / 375 GB/s. One event per GPU and step on stream tp, 2 iterations."""
    events = _finalize_events(QWEN, 2, sp)
    nbytes = params * 4.0
    assert len(events) == 2 * 2
    assert {e.nbytes for e in events} == {nbytes}
    assert {(e.kind, e.stream) for e in events} == {(EventKind.ALLREDUCE, Stream.TP)}
    for e in events:
        assert e.end_s - e.start_s == pytest.approx(2 * (nbytes / 2) / LINK_BPS, rel=1e-6)


@pytest.mark.parametrize(
    "shape, t, sp, framework",
    [
        (QWEN, 1, False, "megatron-lm"),  # one tensor rank: returns at once (l.427-428)
        (PLAIN, 2, False, "megatron-lm"),  # neither sequence parallelism nor QK-norm
        (QWEN, 2, True, "pipesim"),  # a framework without finalize_model_grads
    ],
    ids=["tp1", "tp2-no-sp-no-qk-norm", "pipesim"],
)
def test_no_tensor_group_allreduce(shape, t, sp, framework):
    assert _finalize_events(shape, t, sp, framework) == []


def test_mla_latent_norms_only_with_sequence_parallelism():
    """MLA (TE's LayerNormLinear up projections, not named q/k_layernorm): without sequence
    parallelism nothing; with it every whole parameter of the layer: input norm 8, q down
    8 x 16 and its norm 16, kv down 8 x (8 + 2) and its norm 8, pre-MLP norm 8 = 248."""
    m = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, mla=MLAShape(16, 8, 4, 2, 4))
    assert tp_summed_params("block", m, False) == 0
    assert tp_summed_params("block", m, True) == 248


def test_gpt_trace_allreduces_its_layernorms_and_row_biases():
    """A GPT trace (h = 64, 2 blocks, bf16) at t = 2 with sequence parallelism: per block two
    LayerNorms (2 x 2h) and the two row-parallel biases (2h), 6h; the head's final LayerNorm
    2h: 14h = 896 parameters, 4 B each (fp32 main gradients): 3584 B, once per step."""
    gpt = transformer_trace(
        "gpt", name="q", layers=2, hidden=64, heads=4, seq_len=128, vocab=256,
        microbatch_size=1, dtype="bf16", gpu=H100,
    )  # fmt: skip
    events = _finalize_events(gpt, 2, True)
    assert {e.nbytes for e in events} == {14 * 64 * 4.0} and len(events) == 2 * 2
    assert _finalize_events(gpt, 2, False) == []

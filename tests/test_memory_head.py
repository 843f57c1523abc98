"""The output layer and the loss as Megatron runs them (issue 27): the deferred embedding weight
gradient (``--defer-embedding-wgrad-compute``) and the fused cross entropy, by hand."""

from __future__ import annotations

import pytest

from sim.compute.decoder_shape import DecoderShape
from sim.config import parse_experiment
from sim.hardware.loader import load_hardware
from sim.memory.layer_work import WorkOptions, gpt_work, loss_work
from sim.parallel.layout import ParallelLayout
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.memory import point_memory
from sim.trace.decoder import decoder_trace
from sim.trace.generator import transformer_trace

H, S, V = 64, 32, 256
SHAPE = DecoderShape(layers=2, hidden=H, heads=4, seq_len=S, vocab=V, ffn_hidden=128)


def _framework(memory: dict, m: int = 4) -> tuple[float, float]:
    """The framework bytes of the first and the last pipeline rank."""
    topo = load_hardware("dgx-h100")
    trace = decoder_trace(SHAPE, name="m", microbatch_size=1, gpu=topo.gpus[0].compute)
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "dgx-h100",
            "models": [{"name": "m", "trace": "m"}],
            "training": {"global_batch": m, "dtype": "bf16"},
            "options": {"partition": "uniform"},
            "framework": "megatron-lm",
            "memory": memory,
        }
    )
    point = PointConfig(
        model="m", schedule="1f1b", stages=2, dp_width=1, microbatch_size=1, microbatches=m,
        memory_policy="none", global_batch=m, framework="megatron-lm",
    )  # fmt: skip
    pm = point_memory(Prepared(exp, "<t>", topo, {"m": trace}), point)
    return pm.ranks[0].by_category["framework"], pm.ranks[-1].by_category["framework"]


@pytest.mark.parametrize(("limit", "n_in", "n_grad"), [(2, 2, 2), (0, 4, 3), (8, 4, 3)])
def test_the_last_stage_keeps_limit_inputs_and_gradients(limit, n_in, n_grad):
    """m = 4, b = 1, bf16: input s*h*2 = 4096 B, output gradient s*V*2 = 16384 B per
    micro-batch; limit 2 keeps 2 of each, no limit 4 inputs and 3 gradients (the last
    micro-batch's backward comes after its forward)."""
    first, last = _framework({})
    first_d, last_d = _framework({"defer_embedding_wgrad": limit})
    assert last_d - last == n_in * S * H * 2 + n_grad * S * V * 2
    assert first_d == first  # no output layer on the first stage


def test_megatrons_fused_cross_entropy_adds_one_fp32_copy_in_its_backward():
    """--cross-entropy-fusion-impl native: the compiled calculate_gradients works on a
    functional copy of the fp32 softmax, 4 t V_t bytes (t = 32 tokens, V_t = 256)."""
    unfused = loss_work(32, 32, H, V, 2, WorkOptions(), stash=0.0, loss="unfused")
    native = loss_work(32, 32, H, V, 2, WorkOptions(), stash=0.0, loss="native")
    assert native.bwd_bytes - unfused.bwd_bytes == 4 * 32 * V
    assert native.fwd_bytes == unfused.fwd_bytes


def test_a_gpt_traces_loss_is_its_generator_input():
    """transformer_trace(cross_entropy_fusion="native") records the loss in the model shape and
    the memory model adds the compiled backward's fp32 copy, 4 t V = 4 x 32 x 256 bytes, to the
    head (t = 32 tokens, V = 256, tp = 1); its time is the fused loss's (test_loss_fusion.py)."""
    gpu = load_hardware("dgx-h100").gpus[0].compute
    lay = ParallelLayout(pp=1, dp_replicate=1)
    args = dict(name="g", layers=1, hidden=H, heads=4, seq_len=S, vocab=V, microbatch_size=1,
                gpu=gpu, dtype="bf16")  # fmt: skip
    plain = transformer_trace("gpt", **args)
    native = transformer_trace("gpt", cross_entropy_fusion="native", **args)
    head = (gpt_work(plain, lay, WorkOptions())[-1], gpt_work(native, lay, WorkOptions())[-1])
    assert head[1].bwd_bytes - head[0].bwd_bytes == 4 * S * V

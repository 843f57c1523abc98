"""Megatron-Core's router expert-bias update at the step (:mod:`sim.parallel.router_bias`,
:meth:`sim.engine.step.RankStep.router_bias`): a toy MoE decoder of 2 MoE layers x 8 experts
all-reduces 2 x 8 x 4 B = 64 B of fp32 counts over every GPU of its stage once per step, by
the ring closed form, then runs its update kernels; nothing without the flag or experts. The
flag's readers, and the fused router's token count in each forward."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from test_finalize_grads import H100, LINK_BPS, _toy_gpus

from sim.compute.decoder import DecoderShape
from sim.compute.moe import moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.config import parse_experiment
from sim.events import EventKind, Stream
from sim.hardware.loader import load_hardware
from sim.parallel.router_bias import ROUTER_BIAS
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.runs.csv_shape import row_shape_flags
from sim.runs.decoder_express import decoder_shape as express_shape
from sim.runs.megatron_args import read_megatron
from sim.trace.decoder import decoder_trace
from sim.trace.hf_config import read_config

# h = 8, 2 heads, s = 4, V = 32; 2 layers, each a MoE MLP of 8 experts (top-2, width 16)
MOE = MoEShape(8, 8, 2, 16, router_expert_bias=True)
BIASED = DecoderShape(2, 8, 2, 4, vocab=32, ffn_hidden=16, moe=MOE)


def _bias_events(shape: DecoderShape, t: int, dp: int) -> list:
    """The expert-bias events of 2 iterations of ``shape`` on the two toy GPUs (375 GB/s, no
    latency, ring algorithm: :func:`test_finalize_grads._toy_gpus`) at ``t`` x ``dp``."""
    hw = _toy_gpus()
    trace = decoder_trace(shape, name="q", microbatch_size=1, gpu=H100)
    exp = parse_experiment({
        "name": "x", "hardware": hw, "models": [{"name": "m", "trace": "q"}],
        "training": {"global_batch": 2 * dp, "iterations": 2}, "framework": "megatron-lm",
    })  # fmt: skip
    point = PointConfig(
        model="m", schedule="1f1b", stages=1, dp_width=dp, tensor_parallel=t,
        sequence_parallel=t > 1, microbatch_size=1, microbatches=2, memory_policy="none",
        global_batch=2 * dp,
        framework="megatron-lm",
    )  # fmt: skip
    _, log = evaluate(resolve(exp, point, load_hardware(hw), trace))
    return [e for e in log.events if ROUTER_BIAS in e.name]


@pytest.mark.parametrize("t, dp", [(2, 1), (1, 2)], ids=["tp2", "dp2"])
def test_counts_allreduce_over_the_stage_and_update_kernels(t, dp):
    """2 routers x 8 experts x 4 B = 64 B over the stage's 2 GPUs (tensor or data ranks alike:
    Megatron's tensor-and-data group): a ring of n = 2 all-reduces B in 2(n-1) = 2 steps of
    B/n, B / 375 GB/s, on stream comm, once per GPU and step (2 iterations). Then 12 update
    kernels (8 + 2 per router) on the compute stream, each a launch overhead plus its bytes
    at the HBM rate: 56 n + 16 L + 12 n = 68 x 16 + 32 = 1120 B for n = 16 counts, L = 2."""
    events = _bias_events(BIASED, t, dp)
    reduce = [e for e in events if e.kind == EventKind.ALLREDUCE]
    update = [e for e in events if e.kind == EventKind.OPTIMIZER]
    assert len(reduce) == len(update) == 2 * 2
    assert {(e.nbytes, e.stream) for e in reduce} == {(64.0, Stream.COMM)}
    for e in reduce:
        assert e.end_s - e.start_s == pytest.approx(64.0 / LINK_BPS, rel=1e-6)
    spec = load_hardware(_toy_gpus()).gpus[0].compute
    assert spec is not None
    update_s = 12 * spec.kernel_overhead_s + 1120.0 / spec.hbm_rate_Bps()
    for e in update:
        assert e.stream == Stream.COMPUTE
        assert e.end_s - e.start_s == pytest.approx(update_s, rel=1e-9)


@pytest.mark.parametrize(
    "shape",
    [
        replace(BIASED, moe=replace(MOE, router_expert_bias=False)),  # no flag
        DecoderShape(2, 8, 2, 4, vocab=32, ffn_hidden=16),  # dense: no router (l.358-360)
    ],
    ids=["no-flag", "dense"],
)
def test_no_update_without_a_biased_router(shape):
    assert _bias_events(shape, 2, 1) == []


def test_flag_read_from_megatron_bridge_and_hugging_face():
    """``--moe-router-enable-expert-bias`` (Megatron-LM args and functional tests), the
    Bridge's DeepSeek-V3 / Kimi K2 rows (their bridges set it), and ``topk_method: noaux_tc``
    of a Hugging Face config (DeepSeek-V3, not V2's ``group_limited_greedy``)."""
    moe = {
        "num-layers": 2, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
        "micro-batch-size": 1, "global-batch-size": 8, "bf16": True, "vocab-size": 1000,
        "num-experts": 8, "moe-router-topk": 2, "moe-ffn-hidden-size": 32,
    }  # fmt: skip

    def biased(**flags) -> bool:
        run = read_megatron(moe | flags, name="t", source="<test>", num_gpus=8, gpu="B200")
        assert not [n for n in run.args if n.status == "unmapped"]
        shape = express_shape(run.shape, 128, "flash").moe
        return shape is not None and shape.router_expert_bias

    assert biased(**{"moe-router-enable-expert-bias": True}) and not biased()
    row = pd.Series({"model": "DeepSeekV3", "layers": 61, "hidden": 7168, "moe_experts": 256})
    assert row_shape_flags(row)["moe-router-enable-expert-bias"] is True
    assert "moe-router-enable-expert-bias" not in row_shape_flags(
        row.replace("DeepSeekV3", "Qwen3")
    )
    hf = Path(__file__).resolve().parents[1] / "examples" / "hf"
    assert read_config(hf / "deepseek-v3-config.json", 4096).moe.router_expert_bias
    assert not read_config(hf / "deepseek-v2-config.json", 4096).moe.router_expert_bias


def test_forward_counts_the_routed_tokens_with_the_fused_router():
    """``_apply_expert_bias`` in each forward: one kernel reading the r x E bool map and the
    E fp32 counts and writing the counts: r = 16 tokens, E = 8: 128 + 32 + 32 = 192 B."""
    on = MoEShape(64, 8, 2, 32, router_expert_bias=True)
    kernels = [k for k in moe_fwd(on, 16, 16, (4.0,) * 8, 2) if "bias_count" in k.name]
    assert [k.bytes for k in kernels] == [192.0]
    off = moe_fwd(replace(on, router_expert_bias=False), 16, 16, (4.0,) * 8, 2)
    assert not [k for k in off if "bias_count" in k.name]

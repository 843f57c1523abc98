"""DeepSpeed's all-reduce after the backward in buckets of 5e8 elements, one after another
(sim.engine.buckets.serial_bucket_bytes, PipelineRuntime.dp_serial_bucket_bytes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import chain_topology, uniform_input

from sim.engine import simulate
from sim.engine.buckets import serial_bucket_bytes
from sim.engine.inputs import PipelineRuntime
from sim.framework import get_framework
from sim.hardware.loader import load_hardware
from sim.memory.plan import StagePlan
from sim.trace.generator import transformer_trace


def test_bucket_count_and_sizes_for_a_parameter_count():
    """2.3e9 fp16 gradients (18B at t 8) in buckets of 5e8 elements: 4 full + 3e8;
    6.6e8 (39B t8 p8): 5e8 + 1.6e8; 4e8: one bucket."""
    assert serial_bucket_bytes(2 * 2.3e9, 2 * 5e8) == pytest.approx((1e9,) * 4 + (6e8,))
    assert serial_bucket_bytes(2 * 6.6e8, 2 * 5e8) == pytest.approx((1e9, 3.2e8))
    assert serial_bucket_bytes(2 * 4e8, 2 * 5e8) == (8e8,)


def test_engine_reduces_the_buckets_one_after_another():
    """w 4 on a 1 GB/s chain, 4 GB of gradients in buckets of 1.5 GB: three all-reduces per
    rank (1.5, 1.5, 1.0 GB), each 2(w-1)/w x bytes / bandwidth, back to back."""
    w, grad = 4, 4e9
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=grad)
    inp = uniform_input(
        "gpipe", 1, 1, w=w, topology=chain_topology(w, bandwidth_Bps=1e9), plan=plan
    )
    rt = PipelineRuntime(dp_serial_bucket_bytes=1.5e9)
    log = simulate(replace(inp, dp_bucket_bytes=0.0, runtime=rt))
    ar = sorted(
        (e for e in log.events if e.kind == "allreduce" and e.replica == 0), key=lambda e: e.start_s
    )
    assert [e.duration_s for e in ar] == pytest.approx([1.5 * 1.5, 1.5 * 1.5, 1.5 * 1.0])
    assert ar[1].start_s == pytest.approx(ar[0].end_s) and ar[2].start_s == pytest.approx(
        ar[1].end_s
    )


def test_deepspeed_pipeline_buckets_5e8_fp16_elements():
    """DeepSpeed's pipeline engine: 5e8 elements x 2 B (fp16 gradients) = 1e9 bytes; the
    default profile runs one collective."""
    trace = transformer_trace(
        "gpt", name="g", layers=1, hidden=64, heads=4, seq_len=32, vocab=128,
        microbatch_size=1, gpu=load_hardware("dgx-a100-40gb").gpus[0].compute,
    )  # fmt: skip
    topo = load_hardware("dgx-a100-40gb")
    for name in ("megatron-deepspeed", "deepspeed"):
        assert get_framework(name).runtime(topo, trace).dp_serial_bucket_bytes == 1e9
    assert get_framework("pipesim").runtime(topo, trace).dp_serial_bucket_bytes == 0.0

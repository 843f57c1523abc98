"""The peak's transients (sim.memory.transients), each computed by hand from its formula, the
engine's send buffer for a stage's input gradient, and Galvatron's activation peaks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.hardware.capacity import MIB, NO_RESERVE
from sim.memory.transients import (
    grads_not_allocated_bytes,
    input_grad_send_bytes,
    logits_grad_bytes,
    mlp_backward_working_bytes,
    zero3_backward_bytes,
    zero3_gathered_bytes,
)
from sim.point.simulate import evaluate, resolve
from sim.trace.schema import LayerProfile, Trace
from tests.helpers import chain_topology
from tests.test_memory_model import _exp, _point


def test_logits_gradient_is_fp32_s_b_v():
    # Llama-2-7B, s = 4096, b = 1, V = 32000: 4 * 4096 * 32000 B = 500 MiB
    assert logits_grad_bytes(4096, 1, 32000) == 4 * 4096 * 32000
    assert logits_grad_bytes(4096, 1, 32000) / MIB == pytest.approx(500.0)
    assert logits_grad_bytes(2, 3, 5, elem_bytes=2) == 60


def test_mlp_backward_working_memory_is_fc1_output_and_residual_gradients():
    # SwiGLU f = 11008: fc1 is 2f wide; (22016 + 4096) * 4096 * 1 * 2 B = 204 MiB
    got = mlp_backward_working_bytes(4096, 1, 4096, 2 * 11008)
    assert got == (22016 + 4096) * 4096 * 2
    assert got / MIB == pytest.approx(204.0)
    assert mlp_backward_working_bytes(8, 2, 4, 16, elem_bytes=4) == (16 + 4) * 8 * 2 * 4


def test_zero3_unit_holds_gathered_weights_and_unsharded_gradient():
    layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096  # Llama-2-7B layer parameters
    assert zero3_gathered_bytes(layer) == 2 * layer
    assert zero3_backward_bytes(layer) == 4 * layer
    assert zero3_gathered_bytes(10, elem_bytes=4) == 40


def test_gradients_not_yet_allocated_follow_the_backward_order():
    units = [1.0, 2.0, 4.0, 8.0]  # forward order; backward runs 8, 4, 2, 1
    assert grads_not_allocated_bytes(units, 0) == 15
    assert grads_not_allocated_bytes(units, 1) == 7
    assert grads_not_allocated_bytes(units, 4) == 0
    with pytest.raises(ValueError):
        grads_not_allocated_bytes(units, 5)
    with pytest.raises(ValueError):
        logits_grad_bytes(-1, 1, 1)


def test_input_gradient_is_a_send_buffer_until_its_send_completes():
    """Two stages, one micro-batch per iteration, no reserve: at the end of each backward the
    last stage holds its 10 MiB input gradient until the send over the 1 GB/s link lands on
    stage 0 (10 MiB / 1e9 B/s later), which then holds it as its receive buffer until its own
    backward ends; afterwards no buffer is left on either GPU."""
    assert input_grad_send_bytes(10 * MIB) == 10 * MIB
    layer = LayerProfile("l", 1e-3, 2e-3, 100 * MIB, 50 * MIB, 10 * MIB)
    trace = Trace("two", (layer, replace(layer, name="l2")), 1, "fp16", "test")
    topo = chain_topology(2, bandwidth_Bps=1e9)
    topo = replace(topo, gpus=tuple(replace(g, reserve=NO_RESERVE) for g in topo.gpus))
    _, log = evaluate(resolve(_exp(trace), _point(trace, "gpipe", p=2), topo, trace))
    sends = [e for e in log.memory if e.device == "gpu1" and "send grad" in e.label]
    sent = [e for e in log.memory if e.device == "gpu1" and e.label.startswith("sent")]
    assert sends and len(sends) == len(sent)
    for held, freed in zip(sends, sent, strict=True):
        assert (held.delta_bytes, freed.delta_bytes) == (10 * MIB, -10 * MIB)
        assert freed.time_s - held.time_s == pytest.approx(10 * MIB / 1e9)
    for dev in ("gpu0", "gpu1"):
        left = sum(e.delta_bytes for e in log.memory if e.device == dev and e.category == "buffers")
        assert left == pytest.approx(0.0)


def test_galvatron_activation_peaks_with_pipelining_and_checkpointing():
    """Every act_peak row of the s = 4096 file with tp = 1 (pp = 1, 2, 4; checkpointing) is
    predicted through sim.memory.transients within the bound, none excluded."""
    from benchmarks.accuracy.accuracy_memory import BOUND, rows

    peaks = [
        r for r in rows() if r["category"] == "act_peak" and r["seq"] == 4096 and r["why"] == ""
    ]
    strategies = {r["strategy"] for r in peaks}
    assert {"1_1_8_sp", "1_1_8_c_sp", "2_1_4_sp", "4_1_2_sp"} <= strategies
    assert len(peaks) == 12  # 4 + 4 at pp = 1 (plain, checkpointed), 2 + 2 at pp = 2, 4
    for r in peaks:
        assert r["modelled"], r
        assert abs(r["rel_error"]) <= BOUND, r

"""Partitioned model states (ZeRO-3, PatrickStar chunk owners), ZeRO-Offload's gradient buckets,
the server's host DRAM pool and host Adam per socket: closed forms derived by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.engine.collectives import RING_STEPS
from sim.hardware.parts import Host, Link
from sim.hardware.topology import Topology
from sim.memory.registry import parse_policy
from sim.trace.generator import transformer_trace
from tests.helpers import chain_topology
from tests.policy_helpers import category_peak, run, tiny_gpt

GiB = 2.0**30


def psi(trace) -> float:
    """Parameters of the whole model (one stage), fp16: param_bytes / 2."""
    return sum(x.param_bytes for x in trace.layers) / 2


def model_state(plan) -> float:
    return plan.weight_bytes + plan.grad_bytes + plan.optimizer_bytes + plan.host_bytes


@pytest.mark.parametrize("w", [2, 4])
def test_zero3_holds_16_psi_over_w_per_rank(w):
    """ZeRO-3 with mixed-precision Adam: (2 + 2 + 12) * Psi / w per replica (memory.md §1), on
    the GPU; with ':offload' none on the GPU and (2 + 4 + 12) * Psi / w in host DRAM, the
    gradients in fp32 as DeepSpeed keeps them there."""
    trace = tiny_gpt()
    topo = chain_topology(w, memory_bytes=64 * GiB)
    P = psi(trace)
    res, met, _ = run(trace, topo, "zero3", p=1, w=w, m=1, schedule="gpipe")
    for (plan,) in res.sim_input.plans:
        assert plan.weight_bytes == pytest.approx(2 * P / w)
        assert plan.grad_bytes == pytest.approx(2 * P / w)
        assert plan.optimizer_bytes == pytest.approx(12 * P / w)
        assert model_state(plan) == pytest.approx(16 * P / w)
    assert met.fits
    res, met, _ = run(trace, topo, "zero3:offload", p=1, w=w, m=1, schedule="gpipe")
    for (plan,) in res.sim_input.plans:
        # DeepSpeed keeps fp32 gradients on the host: 2 + 4 + 12 (sim.memory.deepspeed)
        assert plan.static_gpu_bytes == 0 and plan.host_bytes == pytest.approx(18 * P / w)
    assert met.fits


@pytest.mark.parametrize("w", [2, 4])
def test_chunked_owner_holds_14_bytes_per_chunk_element(w):
    """PatrickStar with one micro-batch: the gradient reuses the fp16 chunk; chunks are whole
    allocations of C elements. The tiny model packs into one chunk of C = 2**20, padded with
    w - 1 dummy chunks to one group: replica 0 owns the real chunk (2C fp16 + 12C optimizer),
    every other replica a dummy (2C fp16, no optimizer chunk); each action all-gathers the
    group, w * 2C bytes."""
    trace = tiny_gpt()
    topo = chain_topology(w, memory_bytes=64 * GiB)
    C = 2**20
    assert psi(trace) < C
    res, met, _ = run(trace, topo, "chunked:1", p=1, w=w, m=1, schedule="gpipe")
    for r, (plan,) in enumerate(res.sim_input.plans):
        assert model_state(plan) == pytest.approx((14 if r == 0 else 2) * C)
        assert plan.gather_bytes == pytest.approx(w * 2 * C) and plan.scatter_bytes == w * 2 * C
    assert met.fits


def _collective_bytes(log, iterations: int) -> float:
    """Bytes replica 0 of stage 0 moves through its collectives per iteration, counted as ring
    steps over w - 1 times the buffer (all-reduce 2B, reduce-scatter and all-gather B)."""
    total = sum(
        RING_STEPS[e.kind] * e.nbytes
        for e in log.events
        if e.kind in RING_STEPS and e.replica == 0 and e.device == "gpu0"
    )
    return total / iterations


@pytest.mark.parametrize("policy", ["zero3", "chunked:1"])
def test_partitioned_parameters_move_3_psi_per_iteration(policy):
    """ZeRO §7.2.2: all-gather in the forward (Psi), again in the backward (Psi) and a
    reduce-scatter of the gradients (Psi): 3 Psi, 1.5x the 2 Psi of DP's all-reduce (in fp16
    elements; bytes here are 2 per element). PatrickStar moves whole chunks
    (``client._fetch_remote_chunks`` all-gathers the payloads): its Psi is the group's
    capacity, one chunk of 2**20 elements per replica here."""
    trace = tiny_gpt()
    topo = chain_topology(2, memory_bytes=64 * GiB)
    P = psi(trace) if policy == "zero3" else 2 * 2**20
    res, _, log = run(trace, topo, policy, p=1, w=2, m=1, schedule="gpipe")
    zero = _collective_bytes(log, res.iterations)
    assert zero == pytest.approx(3 * 2 * P)
    res, _, log = run(trace, topo, "none", p=1, w=2, m=1, schedule="gpipe")
    dp = _collective_bytes(log, res.iterations)
    assert dp == pytest.approx(2 * 2 * psi(trace))
    if policy == "zero3":
        assert zero / dp == pytest.approx(1.5)


def test_zero_offload_keeps_one_gradient_bucket_on_the_gpu():
    """With a 1M-element reduce bucket and a model of several M parameters, the GPU's gradient
    memory never exceeds one bucket (2 MiB of fp16); every backward streams its gradients to
    the host."""
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=4,
        hidden=512,
        heads=8,
        seq_len=128,
        vocab=1000,
        microbatch_size=1,
        gpu_model="x",
        peak_flops=1e12,
    )
    assert psi(trace) > 4 * 2**20
    topo = chain_topology(2, memory_bytes=64 * GiB)
    res, met, log = run(trace, topo, "zero_offload:1", p=2, m=4)
    bucket = 2**20 * 2
    for gpu in ("gpu0", "gpu1"):
        assert 0 < category_peak(log, gpu, "gradients") <= bucket
    writebacks = [e for e in log.events if e.kind == "chunk_move" and "write-back" in e.name]
    assert len(writebacks) == 2 * 4 * res.iterations  # one per B of each stage
    assert met.fits
    _, _, full = run(trace, topo, "none", p=2, m=4)
    assert category_peak(full, "gpu0", "gradients") > 2 * bucket


def test_recompute_forms_parse_and_drop_activations():
    for text in ("chunked:recompute", "chunked:32:recompute", "zero_offload:recompute"):
        policy = parse_policy(text)
        assert policy.mode == "full" and policy.recompute
    assert parse_policy("zero3:offload:recompute").offload
    for bad in ("chunked:recompute:recompute", "zero3:8", "zero_offload:x"):
        with pytest.raises(ValueError):
            parse_policy(bad)


def test_chunked_with_recompute_fits_a_model_chunked_alone_does_not():
    """Long sequences: the activation stash, not the model states, overflows the GPU; chunks
    alone cannot help, full recompute keeps each layer's input only."""
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=8,
        hidden=1024,
        heads=16,
        seq_len=2048,
        vocab=1000,
        microbatch_size=4,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    topo = chain_topology(2, bandwidth_Bps=12e9, memory_bytes=8 * GiB)
    _, alone, _ = run(trace, topo, "chunked", p=1, w=1, m=2, schedule="gpipe")
    _, both, _ = run(trace, topo, "chunked:recompute", p=1, w=1, m=2, schedule="gpipe")
    assert not alone.fits and both.fits


def _two_sockets(topo: Topology, dram_bytes: tuple[float, float]) -> Topology:
    """``topo`` with GPU ``i`` on socket ``cpu{i % 2}`` of the given DRAM."""
    gpus = tuple(replace(g, host=f"cpu{i % 2}") for i, g in enumerate(topo.gpus))
    links = [lk for lk in topo.links if "cpu" not in lk.name]
    for g in gpus:
        links += [
            Link(f"{g.name}->{g.host}", g.name, g.host, 10e9, 0.0),
            Link(f"{g.host}->{g.name}", g.host, g.name, 10e9, 0.0),
        ]
    links += [
        Link("cpu0->cpu1", "cpu0", "cpu1", 10e9, 0.0),
        Link("cpu1->cpu0", "cpu1", "cpu0", 10e9, 0.0),
    ]
    hosts = tuple(Host(f"cpu{i}", b) for i, b in enumerate(dram_bytes))
    return Topology("two-sockets", gpus, hosts, tuple(links))


def test_host_dram_is_one_pool_per_server():
    """Two stage replicas offload H bytes each. A server of 1.5 H holds either alone but not
    both; a server of 2.6 H holds both even when one socket has only 0.1 H (one pool)."""
    trace = tiny_gpt()
    base = chain_topology(2, memory_bytes=64 * GiB)
    res, _, _ = run(trace, base, "zero_offload", p=2, m=2)
    h = [plan.host_total_bytes for plan in res.sim_input.plans[0]]
    assert max(h) < 1.5 * min(h)
    tight = _two_sockets(base, (1.5 * max(h), 0.0))
    _, met, _ = run(trace, tight, "zero_offload", p=2, m=2)
    assert not met.fits and met.oom[0][0] == "host"
    for s in (0, 1):  # each alone fits (one stage per run: the other stage's plan is none)
        policy = "|".join("zero_offload" if k == s else "none" for k in (0, 1))
        _, alone, _ = run(trace, tight, policy, p=2, m=2)
        assert alone.fits
    pooled = _two_sockets(base, (2.5 * max(h), 0.1 * min(h)))
    _, met, _ = run(trace, pooled, "zero_offload", p=2, m=2)
    assert met.fits


def _host_steps(log):
    return sorted(
        (e.start_s, e.end_s) for e in log.events if e.kind == "host_optimizer" and e.iteration == 1
    )


def test_host_adams_share_the_servers_cpu_adam_pool():
    """CPU Adam's threads use every socket of the server (sim.memory.host_adam): two replicas'
    steps on a one-socket server run one after another (2 x one step from the first start to
    the last end); on a two-socket server each gets the summed rate (half the time), still one
    after another, so both end one step after the first start, as on their own sockets."""
    trace = tiny_gpt()
    one = chain_topology(2, memory_bytes=64 * GiB)
    slow = replace(one, hosts=(Host("cpu0", 512 * GiB, adam_params_per_s=1e6),), _route_cache={})
    res, _, log = run(trace, slow, "zero_offload", p=1, w=2, m=1, schedule="gpipe")
    step_s = res.sim_input.plans[0][0].host_optimizer_s
    (a0, a1), (b0, b1) = _host_steps(log)
    assert a1 - a0 == pytest.approx(step_s) and b1 - b0 == pytest.approx(step_s)
    assert b0 >= a1 - 1e-12 and b1 - a0 == pytest.approx(2 * step_s)
    two = _two_sockets(one, (256 * GiB, 256 * GiB))
    two = replace(
        two, hosts=tuple(replace(h, adam_params_per_s=1e6) for h in two.hosts), _route_cache={}
    )
    res2, _, log = run(trace, two, "zero_offload", p=1, w=2, m=1, schedule="gpipe")
    assert res2.sim_input.plans[0][0].host_optimizer_s == pytest.approx(step_s / 2)
    (a0, a1), (b0, b1) = _host_steps(log)
    assert b0 >= a1 - 1e-12 and b1 - a0 == pytest.approx(step_s)

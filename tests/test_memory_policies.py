"""Memory policies: formulas, swaps on real links, peers, chunks, the auto planner, the grammar."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from sim.config import parse_experiment
from sim.engine import simulate
from sim.errors import InputError
from sim.hardware.capacity import NO_RESERVE
from sim.hardware.loader import load_hardware
from sim.hardware.topology import Topology
from sim.memory.chunks import access_sequence, belady, steady_misses
from sim.memory.context import StageContext
from sim.memory.estimate import (
    HEADROOM,
    activation_peak_bytes,
    budget_bytes,
    incoming_bytes,
    planned_peak_bytes,
    swap_in_s,
    swap_live,
    swap_out_s,
)
from sim.memory.per_stage import PerStagePolicy
from sim.memory.plan import StagePlan
from sim.memory.recompute import RecomputePolicy
from sim.memory.registry import parse_policy
from sim.memory.states import StateBytes
from sim.plan.point_row import point_row
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import prepare
from sim.point.simulate import evaluate, resolve
from sim.point.stages import stage_contexts
from sim.schedules.analysis import peak_in_flight
from sim.trace.generator import transformer_trace
from sim.trace.schema import LayerProfile, Trace
from tests.helpers import chain_topology, uniform_input

GiB = 2.0**30
POLICIES = [
    "none",
    "recompute",
    "recompute:selective",
    "recompute:full:2",
    "cpu_swap",
    "d2d_swap",
    "zero_offload",
    "chunked",
    "auto",
]


def tiny_gpt(layers: int = 4, b: int = 2, h: int = 64, a: int = 4, s: int = 128) -> Trace:
    return transformer_trace(
        "gpt",
        name="tiny",
        layers=layers,
        hidden=h,
        heads=a,
        seq_len=s,
        vocab=100,
        microbatch_size=b,
        gpu_model="x",
        peak_flops=1e12,
    )


def run(
    trace: Trace,
    topo: Topology,
    policy: str,
    *,
    schedule: str = "1f1b",
    p: int = 2,
    w: int = 1,
    m: int = 4,
    optimizer_step: bool = True,
    **options,
):
    """Resolve and simulate one point; returns (resolved, metrics, log)."""
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "x",
            "models": [{"name": trace.name, "trace": "x"}],
            "training": {
                "global_batch": m * w * trace.microbatch_size,
                "optimizer_step": optimizer_step,
            },
            "options": options,
        }
    )
    point = PointConfig(
        model=trace.name,
        schedule=schedule,
        stages=p,
        dp_width=w,
        microbatch_size=trace.microbatch_size,
        microbatches=m,
        memory_policy=policy,
        global_batch=m * w * trace.microbatch_size,
    )
    res = resolve(exp, point, topo, trace)
    met, log = evaluate(res)
    return res, met, log


def category_peak(log, device: str, category: str) -> float:
    live = peak = 0.0
    for ev in sorted(log.memory, key=lambda e: e.time_s):
        if ev.device == device and ev.category == category:
            live += ev.delta_bytes
            peak = max(peak, live)
    return peak


def dgx1(capacity_gib: float = 32.0) -> Topology:
    """DGX-1 with GPUs of ``capacity_gib`` that count tensors only (no runtime reserve: these
    tests are about the policies; tests/test_memory_model.py covers the reserve)."""
    topo = load_hardware("dgx1-v100-32gb")
    return replace(
        topo,
        gpus=tuple(
            replace(g, memory_bytes=capacity_gib * GiB, reserve=NO_RESERVE) for g in topo.gpus
        ),
        _route_cache={},
    )


# ------------------------------------------------------------------ formulas (memory.md §1, §2)


def test_activation_memory_follows_korthikanti_per_policy():
    """1F1B, p=2, m=4: stage s holds p - s stashes; per block 34sbh + 5as^2b (none),
    34sbh (selective, plus one layer's attention core while recomputing), 2sbh (full, plus one
    layer's whole stash while recomputing)."""
    b, s, h, a, L = 2, 128, 64, 4, 4
    trace = tiny_gpt(L, b, h, a, s)
    sbh, core = s * b * h, 5 * a * s * s * b
    block = 34 * sbh + core
    topo = chain_topology(2, memory_bytes=64 * GiB)
    bounds = {"boundaries": [0, 3]}  # stage 0: embedding + 2 blocks; stage 1: 2 blocks + head
    emb, head = trace.layers[0].act_bytes, trace.layers[-1].act_bytes
    expect = {
        "none": (2 * (emb + 2 * block), 1 * (2 * block + head)),
        "recompute:selective": (2 * (emb + 2 * 34 * sbh) + core, 2 * 34 * sbh + head + core),
    }
    for policy, (s0, s1) in expect.items():
        _, _, log = run(trace, topo, policy, **bounds)
        assert category_peak(log, "gpu0", "activations") == pytest.approx(s0), policy
        assert category_peak(log, "gpu1", "activations") == pytest.approx(s1), policy
    res, _, log = run(trace, topo, "recompute", **bounds)
    plan0 = res.sim_input.plans[0][0]
    # only blocks are checkpointed (Megatron, DeepSpeed's GPTModelPipe, the torch replay): the
    # embedding keeps its stash, each block its 2sbh input
    assert plan0.resident_act_bytes == pytest.approx(emb + 2 * 2 * sbh)
    assert plan0.rebuild_bytes == pytest.approx(block - 2 * sbh)
    assert category_peak(log, "gpu0", "activations") == pytest.approx(
        2 * (emb + 2 * 2 * sbh) + block - 2 * sbh
    )
    full = res.sim_input.plans[0][1]  # the head is not re-run, only its stage's 2 blocks
    assert full.recompute_s == pytest.approx(sum(x.fwd_s for x in trace.layers[3:5]))
    assert full.recompute_regions == 2


def test_pipemare_memory_is_one_weight_copy_and_2_p_minus_s_plus_2_stashes():
    """PipeMare (schedules.md §2.5): one weight copy (no stashed versions) and 2(p-s)+2 stashes
    in flight on stage s (sim/schedules/pipemare.py), by hand for p=2, m=8 (8 micro-batches per
    iteration, several iterations): stage 0 holds 6, stage 1 holds 4. PipeDream, for contrast,
    holds p-s weight versions and p-s stashes."""
    trace = tiny_gpt()
    topo = chain_topology(2, memory_bytes=64 * GiB)
    bounds = {"boundaries": [0, 3]}
    res, _, log = run(trace, topo, "none", schedule="pipemare", m=8, **bounds)
    edges = [0, 3, len(trace.layers)]
    for s, stashes in enumerate((6, 4)):
        layers = trace.layers[edges[s] : edges[s + 1]]
        act = sum(x.act_bytes for x in layers)
        weights = sum(x.param_bytes for x in layers)
        assert category_peak(log, f"gpu{s}", "activations") == pytest.approx(stashes * act)
        assert res.sim_input.plans[0][s].weight_bytes == pytest.approx(weights)
    res, _, _ = run(trace, topo, "none", schedule="pipedream", m=8, **bounds)
    stage0 = sum(x.param_bytes for x in trace.layers[:3])
    assert res.sim_input.plans[0][0].weight_bytes == pytest.approx(2 * stage0)


def test_selective_recompute_time_is_the_attention_core_share():
    trace = tiny_gpt()
    res, _, _ = run(trace, chain_topology(2, memory_bytes=64 * GiB), "recompute:selective")
    b, s, h = 2, 128, 64
    share = 4 * b * s * s * h / (24 * b * s * h * h + 4 * b * s * s * h)
    layers = trace.layers[res.boundaries[0] : res.boundaries[1]]
    blocks = [x for x in layers if x.name.startswith("block")]
    assert res.sim_input.plans[0][0].recompute_s == pytest.approx(
        sum(x.fwd_s for x in blocks) * share
    )


def test_selective_without_attention_fields_does_nothing_and_says_so():
    layers = tuple(LayerProfile(f"l{i}", 1e-3, 2e-3, 1e6, 1e8, 1e6) for i in range(4))
    trace = Trace("plain", layers, 1, "fp16", "x", {"source": "test"})
    res, _, _ = run(trace, chain_topology(2, memory_bytes=64 * GiB), "recompute:selective")
    plan = res.sim_input.plans[0][0]
    assert plan.recompute_s == 0 and plan.resident_act_bytes == plan.act_bytes
    assert "does nothing" in plan.notes["warning"]


def test_model_state_bytes_per_policy():
    """none 16 B/param on the GPU; ZeRO-Offload 2 + 2 on the GPU (the model is smaller than one
    reduce bucket) and 4 + 2 + 4 + 8 on the host (DeepSpeed's buffers); gradients go down in
    fp32 at the step's micro-batch (4 B/param) and in 16 bits before it (2 B/param), i.e.
    (3 * 2 + 4) / 4 = 2.5 B/param per B with m = 4, and 2 B/param come up after the step (the
    16-bit staging copy); chunks 16 B/param (14 with one micro-batch: the gradient reuses the
    parameter chunk, PatrickStar)."""
    trace = tiny_gpt()
    topo = chain_topology(2, memory_bytes=64 * GiB)
    res, _, log = run(trace, topo, "zero_offload")
    for s, plan in enumerate(res.sim_input.plans[0]):
        psi = (
            sum(
                x.param_bytes
                for x in trace.layers[res.boundaries[s] :][
                    : len(trace.layers) if s else res.boundaries[1]
                ]
            )
            / 2
        )
        assert plan.weight_bytes + plan.grad_bytes == pytest.approx(4 * psi)
        # DeepSpeed on the host: fp32 master (pinned: torch 2's power-of-two block), 16-bit
        # staging copy, fp32 gradients, Adam moments (sim.memory.deepspeed)
        pinned_master = 2 ** math.ceil(math.log2(4 * psi))
        assert plan.optimizer_bytes == 0
        assert plan.host_bytes == pytest.approx(pinned_master + (2 + 4 + 8) * psi)
        moved = sum(t.nbytes for t in plan.step_transfers_before + plan.step_transfers_after)
        assert moved == pytest.approx(2 * psi) and plan.writeback_bytes == pytest.approx(2.5 * psi)
        # CPU Adam and the unscale pass, 8 of its 28 host bytes per parameter (zero_offload)
        rate = topo.hosts[0].adam_params_per_s
        assert plan.host_optimizer_s == pytest.approx(psi / rate * (1 + 8 / 28))
    assert any(e.kind == "host_optimizer" for e in log.events)
    for m, per_param in ((4, 16), (1, 14)):
        res, _, _ = run(trace, topo, "chunked", m=m, schedule="gpipe")
        plan = res.sim_input.plans[0][0]
        psi = (plan.weight_bytes + plan.grad_bytes) / (per_param - 12)
        assert plan.static_gpu_bytes == pytest.approx(per_param * psi)


# ------------------------------------------------------------------ swaps on real links


def _two_layers(f1_b1_s: float) -> Trace:
    layers = (
        LayerProfile("l0", 0.25, 0.5, 0.0, 1e9, 0.0),
        LayerProfile("l1", f1_b1_s / 2, f1_b1_s / 2, 0.0, 1e6, 0.0),
    )
    return Trace("two", layers, 1, "fp16", "x", {"source": "test"})


@pytest.mark.parametrize("rest_s,stall_s", [(0.5, 1.5), (1.25, 0.75), (3.0, 0.0)])
def test_late_swap_stalls_backward_by_exactly_its_lateness(rest_s, stall_s):
    """Stage 0 swaps its 1 GB stash to the host at 1 GB/s after F (1 s) and back (1 s); its B
    could start when stage 1 is done, ``rest_s`` after F. It stalls ``2 - rest_s`` if late."""
    topo = chain_topology(2, bandwidth_Bps=1e9, memory_bytes=64 * GiB)
    _, met, log = run(
        _two_layers(rest_s),
        topo,
        "cpu_swap|none",
        schedule="gpipe",
        m=1,
        optimizer_step=False,
        boundaries=[0, 1],
    )
    stalls = [
        e for e in log.events if e.kind == "stall" and e.device == "gpu0" and e.iteration == 0
    ]
    assert sum(e.duration_s for e in stalls) == pytest.approx(stall_s)
    b0 = next(e for e in log.events if e.name == "0B0")
    assert b0.start_s == pytest.approx(0.25 + max(rest_s, 2.0))
    swaps = sorted(
        (e.start_s, e.end_s) for e in log.events if e.kind.startswith("swap") and e.iteration == 0
    )
    assert swaps == [pytest.approx((0.25, 1.25)), pytest.approx((1.25, 2.25))]


def test_two_gpus_sharing_a_pcie_uplink_swap_slower_than_one():
    """DGX-1: GPUs 0 and 1 share switch sw0's uplink; GPUs 0 and 2 do not."""
    layers = (LayerProfile("l0", 0.01, 0.02, 0.0, 4e9, 0.0),)
    trace = Trace("one", layers, 1, "fp16", "x", {"source": "test"})

    def swap_end(placement):
        _, met, log = run(
            trace,
            dgx1(),
            "cpu_swap",
            schedule="gpipe",
            p=1,
            w=2,
            m=2,
            optimizer_step=False,
            placement=placement,
        )
        ends = [e.end_s for e in log.events if e.kind == "swap_out" and e.iteration == 0]
        return max(ends) - 0.01, met.iteration_time_s  # swaps start after the first F

    shared, apart = swap_end([[0], [1]]), swap_end([[0], [2]])
    assert shared[0] == pytest.approx(2 * apart[0], rel=0.02)  # 4 copies on one uplink, not 2
    assert shared[1] > apart[1]


def test_striped_swap_runs_parts_in_parallel_and_parks_bytes_on_each_peer():
    topo = chain_topology(3, bandwidth_Bps=1e9, memory_bytes=64 * GiB)
    plan = StagePlan(
        act_bytes=3e9, resident_act_bytes=0.0, swap_targets=(("gpu1", 1e9), ("gpu2", 2e9))
    )
    assert plan.swap_bytes == 3e9
    log = simulate(uniform_input("gpipe", 1, 1, topology=topo, plan=plan, fwd_s=1.0, bwd_s=1.0))
    outs = sorted(e.duration_s for e in log.events if e.kind == "swap_out")
    assert outs == [pytest.approx(1.0), pytest.approx(2.0)]
    assert log.meta["peak_bytes"]["gpu1"] == pytest.approx(1e9)
    assert log.meta["peak_bytes"]["gpu2"] == pytest.approx(2e9)
    b = next(e for e in log.events if e.name == "0B0")
    assert b.start_s == pytest.approx(1.0 + 2.0 + 2.0)  # both parts out, then both back in


def _one_layer_ctx(topo: Topology, n: int, fwd_s: float, act_bytes: float) -> StageContext:
    """A one-layer stage on gpu0 with ``n`` micro-batches in flight and no model states."""
    layer = LayerProfile("l0", fwd_s, 2 * fwd_s, 0.0, act_bytes, 0.0)
    return StageContext(
        0, 1, 0, 1, "gpu0", "cpu0", (layer,), n, 1, StateBytes(2, 2, 12), 2, 64 * GiB, topo
    )


def test_swap_outs_slower_than_a_forward_queue_and_the_estimate_counts_them():
    """GPipe, one stage, m = n = 7, F 1 s, its whole 1.05 GB stash swapped to gpu1 at 1 GB/s
    (1.05 s). Copy j ends at 1 + 1.05 (j + 1) s, so when F6 ends (7 s) those of F5 and F6 have
    not: with the swap-ins of F0 (for B0) and F1 (prefetched for B1 as B0 is issued), 4 stashes
    are on the GPU, ``2 + n - floor((n - 1) f / t)``; the estimate counts 4 too (it used to
    drain the queue continuously, ``n (1 - f / t) + 2`` = 2.33, and count 3)."""
    topo, a = chain_topology(2, bandwidth_Bps=1e9, memory_bytes=64 * GiB), 1.05e9
    plan = StagePlan(act_bytes=a, resident_act_bytes=0.0, swap_bytes=a, swap_target="gpu1")
    log = simulate(uniform_input("gpipe", 1, 7, topology=topo, plan=plan, fwd_s=1.0, bwd_s=2.0))
    assert log.meta["peak_bytes"]["gpu0"] == pytest.approx(4 * a)
    ctx = _one_layer_ctx(topo, 7, 1.0, a)
    assert swap_live(ctx, plan.swap_parts) == 4
    assert activation_peak_bytes(plan, ctx) == pytest.approx(4 * a)


@pytest.mark.parametrize("shared,out_s", [(False, 2.0), (True, 3.0)])
def test_striped_parts_sharing_a_link_queue_and_the_estimate_sums_them(shared, out_s):
    """A 1 GB and a 2 GB part at 1 GB/s: over their own links (DGX-1's NVLinks) they end after
    2 s; through one switch (NVSwitch) both cross the GPU's uplink, which is FIFO, so the last
    ends after 1 + 2 = 3 s, and the estimate says so (it used to take the slowest part, 2 s)."""
    topo = chain_topology(3, bandwidth_Bps=1e9, memory_bytes=64 * GiB, shared=shared)
    parts = (("gpu1", 1e9), ("gpu2", 2e9))
    plan = StagePlan(act_bytes=3e9, resident_act_bytes=0.0, swap_targets=parts)
    log = simulate(uniform_input("gpipe", 1, 1, topology=topo, plan=plan, fwd_s=1.0, bwd_s=1.0))
    ends = [e.end_s for e in log.events if e.kind == "swap_out"]
    assert max(ends) - 1.0 == pytest.approx(out_s)
    ctx = _one_layer_ctx(topo, 1, 1.0, 3e9)
    assert swap_out_s(ctx, parts) == pytest.approx(out_s)
    assert swap_in_s(ctx, parts) == pytest.approx(out_s)


# ------------------------------------------------------------------ MPress d2d swap


def d2d_trace(b: int) -> Trace:
    return transformer_trace(
        "gpt",
        name="g",
        layers=16,
        hidden=1536,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=b,
        gpu_model="x",
        peak_flops=62.5e12,
    )


def planned(res, policy: str, trace: Trace, **options):
    """``(contexts, plans)`` of ``policy`` for resolved point ``res`` (what the planner decided,
    before the engine ran), flat over replicas and stages."""
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "x",
            "models": [{"name": trace.name, "trace": "x"}],
            "training": {"global_batch": res.point.global_batch},
            "options": options,
        }
    )
    program = res.sim_input.program
    rows = stage_contexts(
        res.sim_input.topology,
        res.trace,
        res.boundaries,
        res.placement,
        res.schedule,
        peak_in_flight(program),
        exp,
        program,
    )
    flat = [c for row in rows for c in row]
    return flat, parse_policy(policy).plan_all(flat)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.integers(1, 4),
    sched=st.sampled_from(["1f1b", "gpipe", "pipedream", "pipemare"]),
    layout=st.sampled_from([(4, 1), (8, 1), (4, 2)]),
    where=st.floats(0.05, 0.95),
    policy=st.sampled_from(["d2d_swap", "d2d_swap+recompute", "d2d_swap:weights"]),
)
# Draws that failed: swap-outs slower than the forwards queue up over the warm-up, and the
# planner counted fewer stashes on the GPU than the engine holds (estimate.swap_live).
@example(b=1, sched="pipedream", layout=(8, 1), where=0.5, policy="d2d_swap:weights")
@example(b=1, sched="pipedream", layout=(4, 1), where=0.8, policy="d2d_swap:weights")
@example(b=3, sched="1f1b", layout=(8, 1), where=0.425, policy="d2d_swap")
def test_d2d_never_places_on_a_peer_more_than_its_capacity_minus_its_peak(
    b, sched, layout, where, policy
):
    """Every sample asserts, for every GPU: the bytes MPress's planner parks on it for its peers
    (``parked_microbatches * part`` per borrower) fit in its budget minus its own planned peak,
    and only GPUs whose own plan fits receive any (sim/memory/mpress.py). The engine agrees:
    every GPU whose plan says it fits, receivers included, stays within capacity. The capacity
    is drawn between the lightest and the heaviest GPU's peak without a policy, so some GPUs
    overflow (d2d has a reason to move bytes) and some fit."""
    p, w = layout
    trace = d2d_trace(b)
    placement = [[r * p + s for s in range(p)] for r in range(w)]  # the same in both runs
    kw = dict(schedule=sched, p=p, w=w, m=16, partition="uniform", placement=placement)
    _, _, alone = run(trace, dgx1(80.0), "none", **kw)
    peaks = alone.meta["peak_bytes"]
    used = [peaks[f"gpu{g}"] for g in range(8) if f"gpu{g}" in peaks]
    low, high = min(used), max(used)
    assume(high > low * 1.01)
    cap_bytes = low + where * (high - low)
    res, met, log = run(trace, dgx1(cap_bytes / GiB), policy, **kw)
    ctxs, plans = planned(res, policy, trace, partition="uniform", placement=placement)
    parked = incoming_bytes(list(zip(ctxs, plans, strict=True)))
    parked = {g: v for g, v in parked.items() if g.startswith("gpu")}  # not host swaps
    own = {
        c.gpu: (planned_peak_bytes(pl, c), budget_bytes(c))
        for c, pl in zip(ctxs, plans, strict=True)
    }
    assert set(parked) <= set(own), "peers are GPUs of the job"
    for gpu, (peak, budget) in own.items():
        got = parked.get(gpu, 0.0)
        assert got <= max(0.0, budget - peak) * (1 + 1e-9) + 1e-6, (gpu, got, budget - peak)
    event(f"peers received bytes: {bool(parked)}")
    over = {device for device, *_ in log.meta.get("over_capacity", [])}
    for key, notes in log.meta["policy_notes"].items():
        if key != "policy" and notes["fits"]:
            assert not _stage_gpus(key, res.sim_input.placement) & over, (key, met.oom)
    for gpu in parked:
        assert log.meta["peak_bytes"][gpu] <= cap_bytes * (1 + 1e-9), gpu


def _fit_cases():
    return dict(
        b=st.integers(1, 4),
        sched=st.sampled_from(["1f1b", "gpipe", "pipedream", "pipedream_2bw", "pipemare"]),
        layout=st.sampled_from([(4, 1), (8, 1), (4, 2)]),
        margin=st.floats(0.0, 0.3),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_fit_cases())
# Draws that failed: d2d_swap parked stashes whose swap-outs queued (estimate.swap_live).
@example(b=2, sched="pipedream", layout=(8, 1), margin=0.234375)
@example(b=1, sched="1f1b", layout=(8, 1), margin=0.25)
@example(b=1, sched="pipedream_2bw", layout=(8, 1), margin=0.15)
def test_d2d_fits_every_model_recompute_fits(b, sched, layout, margin):
    """Every sample asserts: on GPUs just large enough for ``recompute`` (its own peak plus a
    drawn margin, so it fits by construction), ``d2d_swap+recompute`` and ``d2d_swap`` fit too:
    MPress's planner keeps "full recompute, nothing swapped" among its candidates and takes the
    fitting ones first (sim/memory/mpress.py)."""
    p, w = layout
    kw = dict(schedule=sched, p=p, w=w, m=16, partition="uniform")
    trace = d2d_trace(b)
    _, base, log = run(trace, dgx1(80.0), "recompute", **kw)
    cap = max(v for g, v in log.meta["peak_bytes"].items() if g.startswith("gpu"))
    cap = cap / (1 - HEADROOM) * (1 + margin)
    _, rec, _ = run(trace, dgx1(cap / GiB), "recompute", **kw)
    assert rec.fits
    for policy in ("d2d_swap+recompute", "d2d_swap"):
        _, met, _ = run(trace, dgx1(cap / GiB), policy, **kw)
        assert met.fits, (policy, met.oom)


def act_heavy_trace() -> Trace:
    """16 equal layers whose stash (1 GiB) and output (256 MiB) dwarf their weights (64 MiB):
    under 1F1B with full recompute, stage s keeps ``p - s`` micro-batches of its layers' inputs,
    so early GPUs overflow while late ones have room."""
    mib = 2.0**20
    layers = tuple(
        LayerProfile(f"l{i}", 1e-3, 2e-3, 64 * mib, 1024 * mib, 256 * mib) for i in range(16)
    )
    return Trace("act-heavy", layers, 1, "fp16", "x", {"source": "test"})


def test_d2d_recompute_fits_a_model_recompute_alone_cannot():
    """Hand-built: 1F1B, p=8, m=16, on GPUs whose capacity lies 20% of the way down from the
    heaviest GPU's recompute peak to the lightest's. Recompute alone overflows the heavy early
    stages; MPress parks their checkpoints on NVLink peers with room, so both d2d forms fit."""
    trace, kw = act_heavy_trace(), dict(schedule="1f1b", p=8, m=16, partition="uniform")
    _, _, log = run(trace, dgx1(80.0), "recompute", **kw)
    peaks = [v for g, v in log.meta["peak_bytes"].items() if g.startswith("gpu")]
    cap = max(peaks) - 0.2 * (max(peaks) - min(peaks))
    _, rec, _ = run(trace, dgx1(cap / GiB), "recompute", **kw)
    assert not rec.fits
    for policy in ("d2d_swap+recompute", "d2d_swap"):
        _, met, log = run(trace, dgx1(cap / GiB), policy, **kw)
        assert met.fits, (policy, met.oom)
        notes = log.meta["policy_notes"]
        assert any(v.get("peers_gib_per_microbatch") for k, v in notes.items() if k != "policy")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_fit_cases())
def test_d2d_weights_fits_whenever_none_fits(b, sched, layout, margin):
    """Every sample asserts: on GPUs just large enough for ``none``, ``d2d_swap:weights`` fits.
    It used to fit less: it moved weight versions into the stash unconditionally and counted
    lenders' spare memory without them, over-reserving peers (sim/memory/mpress.py)."""
    p, w = layout
    kw = dict(schedule=sched, p=p, w=w, m=16, partition="uniform")
    trace = d2d_trace(b)
    _, _, log = run(trace, dgx1(80.0), "none", **kw)
    cap = max(v for g, v in log.meta["peak_bytes"].items() if g.startswith("gpu"))
    cap = cap * (1 + margin)
    _, plain, _ = run(trace, dgx1(cap / GiB), "none", **kw)
    assert plain.fits
    _, met, _ = run(trace, dgx1(cap / GiB), "d2d_swap:weights", **kw)
    assert met.fits, met.oom


def test_d2d_uses_light_peers_over_nvlink_and_reports_them():
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=16,
        hidden=1536,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=4,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    kw = dict(schedule="1f1b", p=8, m=16, partition="uniform")  # stage 0 heaviest
    res, met, log = run(trace, dgx1(8.0), "d2d_swap", **kw)
    notes = log.meta["policy_notes"]["s0"]
    assert notes["choice"] == "d2d + keep" and notes["peers_gib_per_microbatch"]
    assert notes["added_ms"] == 0 and met.stall_s == 0 and met.recompute_s == 0
    nv = {lk.name for lk in res.sim_input.topology.links if lk.kind == "nvlink"}
    swaps = [e for e in log.events if e.kind == "swap_out" and e.stage == 0]
    assert swaps and all(set(e.links) <= nv for e in swaps)
    _, base, _ = run(trace, dgx1(8.0), "none", **kw)
    assert not base.fits and met.fits
    assert met.throughput_samples_per_s == pytest.approx(base.throughput_samples_per_s)


# ------------------------------------------------------------------ chunks (PatrickStar)


def test_belady_evicts_the_chunk_used_farthest_in_the_future():
    seq = [0, 1, 2, 0, 3, 0, 1, 2]
    res = belady(seq, 3)
    # at 4 (chunk 3): next uses 0 -> 5, 1 -> 6, 2 -> 7: evict 2 (LRU would evict 1);
    # at 7 (chunk 2): 0, 1, 3 are never used again: the lowest id goes (PatrickStar's ties)
    assert res.evictions == ((4, 2), (7, 0))
    assert res.misses == (0, 1, 2, 4, 7)


def _lru_misses(seq, cap):
    cache, misses = [], 0
    for c in seq:
        if c in cache:
            cache.remove(c)
        else:
            misses += 1
            if len(cache) >= cap:
                cache.pop(0)
        cache.append(c)
    return misses


@settings(max_examples=60, deadline=None)
@given(seq=st.lists(st.integers(0, 6), max_size=40), cap=st.integers(1, 5))
def test_belady_never_misses_more_than_lru(seq, cap):
    assert len(belady(seq, cap).misses) <= _lru_misses(seq, cap)


def test_forward_backward_chunk_order_and_steady_misses():
    seq, ops = access_sequence(["F", "B"], 4)
    assert seq == [0, 1, 2, 3, 3, 2, 1, 0] and ops == ["F"] * 4 + ["B"] * 4
    assert steady_misses(["F", "B"] * 2, 4, 4) == (0, 0)
    # a cache of 3: each reversal reuses what the last pass left: one miss per pass
    assert steady_misses(["F", "B"], 4, 3) == (1, 1)


def test_chunked_streams_chunks_when_the_gpu_is_short_and_still_fits():
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=8,
        hidden=2048,
        heads=16,
        seq_len=512,
        vocab=1024,  # the largest parameter group is then fc1, 4h^2 + 4h < 17 * 2**20
        microbatch_size=1,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    topo = chain_topology(2, bandwidth_Bps=12e9, memory_bytes=1.25 * GiB)
    res, met, log = run(trace, topo, "chunked:17", schedule="1f1b", p=2, m=4)
    plan = res.sim_input.plans[0][0]
    assert plan.fetch_bytes > 0 and plan.host_bytes > 0
    assert any(e.kind == "chunk_move" for e in log.events)
    assert met.fits and log.meta["policy_notes"]["s0"]["streamed_chunks"] > 0
    _, none, _ = run(trace, topo, "none", schedule="1f1b", p=2, m=4)
    assert not none.fits


def test_sharded_data_parallel_reduce_scatters_and_all_gathers():
    trace = tiny_gpt()
    topo = chain_topology(4, bandwidth_Bps=1e9, memory_bytes=64 * GiB)
    _, _, log = run(trace, topo, "zero_offload", p=2, w=2, m=2)
    kinds = {e.kind for e in log.events}
    assert {"reduce_scatter", "all_gather"} <= kinds and "allreduce" not in kinds
    rs = next(e for e in log.events if e.kind == "reduce_scatter")
    assert rs.duration_s == pytest.approx(0.5 * 2 * (2 - 1) / 2 * rs.nbytes / 1e9)


# ------------------------------------------------------------------ auto


def _fitting(trace, topo, policy, **kw):
    _, met, log = run(trace, topo, policy, **kw)
    return met, log


@pytest.mark.parametrize(
    "cap,sched,p", [(5.0, "1f1b", 8), (16.0, "gpipe", 4), (8.0, "pipedream", 4), (6.0, "1f1b", 4)]
)
def test_auto_fits_when_a_single_policy_fits_and_is_about_as_fast(cap, sched, p):
    """Each case is one where keeping everything (``none``) does not fit and some single policy
    does (asserted, so every case exercises auto's choice): auto must fit, say so in its notes,
    and be within 5% of the fastest single policy that fits."""
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=24,
        hidden=2048,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=1,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    topo = dgx1(cap)
    auto, log = _fitting(trace, topo, "auto", schedule=sched, p=p, m=16)
    others = {
        pol: _fitting(trace, topo, pol, schedule=sched, p=p, m=16)[0] for pol in POLICIES[:-1]
    }
    assert not others["none"].fits, "case must need a policy"
    fitting = [o.throughput_samples_per_s for o in others.values() if o.fits]
    assert fitting, "case must have a single policy that fits"
    assert auto.fits, auto.oom
    assert all(v["fits"] for k, v in log.meta["policy_notes"].items() if k != "policy")
    assert auto.throughput_samples_per_s >= 0.95 * max(fitting)


def test_auto_picks_the_strictly_best_policy():
    """Uniform 8-stage 1F1B on 8 GiB V100s: the first stages do not fit, the last ones have room
    one NVLink hop away. Parking stashes there (MPress) costs nothing; every other policy is
    strictly slower (selective recompute a little, full recompute, swaps over the shared PCIe
    uplinks and host optimizers much more): auto must pick d2d for the heavy stages."""
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=16,
        hidden=1536,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=4,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    kw = dict(schedule="1f1b", p=8, m=16, partition="uniform")
    results = {pol: _fitting(trace, dgx1(8.0), pol, **kw) for pol in POLICIES}
    fit = {pol: met.throughput_samples_per_s for pol, (met, _) in results.items() if met.fits}
    singles = {k: v for k, v in fit.items() if k != "auto"}
    assert max(singles, key=singles.get) == "d2d_swap" and not results["none"][0].fits
    assert all(v < 0.99 * singles["d2d_swap"] for k, v in singles.items() if k != "d2d_swap")
    notes = results["auto"][1].meta["policy_notes"]
    assert "d2d" in notes["s0"]["choice"] and "d2d" in notes["s1"]["choice"]
    assert fit["auto"] == pytest.approx(singles["d2d_swap"])


def _stage_gpus(key: str, placement) -> set[str]:
    """GPUs of a policy-notes key: ``s3`` (stage 3 of every replica) or ``r1s3``."""
    import re

    m = re.fullmatch(r"(?:r(\d+))?s(\d+)", key)
    assert m, key
    replicas = range(len(placement)) if m.group(1) is None else [int(m.group(1))]
    return {f"gpu{placement[r][int(m.group(2))]}" for r in replicas}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    "cap,sched,p,w",
    [
        (20.0, "gpipe", 4, 2),
        (6.0, "1f1b", 8, 1),
        (8.0, "pipedream", 4, 1),
        (9.0, "pipedream_2bw", 4, 2),
    ],
)
def test_a_stage_whose_notes_say_it_fits_does_fit(policy, cap, sched, p, w):
    """The planning estimate (GPU peak, peers' reservations, host DRAM) is never optimistic:
    every stage whose notes say ``fits`` runs on GPUs the engine's ledger keeps within capacity.
    Each case overflows without a policy yet leaves some stage fitting under every policy
    (asserted), so every sample checks at least one stage."""
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=24,
        hidden=2048,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=1,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    res, met, log = run(
        trace, dgx1(cap), policy, schedule=sched, p=p, w=w, m=16, partition="uniform"
    )
    over = {device for device, *_ in log.meta.get("over_capacity", [])}
    said_fits = [k for k, v in log.meta["policy_notes"].items() if k != "policy" and v["fits"]]
    assert said_fits, "case must leave some stage fitting"
    for key in said_fits:
        assert not _stage_gpus(key, res.sim_input.placement) & over, (key, met.oom)
    if len(said_fits) == len(log.meta["policy_notes"]) - ("policy" in log.meta["policy_notes"]):
        assert met.fits, met.oom


def test_the_notes_cases_overflow_without_a_policy():
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=24,
        hidden=2048,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=1,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    for cap, sched, p, w in [
        (20.0, "gpipe", 4, 2),
        (6.0, "1f1b", 8, 1),
        (8.0, "pipedream", 4, 1),
        (9.0, "pipedream_2bw", 4, 2),
    ]:
        met, _ = _fitting(
            trace, dgx1(cap), "none", schedule=sched, p=p, w=w, m=16, partition="uniform"
        )
        assert not met.fits, (cap, sched)


# ------------------------------------------------------------------ grammar, config, results


@pytest.mark.parametrize(
    "spec,cls",
    [
        ("recompute:full:4", "RecomputePolicy"),
        ("recompute:selective", "RecomputePolicy"),
        ("cpu_swap:0.5", "CpuSwapPolicy"),
        ("d2d_swap:weights", "D2DSwapPolicy"),
        ("chunked:32", "ChunkedPolicy"),
        ("none|auto", "PerStagePolicy"),
    ],
)
def test_policy_specs(spec, cls):
    pol = parse_policy(spec)
    assert type(pol).__name__ == cls and pol.text == spec
    assert parse_policy(spec) is pol  # parsed once: every point with the string shares it


def test_parse_policy_gives_the_typed_fields_the_string_says():
    plain = parse_policy("recompute")
    assert isinstance(plain, RecomputePolicy) and (plain.text, plain.mode, plain.layers) == (
        "recompute",
        "full",
        None,
    )
    full = parse_policy("recompute:full:4")
    assert (full.name, full.mode, full.layers, full.text) == (
        "recompute",
        "full",
        4,
        "recompute:full:4",
    )
    assert parse_policy("recompute:selective").mode == "selective"
    assert parse_policy("cpu_swap").fraction == 1.0 and parse_policy("cpu_swap:0.5").fraction == 0.5
    per = parse_policy("none|recompute:full:2|cpu_swap:0.25|none")
    assert isinstance(per, PerStagePolicy)
    assert {p.name for p in per.parts()} == {"none", "recompute", "cpu_swap"}
    assert [per.for_stage(s, 4).text for s in range(4)] == [
        "none",
        "recompute:full:2",
        "cpu_swap:0.25",
        "none",
    ]
    assert per.for_stage(2, 4).fraction == 0.25
    with pytest.raises(ValueError, match="names 4 stages, not 2"):
        per.for_stage(0, 2)
    with pytest.raises(KeyError, match="unknown memory policy 'swap'"):
        parse_policy("swap")
    with pytest.raises(ValueError, match="fraction"):
        parse_policy("cpu_swap:2")


@pytest.mark.parametrize(
    "bad",
    ["recompute:half", "recompute:full:0", "cpu_swap:2", "chunked:big", "none:1", "swap", "auto:x"],
)
def test_bad_policy_is_an_input_error_naming_the_field(bad):
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "dgx1-v100-32gb",
            "models": [{"name": "g", "trace": "gpt2-1b"}],
            "sweep": {"memory_policy": ["none", bad]},
        }
    )
    with pytest.raises(InputError) as e:
        expand(prepare(exp, "experiments/t.yaml"))
    assert e.value.field == "sweep.memory_policy.1"


def test_stage_policies_option():
    data = {
        "name": "t",
        "hardware": "dgx1-v100-32gb",
        "models": [{"name": "g", "trace": "gpt2-1b"}],
        "training": {"global_batch": 8},
        "sweep": {"stages": [2, 4]},
        "options": {"stage_policies": ["recompute:full:2", "cpu_swap", "none", "none"]},
    }
    prep = prepare(parse_experiment(data), "experiments/t.yaml")
    points, skipped = expand(prep)
    assert [(pt.stages, pt.memory_policy) for pt in points] == [
        (4, "recompute:full:2|cpu_swap|none|none")
    ]
    assert "names 4 stages" in skipped[0][1]
    row = point_row(prep, points[0])[0]
    notes = json.loads(row["policy_notes"])
    # stage 0's first two layers are the embedding and one block: only the block is
    # checkpointed (sim.memory.recompute)
    assert notes["s0"]["choice"] == "full:1" and notes["s1"]["choice"].startswith("cpu_swap")
    data["options"]["stage_policies"][1] = "cpu_swap:7"
    with pytest.raises(InputError) as e:
        expand(prepare(parse_experiment(data), "experiments/t.yaml"))
    assert e.value.field == "options.stage_policies.1"
    data["sweep"]["memory_policy"] = "none"
    with pytest.raises(InputError, match="either"):
        expand(prepare(parse_experiment(data), "experiments/t.yaml"))


def test_results_row_has_policy_columns():
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "dgx1-v100-32gb",
            "models": [{"name": "g", "trace": "gpt2-1b"}],
            "training": {"global_batch": 8},
            "sweep": {"stages": 4, "memory_policy": "cpu_swap"},
        }
    )
    prep = prepare(exp, "experiments/t.yaml")
    row = point_row(prep, expand(prep)[0][0])[0]
    h, layers, vocab, seq = 2048, 20, 50257, 1024  # traces/gpt2-1b.yaml
    # blocks 12h^2 + 13h (Narayanan et al. SC'21), token + position embeddings, final
    # LayerNorm (2h) and an untied LM head (Vh)
    params = layers * (12 * h * h + 13 * h) + (vocab + seq) * h + 2 * h + vocab * h
    assert row["memory_policy"] == "cpu_swap" and row["parameters"] == params
    assert row["swap_bytes"] > 0 and row["recompute_s"] == 0
    assert json.loads(row["policy_notes"])["s0"]["target"] == "cpu0"


def test_memory_summary_table_and_plots(tmp_path):
    from sim.report.memory_summary import LARGEST, memory_summary, write_memory_summary

    rows = []
    for model, params in (("small", 1e9), ("big", 2e10)):
        for pol, tput in (("none", 10.0), ("auto", 9.0)):
            fits = not (model == "big" and pol == "none")
            rows.append(
                dict(
                    model=model,
                    parameters=params,
                    memory_policy=pol,
                    fits=fits,
                    throughput_samples_per_s=tput / (1 + (model == "big")),
                )
            )
    df = pd.DataFrame(rows)
    table = memory_summary(df)
    assert list(table.index) == ["small", "big", LARGEST]
    assert table.loc["small", "fastest policy"] == "none"
    assert table.loc["big", "fastest policy"] == "auto"
    assert table.loc[LARGEST, "none"] == "small" and table.loc[LARGEST, "auto"] == "big"
    _, written = write_memory_summary(df, tmp_path)
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)

"""Memory policies that swap: cpu_swap on real links (lateness, shared uplinks, striping) and
MPress's d2d swap to peer GPUs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from sim.config import parse_experiment
from sim.engine import simulate
from sim.hardware.topology import Topology
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
from sim.memory.plan import StagePlan
from sim.memory.registry import parse_policy
from sim.memory.states import StateBytes
from sim.point.stages import stage_contexts
from sim.schedules.analysis import peak_in_flight
from sim.trace.schema import LayerProfile, Trace
from tests.helpers import chain_topology, uniform_input
from tests.policy_helpers import GiB, d2d_trace, dgx1, run, stage_gpus

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
            assert not stage_gpus(key, res.sim_input.placement) & over, (key, met.oom)
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
    trace = d2d_trace(4)
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

"""Engine scenarios with exact answers: closed forms, golden makespans, memory, contention."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import simulate
from sim.memory.plan import StagePlan
from sim.metrics import compute_metrics
from tests.helpers import chain_topology, uniform_input


def _makespan(schedule, p, m, **kw):
    log = simulate(uniform_input(schedule, p, m, **kw))
    return log.iteration_ends_s[0], log


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 24), sched=st.sampled_from(["gpipe", "1f1b"]))
def test_bubble_closed_form_uniform_free_comm(p, m, sched):
    if sched == "1f1b" and m < p:
        m = p
    log = simulate(uniform_input(sched, p, m, iterations=2))
    met = compute_metrics(log, stages=p, microbatches=m, synchronous=True, samples_per_step=m)
    assert met.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
    assert met.iteration_time_s == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("sched", ["gpipe", "1f1b"])
@pytest.mark.parametrize(
    "p,m,expected", [(4, 8, 33.0), (4, 16, 57.0), (8, 16, 69.0), (8, 32, 117.0)]
)
def test_golden_unit_time_makespans(sched, p, m, expected):
    """schedules.md §3: t_F = 1, t_B = 2, zero communication."""
    makespan, _ = _makespan(sched, p, m)
    assert makespan == pytest.approx(expected)


@pytest.mark.parametrize("sched", ["pipedream_2bw", "pipedream", "pipemare"])
def test_async_schedules_have_no_steady_state_bubble(sched):
    p, m = 4, 8
    from sim.schedules.registry import get_schedule

    schedule = get_schedule(sched)(p, m)
    it = schedule.steady_state_iterations()
    log = simulate(uniform_input(sched, p, m, iterations=it))
    met = compute_metrics(
        log,
        stages=p,
        microbatches=m,
        synchronous=False,
        samples_per_step=m,
        fill_microbatches=schedule.fill_microbatches(),
    )
    assert met.iteration_time_s == pytest.approx(m * 3.0)
    assert met.bubble_fraction == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    "sched,in_flight",
    [
        ("1f1b", lambda p, m, s: p - s),
        ("gpipe", lambda p, m, s: m),
        ("pipedream", lambda p, m, s: p - s),
    ],
)
def test_memory_ledger_peak_matches_formula(sched, in_flight):
    p, m, A, W = 4, 8, 1000.0, 50.0
    log = simulate(uniform_input(sched, p, m, act_bytes=A, weight_bytes=W, iterations=1))
    peaks = log.meta["peak_bytes"]
    for s in range(p):
        assert peaks[f"gpu{s}"] == pytest.approx(W + in_flight(p, m, s) * A)


def test_receive_buffers_are_counted_and_freed():
    p, m, out = 2, 2, 100.0
    log = simulate(uniform_input("gpipe", p, m, out_bytes=out))
    live = {}
    for ev in log.memory:
        live[ev.device] = live.get(ev.device, 0.0) + ev.delta_bytes
    assert all(v == pytest.approx(0.0) for v in live.values())
    # equal stage times: each received tensor is consumed before the next arrives
    assert log.meta["peak_bytes"]["gpu1"] == pytest.approx(out)
    assert log.meta["peak_bytes"]["gpu0"] == pytest.approx(out)  # the gradients coming back


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    topo = chain_topology(2, bandwidth_Bps=1e9, latency_s=1e-3)
    log = simulate(uniform_input("gpipe", 2, 1, out_bytes=1e9, topology=topo))
    sends = [e for e in log.events if e.kind == "transfer"]
    assert len(sends) == 2
    for e in sends:
        assert e.duration_s == pytest.approx(1.0 + 1e-3)
    # F0 on stage 1 waits for the activation: starts at 1 (F) + 1.001 (send)
    f1 = next(e for e in log.events if e.name == "1F0")
    assert f1.start_s == pytest.approx(2.001)


def test_shared_link_serialises_two_transfers():
    """Two swaps through one switch uplink take twice as long as one."""

    def run(n_gpus):
        topo = chain_topology(n_gpus, bandwidth_Bps=1e9, shared=True)
        plan = StagePlan(act_bytes=1e9, resident_act_bytes=0.0, swap_bytes=1e9, swap_target="cpu0")
        log = simulate(
            uniform_input("gpipe", 1, 1, w=n_gpus, topology=topo, plan=plan, fwd_s=0.1, bwd_s=0.1)
        )
        return max(e.end_s for e in log.events if e.kind == "swap_out")

    assert run(1) == pytest.approx(0.1 + 1.0)
    assert run(2) == pytest.approx(0.1 + 2.0)


def test_late_swap_in_stalls_backward_by_its_lateness():
    """One stage, F then B; swap-out 1 s + swap-in 1 s finish 2 s after F: B waits exactly."""
    topo = chain_topology(1, bandwidth_Bps=1e9)
    plan = StagePlan(act_bytes=1e9, resident_act_bytes=0.0, swap_bytes=1e9, swap_target="cpu0")
    log = simulate(uniform_input("gpipe", 1, 1, topology=topo, plan=plan, fwd_s=0.5, bwd_s=0.5))
    stall = [e for e in log.events if e.kind == "stall"]
    assert len(stall) == 1 and stall[0].duration_s == pytest.approx(2.0)
    b = next(e for e in log.events if e.name == "0B0")
    assert b.start_s == pytest.approx(0.5 + 2.0)


def test_deterministic_event_log():
    a = simulate(uniform_input("1f1b", 4, 8, out_bytes=1e6, act_bytes=10.0, w=2, iterations=2))
    b = simulate(uniform_input("1f1b", 4, 8, out_bytes=1e6, act_bytes=10.0, w=2, iterations=2))
    assert a.events == b.events and a.memory == b.memory


def test_allreduce_ring_time():
    """w replicas, ring bound 2(w-1)/w * bytes / bandwidth."""
    w, grad = 4, 4e9
    topo = chain_topology(w, bandwidth_Bps=1e9)
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=grad)
    inp = replace(
        uniform_input("gpipe", 1, 1, w=w, topology=topo, plan=plan), dp_bucket_bytes=0.0
    )  # all at the step, no overlap
    log = simulate(inp)
    ar = [e for e in log.events if e.kind == "allreduce"]
    assert len(ar) == w
    assert all(e.duration_s == pytest.approx(2 * (w - 1) / w * grad / 1e9) for e in ar)


# ------------------------------------------------- communication as NCCL does it (issue 12.3)


def _gpus_on(link_names) -> set[str]:
    return {n for name in link_names for n in name.split("->") if n.startswith("gpu")}


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=2, max_size=8))
def test_no_route_of_a_communicator_passes_through_a_gpu_outside_it(members):
    from sim.hardware.loader import load_hardware

    topo = load_hardware("dgx1-v100-16gb")
    gpus = tuple(f"gpu{g}" for g in sorted(members))
    comm = frozenset(gpus)
    order = topo.ring(gpus)
    assert sorted(order) == sorted(gpus) and order[0] == gpus[0]
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        assert _gpus_on(lk.name for lk in topo.route(a, b, within=comm)) <= comm
        assert _gpus_on(lk.name for lk in topo.route(a, b)) == {a, b}  # p2p: the pair only


def test_engine_traffic_stays_inside_its_communicators_on_dgx1():
    """p=2, w=4 on a DGX-1 placed so that replicas straddle the sockets: every send touches
    only its two GPUs, every all-reduce only its stage's four replicas."""
    from sim.hardware.loader import load_hardware

    placement = ((0, 5), (1, 4), (2, 7), (3, 6))
    base = uniform_input(
        "1f1b",
        2,
        2,
        out_bytes=1e8,
        w=4,
        plan=StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=1e9),
    )
    log = simulate(replace(base, topology=load_hardware("dgx1-v100-16gb"), placement=placement))
    sends = [e for e in log.events if e.kind == "transfer"]
    rings = [e for e in log.events if e.kind == "allreduce"]
    assert sends and rings
    for e in sends:
        src, dst = e.name.split()[1].split("->")
        assert _gpus_on(e.links) == {src, dst}
    for e in rings:
        assert _gpus_on(e.links) <= {f"gpu{row[e.stage]}" for row in placement}
    # gpu0 -> gpu5 has no NVLink: the activation goes through host memory (PCIe, QPI)
    first = next(e for e in sends if e.name.startswith("0F0 gpu0->gpu5"))
    assert first.links == ("gpu0->sw0", "sw0->cpu0", "cpu0->cpu1", "cpu1->sw2", "sw2->gpu5")


@pytest.mark.parametrize(
    "pair,seconds",
    [
        # NV2 pair: NCCL moves 2 NVLinks x 20 GB/s = 40 GB/s (NCCL topo.h SM70_NVLINK_BW;
        # the raw copy rate 48 GB/s is not NCCL's); ring Simple (tuning.cc): baseLat 8.4 +
        # 2 steps x NVLink hwLat 3.4 us, then 2 steps of (1e9 / 2) / 40e9
        ((0, 4), (8.4 + 2 * 3.4) * 1e-6 + 2 * 0.5e9 / 40e9),
        # no NVLink, across the sockets: gpu0->sw0 (13 GB/s), sw0->cpu0 (12.5), QPI (19.2),
        # cpu1->sw2 (12.5), sw2->gpu5 (13): bottleneck 12.5 GB/s; PCI hwLat 5.7 us per step
        ((0, 5), (8.4 + 2 * 5.7) * 1e-6 + 2 * 0.5e9 / 12.5e9),
    ],
)
def test_dgx1_pair_allreduce_is_the_hand_computed_ring_time(pair, seconds):
    """dgx1-v100-16gb preset numbers (hardware.md §3.1); 1e9 B of gradients, reduced at the
    step (no buckets): ring of 2 = NCCL's ring Simple latency + 2 steps of (B/2) / bottleneck at
    NCCL's rate (the
    host path has no NCCL rate of its own: its raw rate)."""
    from sim.hardware.loader import load_hardware

    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=1e9)
    base = uniform_input("gpipe", 1, 1, w=2, plan=plan)
    log = simulate(
        replace(
            base,
            topology=load_hardware("dgx1-v100-16gb"),
            placement=((pair[0],), (pair[1],)),
            dp_bucket_bytes=0.0,
        )
    )
    ar = [e for e in log.events if e.kind == "allreduce"]
    assert len(ar) == 2
    assert all(e.duration_s == pytest.approx(seconds, rel=1e-12) for e in ar)


# --------------------------------------- bus bandwidth as nccl-tests defines it (issue 12.3)


def test_bus_bandwidth_formulas_are_nccl_tests():
    """nccl-tests doc/PERFORMANCE.md: algbw = S/t; busbw = algbw * 2(n-1)/n (all-reduce),
    * (n-1)/n (reduce-scatter, all-gather), = algbw (send/recv)."""
    from sim.engine.collectives import bus_bandwidth_Bps

    assert bus_bandwidth_Bps("allreduce", 8, 8e9, 2.0) == pytest.approx(4e9 * 14 / 8)
    assert bus_bandwidth_Bps("all_gather", 4, 8e9, 2.0) == pytest.approx(4e9 * 3 / 4)
    assert bus_bandwidth_Bps("reduce_scatter", 2, 8e9, 1.0) == pytest.approx(8e9 / 2)
    assert bus_bandwidth_Bps("transfer", 2, 8e9, 4.0) == pytest.approx(2e9)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_busbw_on_a_switch_equals_the_link_bandwidth(n):
    """n GPUs on one switch, 100 GB/s links, no latency: every ring hop crosses 2 links of its
    own, so busbw = 2(n-1)/n * B / (2(n-1) * (B/n) / 100e9) = 100 GB/s exactly; a send/recv
    ring of n GPUs also moves B / (B / 100e9) = 100 GB/s."""
    from sim.engine.microbench import allreduce_busbw_Bps, sendrecv_busbw_Bps

    topo = chain_topology(8, bandwidth_Bps=100e9, latency_s=0.0, shared=True)
    gpus = tuple(f"gpu{i}" for i in range(n))
    assert allreduce_busbw_Bps(topo, gpus, 2**28) == pytest.approx(100e9, rel=1e-12)
    assert sendrecv_busbw_Bps(topo, gpus, 2**28) == pytest.approx(100e9, rel=1e-12)

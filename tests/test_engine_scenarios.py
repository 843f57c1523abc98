"""Exact event logs of tiny configurations, derived by hand (SimPy-style ``log == [...]``).

Every scenario: 2 stages, 2 micro-batches, t_F = 1 s, t_B = 2 s, optimizer step 0 s, links of
1 GB/s (10^9 B/s) so that 10^9 bytes take 1 s. Each expected list below was worked out in the
comments from the rules the engine states (a stage runs its action list in order; a forward waits
for its activation, a backward for its gradient; a transfer takes ``latency + bytes /
bandwidth`` and holds its link FIFO; a ring all-reduce of ``B`` bytes over ``w`` replicas is
``2(w-1)`` steps of ``latency + (B/w) / bandwidth``; a swap-in starts one action ahead of its
backward once the swap-out has ended) -- never copied from the engine's output.

The engine appends an event when it ends; events ending at the same instant may come in any
order, so both sides are compared as sorted lists and the log is checked to be in end order.
"""

from __future__ import annotations

from dataclasses import replace

from sim.engine import simulate
from sim.memory.plan import StagePlan
from tests.helpers import chain_topology, uniform_input

GB = 1e9


def spans(log) -> list[tuple]:
    """``(kind, device, name, start_s, end_s)`` of every event, sorted."""
    ends = [e.end_s for e in log.events]
    assert ends == sorted(ends), "events are appended in the order they end"
    return sorted((e.kind, e.device, e.name, e.start_s, e.end_s) for e in log.events)


def test_gpipe_free_communication():
    # Zero-byte sends take no time and log nothing. GPipe runs F0 F1 B0 B1 STEP on each stage.
    # gpu0: F0 [0,1], F1 [1,2]; gpu1: F0 as act 0 arrives at 1 -> [1,2], F1 [2,3];
    # gpu1 (last stage, no gradient to wait for): B0 [3,5], B1 [5,7], step [7,7].
    # gpu0: B0 waits for the gradient of mb 0 (sent at 5): [5,7]; B1 for mb 1 (at 7): [7,9];
    # step [9,9]. Makespan (m + p - 1)(t_F + t_B) = 3 * 3 = 9.
    log = simulate(uniform_input("gpipe", 2, 2))
    assert spans(log) == sorted(
        [
            ("compute", "gpu0", "0F0", 0.0, 1.0),
            ("compute", "gpu0", "0F1", 1.0, 2.0),
            ("compute", "gpu1", "1F0", 1.0, 2.0),
            ("compute", "gpu1", "1F1", 2.0, 3.0),
            ("compute", "gpu1", "1B0", 3.0, 5.0),
            ("compute", "gpu1", "1B1", 5.0, 7.0),
            ("optimizer", "gpu1", "1STEP0", 7.0, 7.0),
            ("compute", "gpu0", "0B0", 5.0, 7.0),
            ("compute", "gpu0", "0B1", 7.0, 9.0),
            ("optimizer", "gpu0", "0STEP0", 9.0, 9.0),
        ]
    )
    assert log.iteration_ends_s == [9.0]


def test_1f1b_with_one_second_transfers():
    # Activations and gradients of 1e9 B over a 1 GB/s link, latency 0: 1 s each; gpu0->gpu1
    # and gpu1->gpu0 are separate links. 1F1B: gpu0 runs F0 F1 B0 B1, gpu1 runs F0 B0 F1 B1.
    # gpu0: F0 [0,1]; send act 0 [1,2]; F1 [1,2]; send act 1 [2,3] (the link is free at 2).
    # gpu1: F0 when act 0 arrives [2,3]; B0 [3,5]; send grad 0 [5,6]; F1 (act 1 there since 3)
    #       [5,6]; B1 [6,8]; send grad 1 [8,9]; step [8,8].
    # gpu0: B0 when grad 0 arrives [6,8]; B1 when grad 1 arrives [9,11]; step [11,11].
    topo = chain_topology(2, bandwidth_Bps=1 * GB, latency_s=0.0)
    log = simulate(uniform_input("1f1b", 2, 2, out_bytes=1 * GB, topology=topo))
    assert spans(log) == sorted(
        [
            ("compute", "gpu0", "0F0", 0.0, 1.0),
            ("compute", "gpu0", "0F1", 1.0, 2.0),
            ("transfer", "gpu0", "0F0 gpu0->gpu1", 1.0, 2.0),
            ("transfer", "gpu0", "0F1 gpu0->gpu1", 2.0, 3.0),
            ("compute", "gpu1", "1F0", 2.0, 3.0),
            ("compute", "gpu1", "1B0", 3.0, 5.0),
            ("transfer", "gpu1", "1B0 gpu1->gpu0", 5.0, 6.0),
            ("compute", "gpu1", "1F1", 5.0, 6.0),
            ("compute", "gpu1", "1B1", 6.0, 8.0),
            ("optimizer", "gpu1", "1STEP0", 8.0, 8.0),
            ("transfer", "gpu1", "1B1 gpu1->gpu0", 8.0, 9.0),
            ("compute", "gpu0", "0B0", 6.0, 8.0),
            ("compute", "gpu0", "0B1", 9.0, 11.0),
            ("optimizer", "gpu0", "0STEP0", 11.0, 11.0),
        ]
    )
    sends = [e for e in log.events if e.kind == "transfer"]
    assert {e.links for e in sends} == {("gpu0->gpu1",), ("gpu1->gpu0",)}
    assert log.iteration_ends_s == [11.0]


def test_dp2_allreduce_is_the_ring_formula():
    # Two replicas (r0 on gpu0, gpu1; r1 on gpu2, gpu3) of the GPipe run above, free sends.
    # Each stage holds B = 2e9 B of gradients; links 1 GB/s, 0.25 s latency. Ring, w = 2:
    # 2(w-1) = 2 steps of 0.25 + (2e9 / 2) / 1e9 = 1.25 s -> 2.5 s
    # (= 2(w-1)/w * B/bw + 2(w-1) * latency = 2 + 0.5).
    # Without bucketing (dp_bucket_bytes = 0) the all-reduce runs at the step:
    # Stage 1 reaches its step at 7 on both replicas: all-reduce [7, 9.5], step [9.5, 9.5].
    # Stage 0 at 9: all-reduce [9, 11.5] (other links: no contention), step [11.5, 11.5].
    topo = chain_topology(4, bandwidth_Bps=1 * GB, latency_s=0.25)
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=2 * GB)
    log = simulate(
        replace(uniform_input("gpipe", 2, 2, w=2, topology=topo, plan=plan), dp_bucket_bytes=0.0)
    )
    expected = []
    for g0, g1 in ((0, 1), (2, 3)):
        a, b = f"gpu{g0}", f"gpu{g1}"
        expected += [
            ("compute", a, "0F0", 0.0, 1.0),
            ("compute", a, "0F1", 1.0, 2.0),
            ("compute", b, "1F0", 1.0, 2.0),
            ("compute", b, "1F1", 2.0, 3.0),
            ("compute", b, "1B0", 3.0, 5.0),
            ("compute", b, "1B1", 5.0, 7.0),
            ("allreduce", b, "allreduce s1", 7.0, 9.5),
            ("optimizer", b, "1STEP0", 9.5, 9.5),
            ("compute", a, "0B0", 5.0, 7.0),
            ("compute", a, "0B1", 7.0, 9.0),
            ("allreduce", a, "allreduce s0", 9.0, 11.5),
            ("optimizer", a, "0STEP0", 11.5, 11.5),
        ]
    assert spans(log) == sorted(expected)
    ring = [e for e in log.events if e.kind == "allreduce"]
    assert {(e.replica, e.nbytes) for e in ring} == {(0, 2 * GB), (1, 2 * GB)}
    assert log.iteration_ends_s == [11.5]


def test_cpu_swap_with_a_late_swap_in():
    # Every stash (A = 2e9 B) is swapped to cpu0 after its forward and back before its
    # backward: 2 s each way; gpuK->cpu0 and cpu0->gpuK are one FIFO link each. Sends are free.
    # A swap-in starts when the action before its backward starts, once its swap-out ended.
    # gpu0: F0 [0,1]; out 0/0 [1,3]; F1 [1,2]; out 0/1 queues behind out 0/0: [3,5];
    #       in 0/0 (started at 1, swap-out done at 3) [3,5]; in 0/1 (started at 2) [5,7].
    # gpu1: F0 [1,2] (act 0 at 1); out 1/0 [2,4]; F1 [2,3]; out 1/1 [4,6]; in 1/0 [4,6];
    #       in 1/1 [6,8]. B0 is ready at 3 but its swap-in ends at 6: stall [3,6], B0 [6,8];
    #       B1 at 8, its swap-in just done: [8,10]; step [10,10].
    # gpu0: B0 waits for grad 0 (sent at 8; its swap-in ended at 5): [8,10]; B1 [10,12];
    #       step [12,12].
    A = 2 * GB
    topo = chain_topology(2, bandwidth_Bps=1 * GB, latency_s=0.0)
    plan = StagePlan(act_bytes=A, resident_act_bytes=0.0, swap_bytes=A, swap_target="cpu0")
    log = simulate(uniform_input("gpipe", 2, 2, topology=topo, plan=plan))
    assert spans(log) == sorted(
        [
            ("compute", "gpu0", "0F0", 0.0, 1.0),
            ("compute", "gpu0", "0F1", 1.0, 2.0),
            ("swap_out", "gpu0", "swap-out 0/0", 1.0, 3.0),
            ("swap_out", "gpu0", "swap-out 0/1", 3.0, 5.0),
            ("swap_in", "cpu0", "swap-in 0/0", 3.0, 5.0),
            ("swap_in", "cpu0", "swap-in 0/1", 5.0, 7.0),
            ("compute", "gpu0", "0B0", 8.0, 10.0),
            ("compute", "gpu0", "0B1", 10.0, 12.0),
            ("optimizer", "gpu0", "0STEP0", 12.0, 12.0),
            ("compute", "gpu1", "1F0", 1.0, 2.0),
            ("compute", "gpu1", "1F1", 2.0, 3.0),
            ("swap_out", "gpu1", "swap-out 1/0", 2.0, 4.0),
            ("swap_out", "gpu1", "swap-out 1/1", 4.0, 6.0),
            ("swap_in", "cpu0", "swap-in 1/0", 4.0, 6.0),
            ("swap_in", "cpu0", "swap-in 1/1", 6.0, 8.0),
            ("stall", "gpu1", "wait swap-in 1B0", 3.0, 6.0),
            ("compute", "gpu1", "1B0", 6.0, 8.0),
            ("compute", "gpu1", "1B1", 8.0, 10.0),
            ("optimizer", "gpu1", "1STEP0", 10.0, 10.0),
        ]
    )
    # gpu1's activations: a stash per forward; freed as its swap-out ends, re-allocated as its
    # swap-in starts; freed after the backward. Peak 2A (both stashes, t = 2..4).
    act = [
        (m.time_s, m.delta_bytes, m.label)
        for m in log.memory
        if m.device == "gpu1" and m.category == "activations"
    ]
    assert act == [
        (1.0, A, "stash 1F0"),
        (2.0, A, "stash 1F1"),
        (4.0, -A, "swapped 1/0"),
        (4.0, A, "swap-in 1/0"),
        (6.0, -A, "swapped 1/1"),
        (6.0, A, "swap-in 1/1"),
        (8.0, -A, "free 1B0"),
        (10.0, -A, "free 1B1"),
    ]
    assert log.meta["peak_bytes"]["gpu1"] == 2 * A
    assert log.iteration_ends_s == [12.0]


def _bucketed(bandwidth_Bps: float):
    """GPipe p=2, m=2, w=2 (r0 on gpu0, gpu1; r1 on gpu2, gpu3), free sends, G = 4e9 B of
    gradients per stage in 4 buckets of 1e9 B, links of ``bandwidth_Bps``, latency 0."""
    topo = chain_topology(4, bandwidth_Bps=bandwidth_Bps, latency_s=0.0)
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=4 * GB)
    inp = replace(
        uniform_input("gpipe", 2, 2, w=2, topology=topo, plan=plan), dp_bucket_bytes=1 * GB
    )
    return simulate(inp)


def test_bucketed_allreduce_exposes_only_the_last_bucket():
    # The last backward of each stage (B1) reduces its gradients while it runs (t_B = 2 s):
    # bucket k of 4 is ready at start + 2 * (k + 1) / 4. A bucket's ring (w = 2, 2e9 B/s):
    # 2 steps of (1e9 / 2) / 2e9 = 0.25 s -> 0.5 s, as long as the gap between buckets, so
    # none waits for the previous one.
    # Stage 1: B1 [5,7]; buckets [5.5,6] [6,6.5] [6.5,7] [7,7.5]; step [7.5,7.5].
    # Stage 0: B1 [7,9]; buckets [7.5,8] [8,8.5] [8.5,9] [9,9.5]; step [9.5,9.5].
    # Exposed: 0.5 s per stage (the last bucket) instead of the whole 2 s all-reduce
    # (2 * (4e9 / 2) / 2e9) that would end the iteration at 11.
    log = _bucketed(2 * GB)
    expected = []
    for a, b in (("gpu0", "gpu1"), ("gpu2", "gpu3")):
        expected += [
            ("compute", a, "0F0", 0.0, 1.0),
            ("compute", a, "0F1", 1.0, 2.0),
            ("compute", b, "1F0", 1.0, 2.0),
            ("compute", b, "1F1", 2.0, 3.0),
            ("compute", b, "1B0", 3.0, 5.0),
            ("compute", b, "1B1", 5.0, 7.0),
            ("compute", a, "0B0", 5.0, 7.0),
            ("compute", a, "0B1", 7.0, 9.0),
            ("allreduce", b, "allreduce s1 b0", 5.5, 6.0),
            ("allreduce", b, "allreduce s1 b1", 6.0, 6.5),
            ("allreduce", b, "allreduce s1 b2", 6.5, 7.0),
            ("allreduce", b, "allreduce s1 b3", 7.0, 7.5),
            ("optimizer", b, "1STEP0", 7.5, 7.5),
            ("allreduce", a, "allreduce s0 b0", 7.5, 8.0),
            ("allreduce", a, "allreduce s0 b1", 8.0, 8.5),
            ("allreduce", a, "allreduce s0 b2", 8.5, 9.0),
            ("allreduce", a, "allreduce s0 b3", 9.0, 9.5),
            ("optimizer", a, "0STEP0", 9.5, 9.5),
        ]
    assert spans(log) == sorted(expected)
    assert log.iteration_ends_s == [9.5]


def test_bucketed_allreduce_slower_than_the_backward_queues():
    # Links of 0.5e9 B/s: a bucket's ring takes 2 * (1e9 / 2) / 0.5e9 = 2 s, longer than the
    # 0.5 s between buckets, so each waits for the previous one (one NCCL stream).
    # Stage 1: B1 [5,7]; buckets [5.5,7.5] [7.5,9.5] [9.5,11.5] [11.5,13.5]; step at 13.5.
    # Stage 0: B1 [7,9]; buckets [7.5,9.5] [9.5,11.5] [11.5,13.5] [13.5,15.5]; step at 15.5.
    log = _bucketed(0.5 * GB)
    comm = sorted(
        (e.device, e.name, e.start_s, e.end_s)
        for e in log.events
        if e.kind in ("allreduce", "optimizer") and e.replica == 0
    )
    assert comm == sorted(
        [
            ("gpu1", "allreduce s1 b0", 5.5, 7.5),
            ("gpu1", "allreduce s1 b1", 7.5, 9.5),
            ("gpu1", "allreduce s1 b2", 9.5, 11.5),
            ("gpu1", "allreduce s1 b3", 11.5, 13.5),
            ("gpu1", "1STEP0", 13.5, 13.5),
            ("gpu0", "allreduce s0 b0", 7.5, 9.5),
            ("gpu0", "allreduce s0 b1", 9.5, 11.5),
            ("gpu0", "allreduce s0 b2", 11.5, 13.5),
            ("gpu0", "allreduce s0 b3", 13.5, 15.5),
            ("gpu0", "0STEP0", 15.5, 15.5),
        ]
    )
    assert log.iteration_ends_s == [15.5]


def test_hold_groups_keep_the_last_bucket_alone():
    from sim.engine.buckets import MAX_HOLDS, hold_groups

    assert MAX_HOLDS == 4
    assert hold_groups(3) == [(0, 0), (1, 1), (2, 2)]
    # 19 head buckets in 3 groups starting at 19g//3: 0, 6, 12 (and 19 ends them)
    assert hold_groups(20) == [(0, 5), (6, 11), (12, 18), (19, 19)]


def test_many_buckets_still_expose_only_the_last_one():
    # One stage, m = 1, w = 2 (gpu0, gpu1): F [0,1], B [1,41] with G = 40e9 B in 40 buckets of
    # 1e9 B, one ready every 1 s (at 2, 3, ..., 41). Ring of 2 at 2e9 B/s: 2 * 0.5e9 / 2e9 =
    # 0.5 s per bucket, shorter than the gap, so each ends 0.5 s after it is ready.
    # 40 buckets > 4 holds: buckets 0-12 share the first hold (ready 2 ... 14, each reduced as
    # it becomes ready: ends 14.5), 13-25 and 26-38 the next two; bucket 39 (ready 41) has
    # its own: [41, 41.5]; the step at 41.5.
    topo = chain_topology(2, bandwidth_Bps=2 * GB, latency_s=0.0)
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=40 * GB)
    inp = replace(
        uniform_input("gpipe", 1, 1, w=2, topology=topo, plan=plan, bwd_s=40.0),
        dp_bucket_bytes=1 * GB,
    )
    log = simulate(inp)
    ar = sorted(
        (e.name, e.start_s, e.end_s) for e in log.events if e.kind == "allreduce" and e.replica == 0
    )
    assert ar == [
        ("allreduce s0 b0-12", 2.0, 14.5),
        ("allreduce s0 b13-25", 15.0, 27.5),
        ("allreduce s0 b26-38", 28.0, 40.5),
        ("allreduce s0 b39", 41.0, 41.5),
    ]
    assert ("allreduce s0 b39", 41.0, 41.5) in ar
    assert log.iteration_ends_s == [41.5]

"""Expert- and context-parallel exchanges in the engine: exact small timelines (all-to-all
after each action, expert gradients over the expert-data-parallel group, ring attention's
exposed excess, DualPipe's two chains), and an end-to-end run where overlap hides the
all-to-alls."""

from __future__ import annotations

from dataclasses import replace

import pytest
import simpy

from sim.config import load_experiment
from sim.engine import simulate
from sim.engine.overlap import PairOverlap, slowdown
from sim.engine.streams import ComputeStream
from sim.memory.plan import StagePlan
from sim.parallel.layout import ParallelLayout
from sim.parallel.ops import GroupOp
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.simulate import evaluate, resolve
from tests.helpers import chain_topology, uniform_input

GB = 1e9


def spans(log, kinds=("compute", "alltoall", "allreduce", "ring_exchange")):
    return sorted(
        (e.kind, e.device, e.name, round(e.start_s, 9), round(e.end_s, 9))
        for e in log.events
        if e.kind in kinds
    )


def ep_input(w: int, group_fwd=(), group_bwd=(), **kw):
    inp = uniform_input("gpipe", 1, 2, w=w, topology=chain_topology(w, 1 * GB), **kw)
    costs = tuple(replace(c, group_fwd=group_fwd, group_bwd=group_bwd) for c in inp.costs)
    return replace(inp, costs=costs, dp_bucket_bytes=0.0)


def test_alltoall_after_each_action_blocks_the_rank():
    # two replicas (gpu0, gpu1) form an EP group; each sends the other 1 GB per all-to-all
    # over its own 1 GB/s link: 1 s. GPipe, m = 2, F = 1, B = 2, one all-to-all after each:
    # F0 [0,1] a2a [1,2] F1 [2,3] a2a [3,4] B0 [4,6] a2a [6,7] B1 [7,9] a2a [9,10]
    a2a = GroupOp("ep", "alltoall", 0.0, pairs=((0.0, GB), (GB, 0.0)))
    inp = replace(ep_input(2, (a2a,), (a2a,)), layout=ParallelLayout(dp_replicate=2, ep=2))
    log = simulate(inp)
    want = []
    for g in ("gpu0", "gpu1"):
        want += [
            ("compute", g, "0F0", 0.0, 1.0),
            ("alltoall", g, "ep alltoall 0F0", 1.0, 2.0),
            ("compute", g, "0F1", 2.0, 3.0),
            ("alltoall", g, "ep alltoall 0F1", 3.0, 4.0),
            ("compute", g, "0B0", 4.0, 6.0),
            ("alltoall", g, "ep alltoall 0B0", 6.0, 7.0),
            ("compute", g, "0B1", 7.0, 9.0),
            ("alltoall", g, "ep alltoall 0B1", 9.0, 10.0),
        ]
    assert spans(log, ("compute", "alltoall")) == sorted(want)
    assert log.iteration_ends_s == [10.0]
    assert {e.nbytes for e in log.events if e.kind == "alltoall"} == {GB}


def test_last_gradient_bucket_waits_for_the_backwards_all_to_all():
    # Two replicas (gpu0, gpu1) joined by network links of 1 GB/s (shared max-min fairly
    # between communicators, sim.engine.fair_share), EP 2, no routed experts: 1 GB of
    # gradients all-reduced over
    # both in one overlapped bucket (dp_bucket_bytes = 1 GB), an all-to-all of 1 GB each way
    # after every backward. GPipe m = 2: F0 [0,1] F1 [1,2] B0 [2,4] a2a [4,5] B1 [5,7]
    # a2a [7,8]. The bucket holds the stage's first layers' gradients, computed after the
    # all-to-all (Megatron-Core: register_grad_ready from the gradient hook of the bucket's last
    # parameter), so its ring (2 steps of 0.5 GB at 1 GB/s) runs [8,9] after the all-to-all.
    # Released at the end of B1's compute instead, it would share both links with the
    # all-to-all from 7: both at half rate, [7,9] each.
    a2a = GroupOp("ep", "alltoall", 0.0, pairs=((0.0, GB), (GB, 0.0)))
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=1 * GB)
    topo = chain_topology(2, 1 * GB)
    topo = replace(topo, links=tuple(replace(lk, kind="network") for lk in topo.links))
    inp = replace(ep_input(2, (), (a2a,), plan=plan), topology=topo, dp_bucket_bytes=1 * GB)
    inp = replace(inp, layout=ParallelLayout(dp_replicate=2, ep=2))
    log = simulate(inp)
    for g in ("gpu0", "gpu1"):
        assert ("alltoall", g, "ep alltoall 0B1", 7.0, 8.0) in spans(log)
        assert ("allreduce", g, "allreduce s0 b0", 8.0, 9.0) in spans(log)
    assert log.iteration_ends_s == [9.0]


def test_expert_gradients_reduce_over_the_expert_data_parallel_group():
    # 4 replicas, EP 2: dense gradients (half of 2 GB) all-reduced over all 4 (ring:
    # 2*3 steps of 0.25 GB at 1 GB/s = 1.5 s), expert gradients (the other 1 GB) over the
    # replicas holding the same experts, {0, 2} and {1, 3} (2 steps of 0.5 GB = 1 s), after.
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=2 * GB)
    inp = ep_input(4, plan=plan)
    costs = tuple(replace(c, expert_grad_share=0.5) for c in inp.costs)
    log = simulate(replace(inp, costs=costs, layout=ParallelLayout(dp_replicate=2, ep=2)))
    red = sorted(
        (e.device, e.name, e.start_s, e.end_s, e.nbytes)
        for e in log.events
        if e.kind == "allreduce"
    )
    # compute ends at 2F + 2B = 6 s on every replica
    for g in range(4):
        assert (f"gpu{g}", "allreduce s0", 6.0, 7.5, GB) in red
        assert (f"gpu{g}", "allreduce experts s0", 7.5, 8.5, GB) in red
    assert log.iteration_ends_s == [8.5]


def test_ring_attention_exposes_only_the_excess_over_the_attention():
    # CP 2: one ring step of 1.5 GB (1.5 s at 1 GB/s) hidden under 1 s of attention: 0.5 s
    # exposed after each forward; the backward's step (hidden_s 3) is fully hidden.
    fwd = GroupOp("cp", "ring", 1.5 * GB, 1, hidden_s=1.0)
    bwd = GroupOp("cp", "ring", 1.5 * GB, 1, hidden_s=3.0)
    log = simulate(replace(ep_input(2, (fwd,), (bwd,)), layout=ParallelLayout(cp=2)))
    g0 = [
        (e.name, e.start_s, e.end_s)
        for e in log.events
        if e.device == "gpu0" and e.kind == "compute"
    ]
    assert g0 == [("0F0", 0.0, 1.0), ("0F1", 1.5, 2.5), ("0B0", 3.0, 5.0), ("0B1", 5.0, 7.0)]
    assert log.iteration_ends_s == [7.0]


class _Groups:
    """Stub group exchanges: every exchange takes ``dur`` seconds on its own."""

    def __init__(self, env, dur):
        self.env, self.dur, self.log = env, dur, []

    def op_seconds(self, rep, op):
        return self.dur

    def join(self, rep, label, ops, tags):
        start = self.env.now
        yield self.env.timeout(self.dur)
        self.log.append((label, start, self.env.now))


class _Rep:
    gpu = "gpu0"


def test_dualpipe_chains_hide_one_chunks_exchanges_under_the_others_compute():
    # F and B chains, each 2 s of compute around one 1 s exchange (two 1 s segments):
    # F seg0 [0,1], F a2a [1,2]; B seg0 [1,2] (stream free), B a2a [2,3]; F seg1 [2,3];
    # B seg1 [3,4]: 4 s instead of the serial 2 + 1 + 2 + 1 = 6 s.
    env = simpy.Environment()
    events: list = []
    groups = _Groups(env, 1.0)
    ov = PairOverlap(env, ComputeStream(env, events), groups)  # type: ignore[arg-type]
    op = (GroupOp("ep", "alltoall", 1.0),)
    env.process(ov.body(_Rep(), "0F0", 2.0, op, {}))  # type: ignore[arg-type]
    env.process(ov.body(_Rep(), "1B0", 2.0, op, {}))  # type: ignore[arg-type]
    env.run()
    assert [(e.name, e.start_s, e.end_s) for e in events] == [
        ("0F0.0", 0.0, 1.0),
        ("1B0.0", 1.0, 2.0),
        ("0F0.1", 2.0, 3.0),
        ("1B0.1", 3.0, 4.0),
    ]
    assert groups.log == [("0F0#0", 1.0, 2.0), ("1B0#0", 2.0, 3.0)]


def test_compute_slows_only_while_communication_holds_sms():
    # 132 SMs, 20 for communication: factor 132/112; 1 s of work with 0.5 s of exchange left
    # runs 0.5 s at 112/132, then the rest at full speed
    f = slowdown(132)
    assert f == pytest.approx(132 / 112)
    env = simpy.Environment()
    ov = PairOverlap(env, ComputeStream(env, []), None, f)  # type: ignore[arg-type]
    assert ov.stretched(1.0, 0.5) == pytest.approx(0.5 + (1.0 - 0.5 / f))
    assert ov.stretched(0.1, 0.5) == pytest.approx(0.1 * f)
    assert ov.stretched(1.0, 0.0) == 1.0


def test_dualpipe_v_overlap_hides_cross_server_alltoalls(tmp_path):
    exp_file = tmp_path / "x.yaml"
    exp_file.write_text(
        """
name: ov
hardware: 2x-dgx-h100
models: [{name: qwen, trace: qwen1.5-moe-a2.7b, global_batch: 48}]
training: {optimizer: adam, iterations: 2}
sweep: {schedule: dualpipe_v, stages: 1, dp_width: 12, expert_parallel: 12,
        ep_overlap: [false, true], microbatch_size: 1, memory_policy: dist_opt}
options: {boundaries: [0, 13]}
"""
    )
    exp = load_experiment(exp_file)
    prep = prepare(exp, str(exp_file))
    points, _ = expand(prep)
    times = {}
    for pt in points:
        met, log = evaluate(resolve(exp, pt, prep.topology, prep.traces[pt.model]))
        times[pt.ep_overlap] = met.iteration_time_s
        if pt.ep_overlap:  # some all-to-all runs while the same GPU computes
            comp = [
                (e.start_s, e.end_s)
                for e in log.events
                if e.device == "gpu0" and e.kind == "compute"
            ]
            a2a = [
                (e.start_s, e.end_s)
                for e in log.events
                if e.device == "gpu0" and e.kind == "alltoall"
            ]
            assert any(s < ce and cs < e for s, e in a2a for cs, ce in comp)
    assert times[True] < times[False]

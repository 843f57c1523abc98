"""Framework profiles (issue 16): one test per mechanism, each a closed form or a hand-computed
small timeline, plus the experiment's ``framework:`` field and what it refuses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import chain_topology, uniform_input
from typer.testing import CliRunner

from sim.cli import app
from sim.config import parse_experiment
from sim.engine import simulate
from sim.engine.host import layered_work
from sim.engine.inputs import DDP_BUCKET_BYTES, PipelineRuntime
from sim.engine.stage_cost import StageCost
from sim.framework import framework_names, get_framework
from sim.framework.placement import megatron_boundaries, parameter_boundaries
from sim.hardware.host_ops import HostOverhead
from sim.hardware.loader import load_hardware
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.simulate import evaluate, resolve
from sim.schedules.action import STEP
from sim.schedules.errors import ScheduleError
from sim.schedules.one_f_one_b import OneFOneB
from sim.trace.schema import LayerProfile, Trace

runner = CliRunner()
GB = 1e9


def _trace(names: list[str], param_bytes: list[float], fwd_s: float = 1.0) -> Trace:
    layers = tuple(
        LayerProfile(n, fwd_s, 2 * fwd_s, pb, 0.0, 0.0)
        for n, pb in zip(names, param_bytes, strict=True)
    )
    return Trace("t", layers, 1, "fp16", "test")


def _run(trace: Trace, framework: str, *, p: int, w: int, m: int, topo, step=False) -> tuple:
    """One point of ``trace`` as ``framework`` runs it (no optimizer time unless ``step``)."""
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "t", "trace": "t"}],
            "training": {"global_batch": m * w, "optimizer_step": step},
            "options": {"partition": "uniform"},
            "framework": framework,
        }
    )
    point = PointConfig(
        model="t",
        schedule="1f1b",
        stages=p,
        dp_width=w,
        microbatch_size=1,
        microbatches=m,
        memory_policy="none",
        global_batch=m * w,
        framework=framework,
    )
    res = resolve(exp, point, topo, trace)
    met, log = evaluate(res)
    return res, met, log


def test_unbucketed_allreduce_is_exposed_after_the_backward():
    # One stage (two layers, F = 1 s, B = 2 s each), w = 2 replicas on a 1 GB/s link, m = 2,
    # B = 2e9 bytes of gradients. Megatron-DeepSpeed all-reduces after the last backward
    # (ReduceGrads): ring of 2: 2(w-1)/w * B / bw = 2 s, exposed: 2 x (2 + 4) + 2 = 14 s.
    # pipesim's 25 MiB buckets overlap the last backward (4 s > 2 s of all-reduce): only the
    # last bucket (0.4 MB of the 2e9 B = 79 x 25 MiB + rest) shows, < 0.03 s.
    topo = chain_topology(2, bandwidth_Bps=1 * GB)
    trace = _trace(["block.0", "block.1"], [1 * GB, 1 * GB])
    res, met, log = _run(trace, "megatron-deepspeed", p=1, w=2, m=2, topo=topo)
    assert res.sim_input.dp_bucket_bytes == 0.0
    assert met.iteration_time_s == pytest.approx(2 * (2 + 4) + 2 * (2 - 1) / 2 * 2e9 / 1e9)
    ar = [e for e in log.events if e.kind == "allreduce" and e.iteration == 1]
    # DeepSpeed's buckets of 5e8 fp16 elements (1e9 B): two of 1 s each per replica, in turn
    assert [e.end_s - e.start_s for e in ar] == pytest.approx([1.0] * 4)
    res, met, _ = _run(trace, "pipesim", p=1, w=2, m=2, topo=topo)
    assert res.sim_input.dp_bucket_bytes == DDP_BUCKET_BYTES
    assert 12.0 < met.iteration_time_s < 12.03


def test_tied_embedding_grads_allreduced_between_first_and_last_stage():
    # GPT-like trace: embedding, 2 blocks, head (1e9 B, Megatron's copy of the word
    # embedding); every layer F = 1 s, B = 2 s. Megatron's placement: [embedding, block.0 |
    # block.1, head]; p = 2, m = 1 (m < p: Megatron runs it). Free sends:
    # s0 F [0, 2], s1 F [2, 4], s1 B [4, 8], s0 B [8, 12]; the head's gradient is
    # all-reduced between gpu0 and gpu1 (ring of 2: B / bw = 1 s on a 1 GB/s link):
    # [12, 13] on both (s1 joined at 8), then the steps; iteration 13 s.
    topo = chain_topology(2, bandwidth_Bps=1 * GB)
    trace = _trace(["embedding", "block.0", "block.1", "head"], [0.5 * GB, 1.0, 1.0, 1 * GB])
    res, met, log = _run(trace, "megatron-deepspeed", p=2, w=1, m=1, topo=topo)
    assert res.boundaries == (0, 2)
    assert res.sim_input.runtime.tied_grad_bytes == 1 * GB
    tied = [(e.device, e.start_s, e.end_s) for e in log.events if e.name.startswith("tied")]
    assert tied[:2] == [("gpu1", 8.0, 13.0), ("gpu0", 12.0, 13.0)]
    assert all(e.nbytes == 1 * GB for e in log.events if e.name.startswith("tied"))
    assert met.iteration_time_s == pytest.approx(13.0)
    _, met, log = _run(trace, "torchtitan", p=2, w=1, m=2, topo=topo)  # untied embeddings
    assert not [e for e in log.events if e.name.startswith("tied")]
    # one stage holds both ends: the head uses the embedding's weight, stored once (weights
    # 0.5e9 + 2 B: the head's 1e9 B copy is gone), and nothing is all-reduced
    res, _, log = _run(trace, "megatron-deepspeed", p=1, w=1, m=1, topo=topo)
    assert res.sim_input.plans[0][0].weight_bytes == pytest.approx(0.5 * GB + 2.0)
    assert not [e for e in log.events if e.name.startswith("tied")]
    res, _, _ = _run(trace, "pipesim", p=1, w=1, m=1, topo=topo)
    assert res.sim_input.plans[0][0].weight_bytes == pytest.approx(1.5 * GB + 2.0)


def megatron_1f1b(p: int, m: int, rank: int) -> list[str]:
    """Megatron-LM ``forward_backward_pipelining_without_interleaving``'s order on ``rank``:
    ``min(p - rank - 1, m)`` warm-up forwards, ``m - warmup`` (F, B) pairs, the rest B."""
    warmup = min(p - rank - 1, m)
    remaining = m - warmup
    order = [f"{rank}F{i}" for i in range(warmup)]
    for i in range(remaining):
        order += [f"{rank}F{warmup + i}", f"{rank}B{i}"]
    return order + [f"{rank}B{i}" for i in range(remaining, m)]


@pytest.mark.parametrize("p, m", [(4, 1), (4, 2), (4, 3), (8, 5), (3, 3), (4, 6)])
def test_1f1b_with_fewer_microbatches_than_stages_as_megatron_runs_it(p, m):
    sched = OneFOneB(p, m, fewer_microbatches=True)
    got = [[str(a) for a in rank if a.op != STEP] for rank in sched.program(1)]
    assert got == [megatron_1f1b(p, m, r) for r in range(p)]
    # unit times, free sends: F = 1, B = 2; the makespan is (m + p - 1)(t_F + t_B) for any m
    log = simulate(uniform_input("1f1b", p, max(m, p), fwd_s=1.0, bwd_s=2.0))
    assert log.iteration_ends_s == [pytest.approx((max(m, p) + p - 1) * 3.0)]
    inp = replace(uniform_input("1f1b", p, max(m, p)), program=sched.program(1), microbatches=m)
    assert simulate(inp).iteration_ends_s == [pytest.approx((m + p - 1) * 3.0)]
    if m < p:  # torch's rule where the replay follows torch's Schedule1F1B
        with pytest.raises(ScheduleError, match="needs microbatches >= stages"):
            OneFOneB(p, m)
        assert not get_framework("pipesim").runs_fewer_microbatches(OneFOneB)
        assert get_framework("megatron-deepspeed").runs_fewer_microbatches(OneFOneB)


# p = 2, m = 2, 1F1B (s0: F0 F1 B0 B1, s1: F0 B0 F1 B1), F = 1 s, B = 2 s, every send 0.25 s
# (0.25 GB at 1 GB/s); every action is one op that costs its host 0.5 s (sim.hardware.host_ops:
# the device ends at max(device free + d, host + 0.5 + d), the host moves on by 0.5). Blocking
# exchanges: a send starts once its receiver has reached the consuming action and its sender
# waits for it. At a sync point the host clock waits for the device (HostThreads.wait), so the
# next action's op is issued only then (host_wait 0.5); elsewhere the host runs ahead.
MEGATRON = [  # a sync after every exchange (p2p_communication._communicate)
    ("host_wait", "gpu0", "host 0F0", 0.0, 0.5),  # the host's first issue
    ("compute", "gpu0", "0F0", 0.5, 1.5),  # act0 [1.5, 1.75]
    ("host_wait", "gpu0", "host 0F1", 1.75, 2.25),  # sync after send act0
    ("compute", "gpu0", "0F1", 2.25, 3.25),  # act1 waits for s1 to reach F1 (5.25)
    ("host_wait", "gpu1", "host 1F0", 1.75, 2.25),  # sync after recv act0
    ("compute", "gpu1", "1F0", 2.25, 3.25),
    ("compute", "gpu1", "1B0", 3.25, 5.25),  # no exchange: issued ahead; grad0, act1 [5.25, 5.5]
    ("host_wait", "gpu0", "host 0B0", 5.5, 6.0),
    ("compute", "gpu0", "0B0", 6.0, 8.0),
    ("host_wait", "gpu1", "host 1F1", 5.5, 6.0),
    ("compute", "gpu1", "1F1", 6.0, 7.0),
    ("compute", "gpu1", "1B1", 7.0, 9.0),  # grad1 waits for s0 to reach B1 (8): [9, 9.25]
    ("host_wait", "gpu0", "host 0B1", 9.25, 9.75),
    ("compute", "gpu0", "0B1", 9.75, 11.75),
]
DEEPSPEED = [  # a sync before every forward (the engine option; no profile sets it)
    ("host_wait", "gpu0", "host 0F0", 0.0, 0.5),
    ("compute", "gpu0", "0F0", 0.5, 1.5),  # act0 [1.5, 1.75]
    ("host_wait", "gpu0", "host 0F1", 1.75, 2.25),
    ("compute", "gpu0", "0F1", 2.25, 3.25),
    ("host_wait", "gpu1", "host 1F0", 1.75, 2.25),
    ("compute", "gpu1", "1F0", 2.25, 3.25),
    ("compute", "gpu1", "1B0", 3.25, 5.25),  # grad0 and act1 [5.25, 5.5]
    ("compute", "gpu0", "0B0", 5.5, 7.5),  # no sync before a backward: its op was issued ahead
    ("host_wait", "gpu1", "host 1F1", 5.5, 6.0),
    ("compute", "gpu1", "1F1", 6.0, 7.0),
    ("compute", "gpu1", "1B1", 7.0, 9.0),  # grad1 [9, 9.25]
    ("compute", "gpu0", "0B1", 9.25, 11.25),
]


@pytest.mark.parametrize(
    "runtime, expected, makespan",
    [
        (PipelineRuntime(blocking_p2p=True, sync_after_p2p=True), MEGATRON, 11.75),
        (PipelineRuntime(blocking_p2p=True, sync_before_forward=True), DEEPSPEED, 11.25),
    ],
    ids=["sync-per-p2p", "sync-before-forward"],
)
def test_host_sync_points_on_a_hand_computed_timeline(runtime, expected, makespan):
    topo = chain_topology(2, bandwidth_Bps=1 * GB)
    plain = uniform_input("1f1b", 2, 2, out_bytes=0.25 * GB, topology=topo)
    costs = tuple(replace(c, fwd_ops=1.0, bwd_ops=1.0) for c in plain.costs)
    host = HostOverhead(op_s=0.5, backward_op_s=0.5)
    log = simulate(replace(plain, costs=costs, host=host, runtime=runtime))
    spans = sorted(
        (e.kind, e.device, e.name, round(e.start_s, 9), round(e.end_s, 9))
        for e in log.events
        if e.kind in ("compute", "host_wait")
    )
    assert spans == sorted(expected)
    assert log.iteration_ends_s == [pytest.approx(makespan)]
    assert simulate(plain).iteration_ends_s == [pytest.approx(9.5)]  # async sends, no host


@pytest.mark.parametrize("name", ["deepspeed", "megatron-deepspeed"])
def test_deepspeed_partitioned_exchanges_block_the_host_only_with_tensor_parallelism(name):
    # DeepSpeed's PipelineEngine partitions its exchanges over the tensor-parallel group when
    # t > 1 (PartitionedTensor.to_meta / from_meta: blocking copies at every exchange) and never
    # synchronizes before a forward (its ThroughputTimer never counts a step). Same p = 2,
    # m = 2 case as above. t = 2: a sync after every exchange, the MEGATRON timeline, 11.75 s.
    # t = 1: only the first issue waits; 0F0 [0.5, 1.5], act0 [1.5, 1.75], 0F1 [1.75, 2.75]
    # (issued ahead), 1F0 [1.75, 2.75], 1B0 [2.75, 4.75], act1 and grad0 once s1 reaches F1
    # [4.75, 5], 0B0 [5, 7], 1F1 [5, 6], 1B1 [6, 8], grad1 [8, 8.25], 0B1 [8.25, 10.25].
    topo = chain_topology(2, bandwidth_Bps=1 * GB)
    plain = uniform_input("1f1b", 2, 2, out_bytes=0.25 * GB, topology=topo)
    costs = tuple(replace(c, fwd_ops=1.0, bwd_ops=1.0) for c in plain.costs)
    host = HostOverhead(op_s=0.5, backward_op_s=0.5)
    fw, trace = get_framework(name), _trace(["head"], [1.0])
    ends = {}
    for t in (1, 2):
        rt = fw.runtime(topo, trace, t)
        assert not rt.sync_before_forward
        rt = replace(rt, microbatch_load=PipelineRuntime().microbatch_load, loss_reads=0)
        log = simulate(replace(plain, costs=costs, host=host, runtime=rt))  # loads, reads apart
        ends[t] = log.iteration_ends_s
    assert ends[1] == [pytest.approx(10.25)]
    assert ends[2] == [pytest.approx(11.75)]


@pytest.mark.parametrize("name", ["deepspeed", "megatron-deepspeed"])
def test_deepspeed_reads_the_loss_before_each_backward_of_the_last_stage(name):
    # DeepSpeedEngine.backward (v0.9.3-v0.13.2) runs loss.mean().item() at every micro-batch
    # of the pipeline engine's last stage: the host waits for the forward, then the read's op.
    # One stage, m = 2, F = 1 s, B = 2 s, one op each at 0.5 s, a read of 0.5 s (op; read_s
    # 0): 0F0 [0.5, 1.5], host waits to 1.5 and reads to 2.0, issues 0B0 -> [2.5, 4.5]; 0F1
    # issued [2.5, 3.0] runs [4.5, 5.5]; read to 6.0, 0B1 [6.5, 8.5]. Without the read the
    # host runs ahead: 0B0 [1.5, 3.5], 0F1 [3.5, 4.5], 0B1 [4.5, 6.5].
    topo = chain_topology(1, bandwidth_Bps=1 * GB)
    plain = uniform_input("1f1b", 1, 2, topology=topo)
    costs = tuple(replace(c, fwd_ops=1.0, bwd_ops=1.0) for c in plain.costs)
    host = HostOverhead(op_s=0.5, backward_op_s=0.5)
    rt = get_framework(name).runtime(topo, _trace(["head"], [1.0]), 1)
    assert rt.loss_reads == 1
    rt = replace(rt, microbatch_load=PipelineRuntime().microbatch_load)  # tested apart
    ends = {}
    for reads in (1, 0):
        log = simulate(
            replace(plain, costs=costs, host=host, runtime=replace(rt, loss_reads=reads))
        )
        ends[reads] = log.iteration_ends_s
        if reads:
            spans = {(e.name, e.start_s, e.end_s) for e in log.events if e.kind == "compute"}
            assert {("0B0", 2.5, 4.5), ("0F1", 4.5, 5.5), ("0B1", 6.5, 8.5)} <= spans
    assert ends == {1: [pytest.approx(8.5)], 0: [pytest.approx(6.5)]}


def test_megatron_deepspeed_layers_wait_for_the_device_before_their_mlp():
    # ParallelTransformerLayer.forward builds moe_loss and mlp_bias with torch.tensor(0.0,
    # device=...): blocking copies, so the host waits once per block forward, after 44 of the
    # block's 63 counted ops; embedding and head keep none, nor does plain DeepSpeed.
    # One block of 63 ops at 10 us and 1 ms of device, both free at 0: without the wait the
    # host leads, the device ends at 10 us + 1 ms = 1.010 ms, the host at 0.630 ms. With it:
    # 44 ops (host 0.44 ms), device 0.01 + 1e-3 * 44/63 = 0.7084 ms; the host waits to it and
    # issues 19 more (0.8984 ms); the device resumes at 0.7184 and ends + 19/63 ms = 1.020 ms.
    layer = (1e-3, 63.0, 0.0, 0.0, 0.0)
    cost = StageCost(3e-3, 6e-3, 0.0, 0.0, fwd_layers=(layer,) * 3)
    kinds = ["embedding", "block", "head"]
    synced = get_framework("megatron-deepspeed").host_captured(cost, kinds)
    assert synced.fwd_syncs == ((), (pytest.approx(44 / 63),), ())
    assert get_framework("deepspeed").host_captured(cost, kinds).fwd_syncs == ()
    host = HostOverhead(op_s=10e-6)
    ends = [
        layered_work(host, "F", (c.forward_parts(())[1],)).finish(0.0, 0.0) for c in (cost, synced)
    ]
    assert ends[0] == (pytest.approx(1.010e-3), pytest.approx(0.630e-3))
    assert ends[1] == (pytest.approx(1.020e-3), pytest.approx(1e-5 + 1e-3 * 44 / 63 + 19e-5))


def test_megatron_deepspeed_layers_wait_out_their_two_scalar_copies():
    # The two torch.tensor(0.0, device=...) before the MLP are blocking copies (cudaMemcpyAsync
    # then cudaStreamSynchronize): after the wait each costs the host a read (10 us here) while
    # the drained device runs nothing else. The block of the test above, both free at 0: the
    # device ends the first 44 ops at 0.01 + 1e-3 * 44/63 = 0.7084 ms; the host waits to it,
    # then 2 x 10 us of copies (0.7284 ms), then issues 19 ops (0.19 ms: host at 0.9184 ms);
    # the device resumes one op later and ends 0.7284 + 19/63 ms + 0.19/19 ms = 1.040 ms,
    # 20 us after the block without the copies (1.020 ms). Plain DeepSpeed makes none.
    layer = (1e-3, 63.0, 0.0, 0.0, 0.0)
    cost = StageCost(3e-3, 6e-3, 0.0, 0.0, fwd_layers=(layer,) * 3)
    kinds = ["embedding", "block", "head"]
    synced = get_framework("megatron-deepspeed").host_captured(cost, kinds)
    assert synced.fwd_sync_reads == ((), (2.0,), ())
    assert get_framework("deepspeed").host_captured(cost, kinds).fwd_sync_reads == ()
    host = HostOverhead(op_s=10e-6, read_s=10e-6)
    block = synced.forward_parts(())[1]
    end = layered_work(host, "F", (block,)).finish(0.0, 0.0)
    assert end == (pytest.approx(1.040e-3), pytest.approx(1e-5 + 1e-3 * 44 / 63 + 2e-5 + 19e-5))
    recomputed = layered_work(host, "R", synced.recompute_parts((1,))).finish(0.0, 0.0)
    assert recomputed[0] == pytest.approx(1.040e-3)  # the recompute makes them again


@pytest.mark.parametrize(
    "schedule, p, m, makespan",
    [("1f1b", 4, 8, 33.0), ("1f1b", 8, 16, 69.0), ("interleaved_1f1b", 4, 8, 28.5)],
)
def test_blocking_exchanges_keep_the_golden_makespans_when_sends_are_free(schedule, p, m, makespan):
    # schedules.md §3 (F = 1, B = 2, free sends): blocking exchanges (with the interleaved
    # schedule's receives posted for the next F and B, Megatron's
    # send_forward_backward_recv_forward_backward) neither deadlock nor add a wait.
    rt = PipelineRuntime(blocking_p2p=True, sync_after_p2p=True)
    log = simulate(replace(uniform_input(schedule, p, m), runtime=rt))
    assert log.iteration_ends_s == [pytest.approx(makespan)]


def test_step_barrier_waits_for_every_stage():
    # GPipe p = 2, m = 2, F = 1, B = 2, free sends, optimizer 1 s: s1's backwards end at 7,
    # s0's at 9. Without a barrier s1 steps [7, 8]; "before_update" (Megatron's found-inf and
    # grad-norm all-reduces) holds it until s0 arrives: both step [9, 10].
    base = uniform_input("gpipe", 2, 2, optimizer_s=1.0)
    steps = {
        b: sorted(
            (e.device, e.start_s, e.end_s)
            for e in simulate(replace(base, runtime=PipelineRuntime(step_barrier=b))).events
            if e.kind == "optimizer"
        )
        for b in ("none", "before_update", "after_update")
    }
    assert steps["none"] == [("gpu0", 9.0, 10.0), ("gpu1", 7.0, 8.0)]
    assert steps["before_update"] == [("gpu0", 9.0, 10.0), ("gpu1", 9.0, 10.0)]
    assert steps["after_update"] == steps["none"]


def test_embedding_and_head_placement():
    # 24 blocks on 4 stages: Megatron puts 6 on each, the embedding first, the head last;
    # pipesim's layer count split (torchtitan's too) counts embedding and head as layers.
    names = ["embedding"] + [f"block.{i}" for i in range(24)] + ["head"]
    gpt = _trace(names, [10.0] + [1.0] * 24 + [10.0])
    assert megatron_boundaries(gpt, 4) == (0, 7, 13, 19)
    assert get_framework("megatron-lm").boundaries(gpt, 4) == (0, 7, 13, 19)
    assert get_framework("torchtitan").boundaries(gpt, 4) == (0, 7, 14, 20)
    # DeepSpeed's default balances parameters: 44 on 4 stages, smallest bottleneck 11, filled
    # first stage first: [embedding + block.0 | 11 blocks | 11 blocks | block.23 + head]
    assert parameter_boundaries(gpt, 4) == (0, 2, 13, 24)
    assert megatron_boundaries(_trace(["a", "b", "c"], [1, 1, 1]), 2) == (0, 2)


def test_torchtitan_replicates_with_ddp_without_dp_shard():
    # torchtitan before e1847f439 (option data_parallel ddp) with dp_shard 1 applied DDP
    # (apply_ddp: replicate(model, bucket_cap_mb=100)): states whole, gradients all-reduced in
    # 100 MiB buckets overlapping the last backward; its default since, fully_shard over one
    # rank: tests/test_fsdp.py.
    topo = chain_topology(2, bandwidth_Bps=1 * GB)
    trace = _trace(["block.0", "block.1"], [1 * GB, 1 * GB])
    res, _, log = _run(trace, "torchtitan[data_parallel=ddp]", p=1, w=2, m=2, topo=topo)
    plan = res.sim_input.plans[0][0]
    assert not plan.dp_sharded and plan.fsdp is None
    assert res.sim_input.dp_bucket_bytes == 100 * 2**20
    full = _run(trace, "pytorch-ddp", p=1, w=2, m=2, topo=topo)[0].sim_input.plans[0][0]
    assert plan.optimizer_bytes == pytest.approx(full.optimizer_bytes)
    assert {e.kind for e in log.events if e.stream == "comm"} == {"allreduce"}


@pytest.mark.parametrize(
    "framework, w, extra",
    [
        ("megatron-deepspeed", 1, 42 + 8),
        ("megatron-deepspeed", 2, 42 + 8 + 4),
        ("megatron-lm", 1, 24 + 2 * 2),
        ("megatron-lm", 2, 24 + 4 * 2),
    ],
)
def test_mixed_precision_step_moves_the_framework_passes(framework, w, extra):
    # fp16 Adam: the fused step moves grad 2 + 2 x (master 4 + m 4 + v 4) + weight 2 = 28 B per
    # parameter; DeepSpeed's FP16_Optimizer.step 42 B more, its gradient reduction 8 B
    # (flatten, copy back) and 4 B (average) with w > 1; Megatron's Float16Optimizer 24 B and
    # passes over its 2-byte gradient buffer: zeroing and the NaN check's norm, with w > 1 its
    # in-place scaling (read + write).
    topo = chain_topology(w)
    trace = _trace(["block.0", "block.1"], [1 * GB, 1 * GB])
    kw = dict(p=1, w=w, m=1, topo=topo, step=True)
    ref = _run(trace, "pipesim", **kw)[0].sim_input.plans[0][0]
    res = _run(trace, framework, **kw)[0]
    assert res.sim_input.plans[0][0].optimizer_s == pytest.approx(
        ref.optimizer_s * (28 + extra) / 28
    )


@pytest.mark.parametrize(
    "framework, per_grad_byte", [("megatron-deepspeed", 4), ("megatron-lm", 2)]
)
def test_mixed_precision_step_holds_fp32_gradient_copies(framework, per_grad_byte):
    # 2e9 B of fp16 gradients, no activations: the GPU peak is at the step, where DeepSpeed
    # holds per-parameter fp32 copies and the flat fp32 buffer (4 B + 4 B per 2-byte
    # gradient: 8e9 B) and Megatron the fp32 main gradients (4e9 B) above pipesim's peak.
    topo = chain_topology(1)
    trace = _trace(["block.0", "block.1"], [1 * GB, 1 * GB])
    peaks = {
        fw: max(_run(trace, fw, p=1, w=1, m=1, topo=topo, step=True)[2].meta["peak_bytes"].values())
        for fw in ("pipesim", framework)
    }
    assert peaks[framework] - peaks["pipesim"] == pytest.approx(per_grad_byte * 2 * GB)


def _write(tmp_path: Path, **changes) -> None:
    exp = {
        "name": "fw",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 2}],
        "sweep": {"schedule": "1f1b", "stages": 4, "microbatch_size": 1},
        "options": {"partition": "uniform"},
        **changes,
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))


@pytest.mark.parametrize(
    "changes, mentions",
    [
        ({"framework": "megatron"}, ["exp.yaml", "framework", "megatron-deepspeed", "pytorch-ddp"]),
        ({"framework": ["megatron-lm"]}, ["exp.yaml", "framework"]),
        ({}, ["1f1b needs microbatches >= stages", "2 < 4"]),  # pipesim keeps torch's rule
        (
            {"framework": "megatron-deepspeed", "sweep": {"schedule": "gpipe", "stages": 2}},
            ["framework megatron-deepspeed runs only 1f1b, not gpipe"],
        ),
    ],
    ids=["unknown", "not-a-string", "m-lt-p-under-torch", "schedule-not-run"],
)
def test_framework_config_errors(tmp_path, monkeypatch, changes, mentions):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, **changes)
    res = runner.invoke(app, ["run", "exp.yaml", "--jobs", "1"])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.replace("│", " ").split())
    assert "Traceback" not in flat
    for text in mentions:
        assert text in flat, (text, flat)
    assert not (tmp_path / "results").exists()


def test_validate_replays_only_the_default_runtime(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, framework="megatron-lm")
    res = runner.invoke(app, ["validate", "exp.yaml"])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.replace("│", " ").split())
    assert "framework" in flat and "set framework: pipesim" in flat


def test_framework_recorded_in_results_and_winner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, framework="megatron-deepspeed")  # m = 2 < p = 4: DeepSpeed runs it
    res = runner.invoke(app, ["run", "exp.yaml", "--jobs", "1", "--out", "out"])
    assert res.exit_code == 0, res.output
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(rows.framework) == ["megatron-deepspeed"]
    assert yaml.safe_load((tmp_path / "out" / "winner.yaml").read_text())["framework"] == (
        "megatron-deepspeed"
    )


def test_every_profile_cites_every_setting():
    assert framework_names()[0] == "pipesim"
    for name in framework_names():
        for setting, s in get_framework(name).settings().items():
            assert len(s.source) > 20, (name, setting)
    # the default is what `sim validate` replays: the engine's own defaults
    default = get_framework("pipesim")
    assert default.runtime(chain_topology(2), _trace(["head"], [1.0])) == replace(
        PipelineRuntime(), tied_grad_bytes=0.0
    )
    assert default.bucket_bytes(_trace(["a"], [1.0])) == DDP_BUCKET_BYTES


def test_expand_records_the_framework_on_every_point():
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "t", "trace": "t"}],
            "training": {"global_batch": 2},
            "sweep": {"schedule": ["1f1b", "gpipe"], "stages": [2, 4]},
            "framework": "megatron-lm",
        }
    )
    trace = _trace([f"block.{i}" for i in range(4)], [1.0] * 4)
    points, skipped = expand(Prepared(exp, "x.yaml", chain_topology(4), {"t": trace}))
    assert {(p.schedule, p.stages, p.framework) for p in points} == {
        ("1f1b", 2, "megatron-lm"),
        ("1f1b", 4, "megatron-lm"),
    }
    assert {r for _, r in skipped} == {
        "framework megatron-lm runs only 1f1b, interleaved_1f1b, not gpipe"
    }


def test_megatron_lm_with_torch_ddp_differs_only_in_the_gradient_reduction_and_buffers():
    # SC'21's run_table_1.sh: --DDP-impl torch (25 MiB buckets overlapped with the backward)
    torch_ddp, lm = get_framework("megatron-lm-torch-ddp"), get_framework("megatron-lm")
    assert torch_ddp.dp_bucket_bytes.value == DDP_BUCKET_BYTES and lm.dp_bucket_bytes.value == 0
    assert torch_ddp.reduce_extra_bytes.value == (0.0, 0.0)
    memory = {"main_grads_fp32", "bucket_copy", "wgrad_fusion", "te_workspace"}
    buffer = {"grad_buffer_passes", "main_grad_step_bytes"}  # Megatron-Core's gradient buffer
    same = set(lm.SETTINGS) - {"dp_bucket_bytes", "reduce_extra_bytes"} - memory - buffer
    assert all(getattr(torch_ddp, k).value == getattr(lm, k).value for k in same)


def _waits_before(ops: str, overlap: bool) -> float:
    """When a rank may start the last action of ``ops`` (run at once, in order) after, at
    t = 0, a steady-state backward (one after a forward) posted a send of 5 s and the forward
    after it a send of 1 s (sim.engine.exchanges, blocking exchanges)."""
    from types import SimpleNamespace

    import simpy

    from sim.engine.exchanges import Exchanges
    from sim.schedules.action import Action

    env = simpy.Environment()

    class Stream:
        def wait(self, event, gpu, name, **tags):
            yield event

    rt = PipelineRuntime(blocking_p2p=True, overlap_p2p=overlap)
    inp = SimpleNamespace(runtime=rt, stage_ranks=[0, 0], stages=2)
    ex = Exchanges(env, inp, Stream(), None, None)
    rep = SimpleNamespace(replica=0, stage=0, tp_rank=0, gpu="gpu0")

    def send(seconds):
        yield env.timeout(seconds)

    for op in "FB":  # the forward and the backward that sends
        env.run(env.process(ex.boundary(rep, Action(1, op, 0), {}, False)))
    ex.track(rep, env.process(send(5.0)), "grad")
    ex.track(rep, env.process(send(1.0)), "act")  # the next forward's (its boundary: no wait)
    for i, op in enumerate(ops):
        env.run(env.process(ex.boundary(rep, Action(1, op, 2 + i), {}, False)))
    return env.now


def test_overlapped_p2p_defers_a_backwards_sends_past_the_next_backward():
    # Megatron-Core's overlap_p2p_comm (interleaved schedule, NVIDIA/Megatron-LM@d98e8a6
    # schedules.py pp_post_backward): a backward's send_prev is waited after the next
    # backward has run and posted its own sends; a forward's send_next is waited at once
    # (deallocate_pipeline_outputs). Pending: a backward's send of 5 s and a forward's of 1 s.
    # Blocking exchanges (batch_isend_irecv + wait) start any next action at 5 s; overlapped,
    # the next forward and the next backward start at 1 s, the action after that backward at 5.
    assert _waits_before("F", overlap=False) == 5.0
    assert _waits_before("B", overlap=False) == 5.0
    assert _waits_before("F", overlap=True) == 1.0
    assert _waits_before("B", overlap=True) == 1.0
    assert _waits_before("BF", overlap=True) == 5.0


def test_sends_within_nccls_fifo_break_the_interleaved_rendezvous_cycle():
    # Interleaved 1F1B p = 4, v = 3, m = 10 (rounds of 5, Megatron's
    # --microbatch-group-size-per-virtual-pipeline-stage 5), blocking overlapped sends. Under a
    # pure rendezvous: rank 0 (... 0F8 8B2 0F9 8B3 4F5 ...) waits 8B2's send after 8B3; rank 3
    # (... 3F6 7B1 3F7 7B2 ...) posts 7B2's receive after 7B1, which waits 3F6's send, whose
    # receive rank 0 posts after 4F5: a cycle. NCCL completes a send that fits its FIFO
    # without the receive (sim.comm.nccl.P2P_FIFO_BYTES), so with 1 MB sends the step runs.
    rt = PipelineRuntime(blocking_p2p=True, overlap_p2p=True)
    inp = uniform_input("interleaved_1f1b", 4, 10, virtual_stages=3, out_bytes=1e6)
    with pytest.raises(ValueError, match=r"deadlocked: 0 of 12 optimizer steps ran"):
        simulate(replace(inp, runtime=rt))
    log = simulate(replace(inp, runtime=replace(rt, eager_send_bytes=1e6)))
    assert len(log.iteration_ends_s) == 1


def test_megatron_overlaps_p2p_only_under_the_interleaved_schedule():
    # --no-overlap-p2p-communication is off by default (overlap on), and Megatron-Bridge's
    # comm_overlap sets it for pp > 1 and vp > 1; the non-interleaved schedule refuses it
    topo = chain_topology(2, bandwidth_Bps=1 * GB)
    trace = _trace(["block.0", "block.1"], [1 * GB, 1 * GB])
    mlm = get_framework("megatron-lm")
    inter, plain = mlm.runtime(topo, trace, 1, 2), mlm.runtime(topo, trace, 1, 1)
    assert inter.overlap_p2p and not inter.sync_after_p2p
    assert not plain.overlap_p2p and plain.sync_after_p2p
    off = get_framework("megatron-lm[overlap_p2p_comm=false]").runtime(topo, trace, 1, 2)
    assert not off.overlap_p2p and off.sync_after_p2p
    # batch_p2p_comm (the pipeline group's communicator) exactly where overlap_p2p_comm is off
    assert not inter.batched_p2p and plain.batched_p2p and off.batched_p2p


def test_overlapped_p2p_keeps_the_golden_interleaved_makespan():
    # schedules.md §3: interleaved 1F1B, p = 4, m = 8, F = 1, B = 2, free sends: 28.5 s
    rt = PipelineRuntime(blocking_p2p=True, overlap_p2p=True)
    log = simulate(replace(uniform_input("interleaved_1f1b", 4, 8), runtime=rt))
    assert log.iteration_ends_s == [pytest.approx(28.5)]


def test_no_overlap_p2p_flag_maps_only_under_the_interleaved_schedule():
    # sim import: --no-overlap-p2p-communication turns the option off where it applies (pp > 1
    # and vp > 1); elsewhere Megatron has nothing to overlap
    from sim.parallel.layout import ParallelLayout
    from sim.runs.megatron_overlap import read_options

    flags = {"no-overlap-p2p-communication": True}
    opts, _ = read_options(flags, ParallelLayout(pp=4, vp=2), True)
    assert opts == {"overlap_p2p_comm": "false"}
    opts, notes = read_options(flags, ParallelLayout(pp=4), True)
    assert opts == {} and notes[0][1] == "ignored"


def test_megatron_deepspeed_sums_the_tied_embeddings_two_gradients_where_one_stage_holds_both():
    # GPTModelPipe at p = 1: the lookup's and the head's gradients of one [V/t, h] weight are
    # summed in the AccumulateGrad node's InputBuffer (read two, write one): V 1000, h 64,
    # fp16, t 2: 3 * 1000 * 64 * 2 / 2 = 192,000 bytes, one kernel: launch overhead plus the
    # bytes at the GPU's achieved HBM rate, added to the embedding's backward; nothing on a
    # stage without the head, nor in plain DeepSpeed (no TiedLayerSpec).
    spec = load_hardware("dgx-a100-40gb").gpus[0].compute
    assert spec is not None
    shape = {"kind": "gpt", "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 1000}
    trace = replace(_trace(["embedding", "head"], [0.0, 0.0]), provenance={"model_shape": shape})
    cost = StageCost(2.0, 4.0, 0.0, 0.0, bwd_weight_s=1.0, bwd_layers=((2.0, 8, 0), (2.0, 20, 0)))
    md = get_framework("megatron-deepspeed")
    add = spec.kernel_overhead_s + 192_000 / (spec.hbm_bandwidth_Bps * spec.hbm_efficiency)
    both = md.stage_device_work(cost, ["embedding", "head"], trace.layers, trace, 2, spec)
    assert both.bwd_s == pytest.approx(4.0 + add) and both.bwd_weight_s == pytest.approx(1.0 + add)
    assert both.bwd_layers[0][0] == pytest.approx(2.0 + add) and both.bwd_layers[1][0] == 2.0
    assert (
        md.stage_device_work(cost, ["embedding", "block"], trace.layers, trace, 2, spec).bwd_s
        == 4.0
    )
    ds = get_framework("deepspeed")
    assert ds.stage_device_work(cost, ["embedding", "head"], trace.layers, trace, 2, spec) == cost


def test_weight_gradients_accumulate_into_grad_after_each_iterations_first_microbatch():
    # DeepSpeed's FP16_Optimizer.step leaves every .grad None, so an iteration's first backward
    # takes the gradient and each later one adds into it (AccumulateGrad): one stage, 1F1B,
    # m 3, F 1, B 2, 0.5 s of accumulation, two iterations: per iteration 3 F + 3 B + 2 x 0.5
    # = 10 s, so the iterations end at 10 and 20 (9 and 18 without).
    base = uniform_input("1f1b", 1, 3, iterations=2)
    acc = replace(base, costs=tuple(replace(c, bwd_accumulate=(0.5,)) for c in base.costs))
    assert simulate(base).iteration_ends_s == [pytest.approx(9.0), pytest.approx(18.0)]
    assert simulate(acc).iteration_ends_s == [pytest.approx(10.0), pytest.approx(20.0)]


def test_megatron_deepspeed_charges_accumulation_per_parameter_tensor():
    # A block of 12 parameter tensors (8 vectors, 4 matrices) and 1 MB of weights: 12 add_
    # kernels moving 3 MB; a p = 1 head's output weight is the embedding's (1 MB counted
    # there), so only its 2 norm vectors' kernels remain (0.1 MB of its own bytes).
    spec = load_hardware("dgx-a100-40gb").gpus[0].compute
    assert spec is not None
    shape = {"kind": "gpt", "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 1000}
    trace = replace(
        _trace(["embedding", "block.0", "head"], [1.1e6, 1e6, 1.1e6]),
        provenance={"model_shape": shape},
    )
    cost = StageCost(3.0, 6.0, 0.0, 0.0, bwd_layers=((2.0, 8, 0),) * 3)
    kinds = ["embedding", "block", "head"]
    out = get_framework("megatron-deepspeed").stage_device_work(
        cost, kinds, trace.layers, trace, 1, spec
    )
    rate, k = spec.hbm_bandwidth_Bps * spec.hbm_efficiency, spec.kernel_overhead_s
    shared = 1000 * 64 * 2  # V h d, the tied word embedding
    assert out.bwd_accumulate == (
        pytest.approx(2 * k + 3 * 1.1e6 / rate),
        pytest.approx(12 * k + 3 * 1e6 / rate),
        pytest.approx(2 * k + 3 * (1.1e6 - shared) / rate),
    )
    ds = get_framework("deepspeed").stage_device_work(cost, kinds, trace.layers, trace, 1, spec)
    assert ds.bwd_accumulate == ()

"""Communication overlap as the frameworks run it (issue 26 item 2): one test per mechanism,
each a closed form or a hand-computed small timeline.

Options of a profile (spec strings), Megatron-Core's bucket rule and stage-0-only buckets, the
distributed optimizer's all-gather under the next forward, tensor-parallel collectives beside
their GEMMs (TE userbuffers, AsyncTP), CUDA graphs, the combined 1F1B with delayed weight
gradients, DeepEP's measured dispatch."""

from __future__ import annotations

from dataclasses import replace

import pytest
import simpy
from helpers import chain_topology, uniform_input

from sim.comm.ep_dispatch import dispatch_cost, efficiency
from sim.config import framework_spec_of, parse_experiment, parse_framework_spec
from sim.engine import simulate
from sim.engine.inputs import PipelineRuntime
from sim.engine.overlap import PairOverlap
from sim.engine.param_gather import reach_times
from sim.engine.replicas import stage_replicas
from sim.engine.stage_cost import StageCost
from sim.engine.streams import ComputeStream
from sim.errors import InputError
from sim.framework import get_framework
from sim.framework.cuda_graphs import captured, captured_share
from sim.framework.megatron_options import bucket_params
from sim.hardware.host_ops import HostOverhead
from sim.memory.plan import StagePlan
from sim.parallel.ops import GroupOp
from sim.parallel.tp_overlap import OverlapOp
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.simulate import resolve
from sim.schedules.action import Action
from sim.schedules.combined import combine_pairs, combine_reason
from sim.schedules.registry import get_schedule
from sim.trace.generator import preset_gpu, transformer_trace

GB = 1e9


# -- options ---------------------------------------------------------------------------------
def test_spec_strings_and_mappings_name_the_same_profile():
    spec = framework_spec_of({"name": "megatron-lm", "tp_comm_overlap": True, "ddp_bucket_size": 5})
    assert spec == "megatron-lm[tp_comm_overlap=true,ddp_bucket_size=5]"
    assert parse_framework_spec(spec) == (
        "megatron-lm",
        {"tp_comm_overlap": "true", "ddp_bucket_size": "5"},
    )
    f = get_framework(spec)
    assert f is get_framework("megatron-lm[ddp_bucket_size=5,tp_comm_overlap]")
    assert f.spec == "megatron-lm[ddp_bucket_size=5,tp_comm_overlap]"  # sorted, defaults dropped
    assert get_framework("megatron-lm[tp_comm_overlap=false]").spec == "megatron-lm"
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx-h100",
            "models": [{"name": "m", "trace": "gpt-5b"}],
            "framework": {"name": "megatron-lm", "overlap_grad_reduce": True},
        }
    )
    assert exp.framework == "megatron-lm[overlap_grad_reduce=true]"


@pytest.mark.parametrize("scope", [["attn", "moe_router"], "attn,moe_router"])
def test_a_list_valued_option_is_refused_with_the_spelling_that_works(scope):
    """A scope written as a YAML list or with commas printed the message template's
    unformatted '{value!r}'; the message now shows the value and how to join several."""
    from pydantic_core import PydanticCustomError

    with pytest.raises(PydanticCustomError) as err:
        framework_spec_of({"name": "megatron-lm", "cuda_graph_scope": scope})
    msg = str(err.value)
    assert "{value" not in msg and repr(scope) in msg
    assert "join several module names with '+'" in msg
    spec = framework_spec_of({"name": "megatron-lm", "cuda_graph_scope": "attn+moe_router"})
    assert get_framework(spec).spec == "megatron-lm[cuda_graph_scope=attn+moe_router]"


@pytest.mark.parametrize(
    "spec, says",
    [
        ("megatron-lm[no_such_option]", "has no option 'no_such_option'"),
        ("megatron-lm[moe_token_dispatcher=nccl]", "not one of alltoall, deepep, hybridep"),
        ("megatron-lm[delay_wgrad_compute]", "needs overlap_moe_expert_parallel_comm"),
        ("megatron-lm[cuda_graph_scope=attn+experts]", "'experts' is not one of"),
        ("torchtitan[enable_async_tensor_parallel]", "needs compile"),
        ("megatron-lm[overlap_grad_reduce", "write name[option,option=value]"),
    ],
)
def test_bad_options_are_refused_with_the_reason(spec, says):
    with pytest.raises(KeyError) as err:
        get_framework(spec)
    assert says in str(err.value)


# -- gradient buckets ------------------------------------------------------------------------
def test_megatron_bucket_size_rule():
    # max(40M, 1M x dp x cp) parameters (training.py::get_model), in the gradients' bytes
    # (bf16: 2 B); no buckets without overlap_grad_reduce (one reduction after the backward).
    assert bucket_params(8) == 40_000_000
    assert bucket_params(64) == 64_000_000
    assert bucket_params(64, 134_217_728) == 134_217_728
    trace = transformer_trace(
        "gpt", name="g", layers=4, hidden=1024, heads=16, seq_len=1024, vocab=51200,
        microbatch_size=1, dtype="bf16", gpu=preset_gpu("dgx-h100"),
    )  # fmt: skip
    on = get_framework("megatron-lm[overlap_grad_reduce]")
    assert on.bucket_bytes(trace, 8) == 80e6
    assert on.bucket_bytes(trace, 64) == 128e6
    assert get_framework("megatron-lm").bucket_bytes(trace, 64) == 0.0
    # A stage of 1.2e9 bf16 gradient bytes at dp 8: ceil(1.2e9 / 80e6) = 15 buckets.
    from sim.engine.buckets import buckets

    assert len(buckets(1.2e9, on.bucket_bytes(trace, 8))) == 15


def test_only_stage_zero_buckets_the_others_reduce_once_at_their_last_backward():
    # GPipe p = 2, m = 2, w = 2, 4e9 B of gradients per stage, 1e9 B buckets, 2e9 B/s links
    # (tests/test_engine_scenarios.py::test_bucketed_allreduce_exposes_only_the_last_bucket).
    # With Megatron-Core's rule only stage 0 buckets: its last backward B1 [7, 9] reduces
    # buckets [7.5, 8] ... [9, 9.5] (only the last one exposed); stage 1 reduces all 4e9 B in
    # one all-reduce launched as its B1 ends at 7: 2 (4e9 / 2) / 2e9 = 2 s -> [7, 9].
    topo = chain_topology(4, bandwidth_Bps=2 * GB, latency_s=0.0)
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=4 * GB)
    inp = uniform_input("gpipe", 2, 2, w=2, topology=topo, plan=plan)
    inp = replace(inp, dp_bucket_bytes=1 * GB, runtime=PipelineRuntime(bucket_stages="first"))
    log = simulate(inp)
    ar = sorted(
        (e.device, e.name, e.start_s, e.end_s)
        for e in log.events
        if e.kind == "allreduce" and e.replica == 0
    )
    assert ar == [
        ("gpu0", "allreduce s0 b0", 7.5, 8.0),
        ("gpu0", "allreduce s0 b1", 8.0, 8.5),
        ("gpu0", "allreduce s0 b2", 8.5, 9.0),
        ("gpu0", "allreduce s0 b3", 9.0, 9.5),
        ("gpu1", "allreduce s1 b0", 7.0, 9.0),
    ]
    assert log.iteration_ends_s == [9.5]


# -- parameter all-gather under the next forward ----------------------------------------------
def test_reach_times_closed_form():
    # b_0 = start; b_j = max(b_{j-1} + c_{j-1}, e_j)
    assert reach_times(0.25, [1.0] * 4, [0.25, 0.5, 0.75, 1.0]) == [0.25, 1.25, 2.25, 3.25]
    assert reach_times(0.25, [0.1] * 4, [0.25, 0.5, 0.75, 1.0]) == [0.25, 0.5, 0.75, 1.0]


def _gather_input(fwd_s: float):
    """One stage, w = 2 (gpu0, gpu1 at 2e9 B/s), m = 1, 2 iterations, distributed optimizer
    with 4e9 B of parameters in 1e9 B buckets gathered under the next forward (``forward``);
    a bucket's all-gather over 2 ranks: (1/2) 1e9 / 2e9 = 0.25 s."""
    topo = chain_topology(2, bandwidth_Bps=2 * GB, latency_s=0.0)
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=4 * GB, dp_sharded=True)
    inp = uniform_input(
        "gpipe", 1, 1, w=2, topology=topo, plan=plan, fwd_s=fwd_s, bwd_s=0.0, iterations=2
    )
    return replace(inp, dp_bucket_bytes=1 * GB, runtime=PipelineRuntime(param_gather="forward"))


def test_param_gather_hides_under_a_longer_forward():
    # Iteration 1's forward (4 s, 1 s per bucket) waits for bucket 0 only (0.25 s exposed);
    # bucket j + 1 is launched when the forward reaches bucket j, and is done before it is
    # needed (reach_times: 0.25, 1.25, 2.25, 3.25): the forward ends 0.25 + 4 after it began.
    log = simulate(_gather_input(4.0))
    f1 = next(e for e in log.events if e.name == "0F1" and e.device == "gpu0")
    stalls = [e for e in log.events if e.name == "wait param gather s0" and e.device == "gpu0"]
    assert [(s.end_s - s.start_s) for s in stalls] == [pytest.approx(0.25)]
    assert stalls[0].end_s == pytest.approx(f1.start_s)
    assert f1.end_s - f1.start_s == pytest.approx(4.0)
    gathers = sorted(e.start_s for e in log.events if e.kind == "all_gather" and e.replica == 0)
    start = stalls[0].start_s
    assert [g - start for g in gathers] == pytest.approx([0.0, 0.25, 1.25, 2.25])


def test_param_gather_longer_than_the_forward_stalls_it():
    # A 0.4 s forward (0.1 s per bucket): the buckets run back to back (ends 0.25 ... 1.0
    # after the forward was ready), the forward reaches the last one at 1.0 and ends 1.1:
    # its compute [0.25, 0.65], then a stall until 1.1.
    log = simulate(_gather_input(0.4))
    stalls = sorted(
        (e.start_s, e.end_s)
        for e in log.events
        if e.name == "wait param gather s0" and e.device == "gpu0"
    )
    t0 = stalls[0][0]
    flat = [x - t0 for span in stalls for x in span]
    assert flat == pytest.approx([0.0, 0.25, 0.65, 1.1])


# -- tensor-parallel collectives beside their GEMMs ------------------------------------------
def test_overlap_pair_closed_forms():
    ring = OverlapOp("all_gather", 1.0, 1, "ring_exchange", 4.0, 1.0, 4)
    assert ring.pair_s(1.5) == 4.0  # 1 + 3 max(1, 0.5): hidden
    assert ring.pair_s(6.0) == 7.0  # 1 + 3 max(1, 2): the collective sets the pace
    pipe = OverlapOp("reduce_scatter", 1.0, 1, "pipeline", 4.0, 1.25, 4)
    assert pipe.pair_s(2.0) == pytest.approx(1.25 + 3 * 1.25 + 0.5)  # g + 3 max(g, C/4) + C/4
    bulk = OverlapOp("reduce_scatter", 1.0, 2, "bulk", 4.0, 4.5, 1)
    assert bulk.pair_s(3.0) == 4.5 and bulk.pair_s(6.0) == 6.0  # max(G', C)
    assert bulk.extra_s(3.0) == pytest.approx(2 * 0.5)  # count x (pair - G)


def test_tp_overlap_margin_slows_the_gemm_by_the_sm_share():
    # TE's bulk method: the GEMM runs on sm - 16 SMs while its collective holds 16.
    from sim.compute.kernels import gemm, kernel_time_s
    from sim.parallel.tp_overlap import overlap_op

    spec = preset_gpu("dgx-h100")
    k = gemm("d_qkv_w", 8192, 3072, 8192, 2)
    op = overlap_op("reduce_scatter", 1e8, "bulk", (k,), spec, "bf16", 8, 16)
    full = kernel_time_s(k, spec, "bf16")
    assert op.gemm_s == pytest.approx(full)
    assert op.chunk_s == pytest.approx(full * spec.sm_count / (spec.sm_count - 16))


def test_tp_collective_runs_beside_the_compute():
    # One stage on a tensor group of 2 GPUs at 1e9 B/s, m = 1: the forward's all-gather of
    # 1e9 B (ring of 2: 0.5 s) beside a 0.4 s GEMM in 2 chunks of 0.2 s:
    # 0.2 + max(0.2, 0.5) = 0.7 s, 0.3 s more than the GEMM: F [0, 1.3] with the all-gather
    # [0, 0.5] on the tp stream (exposed after it instead: F [0, 1] then [1, 1.5]).
    op = OverlapOp("all_gather", 1 * GB, 1, "ring_exchange", 0.4, 0.2, 2)
    inp = uniform_input("gpipe", 1, 1, fwd_s=1.0, bwd_s=0.0, topology=chain_topology(2, 1 * GB))
    plan = inp.plans[0][0]
    base = replace(inp, tensor_groups=(((0, 1),),), tensor_plans=(((plan, plan),),))
    hidden = replace(base, costs=(replace(inp.costs[0], tp_fwd_overlap=(op,)),))
    log = simulate(hidden)
    ev = {(e.device, e.name): (e.start_s, e.end_s) for e in log.events}
    assert ev[("gpu0", "0F0")] == pytest.approx((0.0, 1.3))
    assert ev[("gpu0", "tp all_gather 0F0 overlapped")] == pytest.approx((0.0, 0.5))
    exposed = replace(base, costs=(replace(inp.costs[0], tp_fwd=(("all_gather", 1 * GB, 1),)),))
    ev = {(e.device, e.name): (e.start_s, e.end_s) for e in simulate(exposed).events}
    assert ev[("gpu0", "tp all_gather 0F0")] == pytest.approx((1.0, 1.5))


def test_megatron_tp_comm_overlap_needs_sequence_parallelism():
    exp = {
        "name": "x",
        "hardware": "dgx-h100",
        "framework": "megatron-lm[tp_comm_overlap]",
        "models": [{"name": "g", "trace": "gpt-5b", "global_batch": 8}],
        "sweep": {"schedule": "1f1b", "stages": 1, "tensor_parallel": 2, "microbatch_size": 1},
    }
    prep = prepare(parse_experiment(exp), "<x>")
    point = expand(prep)[0][0]
    with pytest.raises(InputError) as err:
        resolve(prep.exp, point, prep.topology, prep.traces["g"])
    assert err.value.field == "framework" and "sequence_parallel" in str(err.value)


# -- CUDA graphs -----------------------------------------------------------------------------
def test_cuda_graphs_remove_the_captured_layers_host_work():
    assert captured_share("block", "local", ()) == 1.0
    assert captured_share("block", "transformer_engine", ("attn",)) == 0.5
    assert captured_share("moe_block", "transformer_engine", ("attn", "moe_router")) == 0.5
    assert captured_share("embedding", "local", ()) == 0.0
    # A host-bound stage: 1000 ops per forward at 10 ms each (10 s of host work) for 1 s of
    # device work. Eager: the forward ends when the host has issued its last op and the
    # device ran it, 10 + 1/1000 s (sim.hardware.host_ops: K = max(H + D/n, D + H/n));
    # under a full-iteration graph: 1 s.
    cost = StageCost(1.0, 0.0, 0.0, 0.0, fwd_ops=1000.0, fwd_layers=((1.0, 1000.0, 0.0, 0.0, 0.0),))
    graphed = captured(cost, ["block"], "full_iteration", ())
    assert graphed.fwd_ops == 0.0 and graphed.fwd_layers == ((1.0, 0.0, 0.0, 0.0, 0.0),)
    host = HostOverhead(op_s=1e-2)
    for c, span in ((cost, 10.0 + 1e-3), (graphed, 1.0)):
        inp = replace(uniform_input("gpipe", 1, 1, bwd_s=0.0), costs=(c,), host=host)
        assert simulate(inp).iteration_ends_s == [pytest.approx(span)]


def test_a_moe_router_graph_takes_the_router_region_off_the_eager_layer():
    # A MoE block: 200 / 150 forward / backward ops (40 / 30 of them its grouped experts'),
    # 700 module calls, 10 Function applies, 20 Python backward nodes. The router region
    # (pre-MLP norm, router, preprocess: 38 / 29.5 ops, 2 modules, 2 Functions, counted by
    # scripts/count_moe_router_region.py) is captured by moe_router (Megatron-LM@2edffadb
    # transformer_layer.py 1034-1069, 821-833), the rest of the layer stays eager:
    # 200 - 38 = 162, 150 - 29.5 = 120.5, 698, 8, 18. With attn too, the attention half of
    # the other ops goes: (200 - 40 - 38) / 2 + 40 = 101, (150 - 30 - 29.5) / 2 + 30 = 75.25,
    # (700 - 2) / 2 = 349. With moe the whole MoE half goes, region included: (200 - 40) / 2.
    cost = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((1.0, 200.0, 700.0, 10.0, 0.0),),
                     bwd_layers=((2.0, 150.0, 20.0),), grouped_ops=((40.0, 30.0),))  # fmt: skip
    r = captured(cost, ["moe_block"], "transformer_engine", ("moe_router", "moe_preprocess"))
    assert r.fwd_layers[0][1:4] == (162.0, 698.0, 8.0) and r.bwd_layers[0][1:] == (120.5, 18.0)
    a = captured(cost, ["moe_block"], "transformer_engine", ("attn", "moe_router"))
    assert (a.fwd_ops, a.bwd_ops, a.fwd_layers[0][2]) == (101.0, 75.25, 349.0)
    m = captured(cost, ["moe_block"], "local", ("moe_router", "moe"))
    assert (m.fwd_ops, m.bwd_ops) == (80.0, 60.0)
    dense = captured(cost, ["block"], "transformer_engine", ("moe_router",))
    assert (dense.fwd_ops, dense.bwd_ops) == (200.0, 150.0)  # no router in a dense block


# -- expert all-to-alls: combined 1F1B, delayed weight gradients, DeepEP ---------------------
def test_combined_1f1b_pairs_each_backward_with_the_next_forward():
    order = [Action.from_str(x) for x in ["0F0", "0F1", "0B0", "0F2", "0B1", "0B2", "0STEP0"]]
    assert [str(a) for a in combine_pairs([order])[0]] == [
        "0F0",
        "0F1",
        "(0F2;0B0)OVERLAP_F_B",
        "0B1",
        "0B2",
        "0STEP0",
    ]
    assert combine_reason("interleaved_1f1b", 4, 2) == ""
    assert "interleaved" in combine_reason("1f1b", 4, 1)
    # The paired interleaved program runs to the end (no pair waits on itself).
    sched = get_schedule("interleaved_1f1b")(2, 4, 2)
    inp = uniform_input("interleaved_1f1b", 2, 4, virtual_stages=2)
    log = simulate(replace(inp, program=combine_pairs(sched.program(1))))
    assert len(log.iteration_ends_s) == 1


class _Groups:
    """An exchange that takes ``op.nbytes`` seconds, alone."""

    def __init__(self, env):
        self.env = env

    def op_seconds(self, rep, op):
        return op.nbytes

    def join(self, rep, label, ops, tags):
        yield self.env.timeout(sum(op.nbytes for op in ops))


@pytest.mark.parametrize("delay, end", [(False, 5.0), (True, 4.0)])
def test_delayed_weight_gradient_runs_beside_the_backwards_exchange(delay, end):
    # A backward chain of 4 s (2 s of it weight gradient) around one 1 s exchange. Without
    # delay: [0, 2] compute, [2, 3] exchange, [3, 5] compute. With delay_wgrad_compute each
    # segment's 1 s of weight gradient leaves the chain: [0, 1], then the exchange [1, 2]
    # beside its weight gradient [1, 2], then [2, 3] and the last weight gradient [3, 4].
    env = simpy.Environment()
    ov = PairOverlap(env, ComputeStream(env, []), _Groups(env), 1.0, delay)
    rep = stage_replicas(uniform_input("gpipe", 1, 1))[0]
    op = GroupOp("ep", "alltoall", 1.0)
    env.process(ov.body(rep, Action(0, "B", 0), 4.0, (op,), {}, wgrad_s=2.0))
    env.run()
    assert env.now == end


def test_deepep_dispatch_at_its_measured_bandwidth():
    # DeepEP on Hopper over NVLink: (153 + 158) / 2 / 160 GB/s of the link rate. Eight GPUs
    # on one switch at 100e9 B/s per link, each sending 7e9 B to every other: 49e9 B per
    # GPU at 0.971875 x 100e9 B/s = 0.5042 s.
    eff = efficiency("deepep", "hopper", "nvl", 20)
    assert eff == pytest.approx((153 + 158) / 2 / 160)
    topo = chain_topology(8, bandwidth_Bps=100 * GB, shared=True)
    gpus = [f"gpu{i}" for i in range(8)]
    pairs = [[0.0 if i == j else 7 * GB for j in range(8)] for i in range(8)]
    assert dispatch_cost("deepep", 20)(topo, gpus, pairs) == pytest.approx(49 / (eff * 100))
    # Between the two measured SM counts, linear: B200 DeepEP at 24 SMs is midway 16 - 32.
    lo, hi = (
        efficiency("deepep", "blackwell", "nvl", 16),
        efficiency("deepep", "blackwell", "nvl", 32),
    )
    assert efficiency("deepep", "blackwell", "nvl", 24) == pytest.approx((lo + hi) / 2)


def test_param_gather_launched_as_the_update_ends():
    # overlap_param_gather_with_optimizer_step: one bucket of 4e9 B launched as the update of
    # iteration 0 ends (1 s all-gather at 2e9 B/s over 2 ranks: (1/2) 4e9 / 2e9), beside the
    # next forward's wait: with a 0 s step, the forward of iteration 1 waits for all of it.
    inp = _gather_input(4.0)
    inp = replace(
        inp,
        dp_bucket_bytes=float("inf"),
        runtime=PipelineRuntime(param_gather="optimizer", bucket_stages="none"),
    )
    log = simulate(inp)
    ag = [e for e in log.events if e.kind == "all_gather" and e.device == "gpu0"]
    steps = [e for e in log.events if e.kind == "optimizer" and e.device == "gpu0"]
    # one all-gather after each step (the last one's for an iteration not simulated)
    assert [(a.start_s - s.end_s, a.end_s - a.start_s) for a, s in zip(ag, steps, strict=True)] == [
        (0.0, 1.0),
        (0.0, 1.0),
    ]
    f1 = next(e for e in log.events if e.name == "0F1" and e.device == "gpu0")
    assert f1.start_s == pytest.approx(ag[0].end_s)

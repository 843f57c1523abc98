"""The host as a second queue (sim.hardware.host_ops, sim.engine.host): closed forms against an
op-by-op issue, and exact timelines of tiny pipelines worked out by hand.

Scenario numbers are dyadic (powers of two) so that every sum is exact in floating point.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.engine import simulate
from sim.engine.host import LayerPart, action_work, layered_work
from sim.engine.inputs import MicrobatchLoad
from sim.engine.pair_host import pair_parts, pair_work
from sim.engine.stage_cost import StageCost
from sim.hardware.host_ops import HostOverhead, HostWork, issue_exactly
from sim.memory.plan import StagePlan
from tests.helpers import chain_topology, uniform_input

times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@given(st.lists(st.tuples(times, times), min_size=1, max_size=30), times, times)
def test_max_plus_summary_is_the_op_by_op_issue(ops, host_free, device_free):
    # Each op alone is (h, d, K = h + d); folding `then` over them must give the same device
    # end and host end as issuing the ops one at a time.
    work = reduce(HostWork.then, [HostWork(h, d, h + d) for h, d in ops])
    exact = issue_exactly([h for h, _ in ops], [d for _, d in ops], host_free, device_free)
    assert work.finish(host_free, device_free) == pytest.approx(exact, rel=1e-9, abs=1e-9)


@given(st.integers(1, 200), times, times, times, times)
def test_alike_ops_closed_form(n, host_s, device_s, host_free, device_free):
    # K = max(H + D/n, D + H/n) for n ops of H/n host and D/n device seconds each.
    work = HostWork.of_ops(n, host_s, device_s)
    exact = issue_exactly([host_s / n] * n, [device_s / n] * n, host_free, device_free)
    assert work.finish(host_free, device_free) == pytest.approx(exact, rel=1e-9, abs=1e-9)


def _spans(log, kinds=("compute", "host_wait", "optimizer")):
    return sorted(
        (e.kind, e.device, e.name, e.start_s, e.end_s) for e in log.events if e.kind in kinds
    )


def _one_stage(host: HostOverhead, **kw):
    # p = 1, m = 2, GPipe: F0 F1 B0 B1 STEP; t_F = 1, t_B = 2; 8 ops forward and backward.
    inp = uniform_input("gpipe", 1, 2, **kw)
    cost = replace(inp.costs[0], fwd_ops=8.0, bwd_ops=8.0)
    return replace(inp, costs=(cost,), host=host)


def test_host_bound_then_device_bound_and_run_ahead():
    # Forward: 8 ops x 0.25 s host (H = 2), 1 s device: K = max(2 + 1/8, 1 + 2/8) = 2.125.
    # F0: device end max(0 + 1, 0 + 2.125) = 2.125, host 2: the GPU idles 1.125 s (host_wait).
    # F1: max(2.125 + 1, 2 + 2.125) = 4.125, host 4: host-bound again.
    # Backward: 8 ops x 0.0625 s (H = 0.5), 2 s device: K = max(0.5 + 0.25, 2 + 0.0625).
    # B0: max(4.125 + 2, 4 + 2.0625) = 6.125 (device-bound), host 4.5.
    # B1: the host is 1.625 s ahead: max(6.125 + 2, 4.5 + 2.0625) = 8.125, host 5.
    log = simulate(_one_stage(HostOverhead(op_s=0.25, backward_op_s=0.0625)))
    assert _spans(log) == sorted(
        [
            ("host_wait", "gpu0", "host 0F0", 0.0, 1.125),
            ("compute", "gpu0", "0F0", 1.125, 2.125),
            ("host_wait", "gpu0", "host 0F1", 2.125, 3.125),
            ("compute", "gpu0", "0F1", 3.125, 4.125),
            ("compute", "gpu0", "0B0", 4.125, 6.125),
            ("compute", "gpu0", "0B1", 6.125, 8.125),
            ("optimizer", "gpu0", "0STEP0", 8.125, 8.125),
        ]
    )
    assert log.iteration_ends_s == [8.125]


def test_cuda_graphs_remove_the_floor():
    # Under CUDA graphs the ops cost the host nothing: 1 + 1 + 2 + 2 = 6 s of device time.
    host = HostOverhead(op_s=0.25, backward_op_s=0.0625).under("cuda_graphs")
    log = simulate(_one_stage(host))
    assert log.iteration_ends_s == [6.0]
    assert not [e for e in log.events if e.kind == "host_wait"]


def _two_stages(syncs: frozenset[str]):
    # p = 2, m = 1, GPipe; 8 ops per F and B at 0.0625 s: H = 0.5 each.
    inp = uniform_input("gpipe", 2, 1)
    costs = tuple(replace(c, fwd_ops=8.0, bwd_ops=8.0) for c in inp.costs)
    host = HostOverhead(op_s=0.0625, backward_op_s=0.0625)
    return replace(inp, costs=costs, host=host, host_syncs=syncs)


def test_recv_sync_point_blocks_the_host_until_the_input_is_there():
    # F: K = max(0.5 + 0.125, 1 + 0.0625) = 1.0625; B: K = max(0.5 + 0.25, 2 + 0.0625) = 2.0625.
    # gpu0 F0: max(1, 1.0625) = 1.0625 (host_wait 0.0625), host 0.5; the activation is there.
    # No sync: gpu1's host issued F0 at once (host 0 -> 0.5), so F0 ends at
    #   max(1.0625 + 1, 0 + 1.0625) = 2.0625; B0 max(2.0625 + 2, 0.5 + 2.0625) = 4.0625;
    #   gpu0's B0: max(4.0625 + 2, 0.5 + 2.0625) = 6.0625.
    # "recv": gpu1's host waits for the activation (1.0625): F0 max(2.0625, 1.0625 + 1.0625) =
    #   2.125, host 1.5625; B0 max(4.125, 1.5625 + 2.0625) = 4.125; gpu0's host waits for the
    #   gradient (4.125): B0 max(6.125, 4.125 + 2.0625) = 6.1875.
    free = simulate(_two_stages(frozenset()))
    synced = simulate(_two_stages(frozenset({"recv"})))
    assert free.iteration_ends_s == [6.0625]
    assert synced.iteration_ends_s == [6.1875]
    assert ("host_wait", "gpu1", "host 1F0", 1.0625, 1.125) in _spans(synced)
    assert ("host_wait", "gpu0", "host 0B0", 4.125, 4.1875) in _spans(synced)


def test_step_sync_keeps_the_host_within_an_iteration():
    # Two iterations of the one-stage case with a device-bound forward (host 8 x 0.0625 =
    # 0.5 s, K = max(0.5 + 0.125, 1 + 0.0625) = 1.0625) and a free backward:
    # it 0: F0 [0.0625, 1.0625] (host_wait 0.0625), F1 max(2.0625, 1 + ...) = 2.0625, B0, B1 ->
    #   6.0625; the step syncs the host to 6.0625.
    # it 1: F2 max(6.0625 + 1, 6.0625 + 1.0625) = 7.125 (the first op waits for the host
    #   again); without the sync the host (at 1.0) would be far ahead: F2 ends at 7.0625.
    host = HostOverhead(op_s=0.0625, backward_op_s=0.0)
    inp = uniform_input("gpipe", 1, 2, iterations=2)
    base = replace(inp, costs=(replace(inp.costs[0], fwd_ops=8.0, bwd_ops=8.0),), host=host)
    synced = simulate(base)
    free = simulate(replace(base, host_syncs=frozenset()))
    assert synced.iteration_ends_s == [6.0625, 12.125]
    assert free.iteration_ends_s == [6.0625, 12.0625]


def test_serial_overflow_check_blocks_the_host_tensor_after_tensor():
    # DeepSpeed's FP16_Optimizer.step: float(g.float().sum()) per gradient, one by one.
    # The one-stage case above ends its backward at 8.125 (host at 5); the step's optimizer
    # kernel takes 0.5 s. Two ops per tensor, h = 0.125 s without autograd, read 0.0625 s:
    # a vector costs (2 + 1) x 0.125 + 0.0625 = 0.4375, a matrix (its device time hides the
    # issue of the second op) 0.125 + 0.0625 = 0.1875. Two vectors and one matrix: 1.0625 s
    # after the host has waited for the backward: [8.125, 9.1875], then the kernel to 9.6875.
    host = HostOverhead(op_s=0.25, backward_op_s=0.0625, nograd_op_s=0.125, read_s=0.0625)
    inp = _one_stage(host, optimizer_s=0.5)
    inp = replace(
        inp,
        costs=(replace(inp.costs[0], param_tensors=(2, 1)),),
        runtime=replace(inp.runtime, overflow_check_ops=2),
    )
    log = simulate(inp)
    assert ("host_wait", "gpu0", "host overflow check 0STEP0", 8.125, 9.1875) in _spans(log)
    assert ("optimizer", "gpu0", "0STEP0", 9.1875, 9.6875) in _spans(log)
    assert log.iteration_ends_s == [9.6875]
    assert simulate(replace(inp, runtime=replace(inp.runtime, overflow_check_ops=0))) \
        .iteration_ends_s == [8.625]  # fmt: skip


def test_microbatch_load_blocks_the_host_before_each_forward_of_a_loading_stage():
    # Megatron-DeepSpeed's LoadMicroBatch (get_batch_pipe): before each forward on the first
    # and the last stage the host waits for the device, then issues ops without autograd and
    # blocking copies while the device idles. p = 1 (first and last: loads once): 2 + 1 + 1
    # ops x 0.125 s and 1 copy x 0.0625 s = 0.5625 s. Forward: 8 ops x 0.0625 s (H = 0.5),
    # 1 s device: K = max(0.5 + 0.125, 1 + 0.0625) = 1.0625; backward free on the host.
    # F0: host 0.5625 after the load; ends max(0 + 1, 0.5625 + 1.0625) = 1.625, host 1.0625.
    # F1: the load waits for the device (1.625) -> host 2.1875; ends max(2.625, 3.25) = 3.25.
    # B0 [3.25, 5.25], B1 [5.25, 7.25]. Without the load: F0 1.0625, F1 2.0625, end 6.0625.
    host = HostOverhead(op_s=0.0625, backward_op_s=0.0, nograd_op_s=0.125, read_s=0.0625)
    inp = _one_stage(host)
    load = MicrobatchLoad(ops=2, first_ops=1, last_ops=1, copies=1)
    log = simulate(replace(inp, runtime=replace(inp.runtime, microbatch_load=load)))
    assert ("host_wait", "gpu0", "host 0F0", 0.0, 0.625) in _spans(log)
    assert ("host_wait", "gpu0", "host 0F1", 1.625, 2.25) in _spans(log)
    assert ("compute", "gpu0", "0F1", 2.25, 3.25) in _spans(log)
    assert log.iteration_ends_s == [7.25]
    assert simulate(inp).iteration_ends_s == [6.0625]
    # a middle stage loads nothing; the first and the last their own part
    assert (load.ops_on(False, False), load.ops_on(True, False), load.ops_on(False, True)) == (
        0,
        3,
        3,
    )


def test_unknown_sync_point_is_refused():
    with pytest.raises(ValueError, match="host sync points"):
        replace(uniform_input("gpipe", 1, 1), host_syncs=frozenset({"never"}))


def test_split_backward_ops_follow_the_seconds():
    cost = StageCost(1.0, 4.0, 0.0, 0.0, bwd_input_s=3.0, bwd_weight_s=1.0, bwd_ops=40.0)
    assert (cost.backward_ops("B"), cost.backward_ops("I"), cost.backward_ops("W")) == (
        40.0,
        30.0,
        10.0,
    )


def test_host_overhead_in_a_hardware_description():
    from sim.errors import InputError
    from sim.hardware.describe import topology_to_dict
    from sim.hardware.loader import load_hardware

    # a preset's host_overhead merges key by key with an override; units parse
    topo = load_hardware(
        {"base": "dgx-a100-40gb", "host_overhead": {"op": "20 us", "mode": "cuda_graphs"}}
    )
    over = topo.hosts[0].overhead
    assert (over.op_s, over.backward_op_s, over.checkpoint_s) == pytest.approx(
        (20e-6, 13.9e-6, 100e-6)
    )
    assert over.mode == "cuda_graphs" and all(h.overhead == over for h in topo.hosts)
    assert load_hardware(topology_to_dict(topo)) == topo
    with pytest.raises(InputError) as err:
        load_hardware({"base": "dgx-a100-40gb", "host_overhead": {"op": "-1 us"}})
    assert err.value.field == "hardware.host_overhead.op"


def _ev(name, cat, ts, dur, **args):
    """One complete Chrome-trace event on thread 1 (times in microseconds)."""
    return dict(ph="X", cat=cat, name=name, pid=1, tid=1, ts=ts, dur=dur, args=args)


def _kineto_layer(tmp_path, events):
    """The first layer :func:`sim.trace.kineto.read_kineto` reads from ``events``."""
    import json

    from sim.trace.kineto import read_kineto

    path = tmp_path / "k.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return read_kineto(path, microbatch_size=1).layers[0]


def test_kineto_import_counts_leaf_ops_per_layer(tmp_path):
    # Forward span "a": aten::linear (composite) holding aten::t and aten::addmm, then
    # aten::relu: 3 leaf ops. Its backward: AddmmBackward0's node holding aten::mm twice and
    # aten::sum (3 leaves), ReluBackward0's holding aten::threshold_backward (1): 4.
    node = "autograd::engine::evaluate_function: "
    events = [
        _ev("a", "user_annotation", 0, 100),
        _ev("aten::linear", "cpu_op", 5, 40, **{"Sequence number": 1}),
        _ev("aten::t", "cpu_op", 6, 5),
        _ev("aten::addmm", "cpu_op", 12, 30),
        _ev("aten::relu", "cpu_op", 50, 10, **{"Sequence number": 2}),
        _ev(node + "ReluBackward0", "cpu_op", 200, 20, **{"Sequence number": 2}),
        _ev("aten::threshold_backward", "cpu_op", 205, 10),
        _ev(node + "AddmmBackward0", "cpu_op", 230, 60, **{"Sequence number": 1}),
        _ev("AddmmBackward0", "cpu_op", 232, 55),
        _ev("aten::mm", "cpu_op", 235, 15),
        _ev("aten::mm", "cpu_op", 252, 15),
        _ev("aten::sum", "cpu_op", 270, 10),
    ]
    layer = _kineto_layer(tmp_path, events)
    assert (layer.fwd_ops, layer.bwd_ops) == (3.0, 4.0)
    # no python_function events: the Python calls stay unknown (not zero)
    assert layer.fwd_modules is None and layer.fwd_functions is None


def test_kineto_import_counts_module_calls_and_function_applies(tmp_path):
    # with_stack=True adds python_function events: in span "a" (0..100) the block's own call,
    # two child modules and one custom Function's apply; a module call at 150 lies outside
    # it, and the file/line frames are not calls: (3 modules, 1 Function).
    apply = "<built-in method apply of FunctionMeta object at 0x55aa>"
    events = [
        _ev("a", "user_annotation", 0, 100),
        _ev("aten::relu", "cpu_op", 50, 10, **{"Sequence number": 2}),
        _ev(
            "autograd::engine::evaluate_function: ReluBackward0",
            "cpu_op",
            200,
            20,
            **{"Sequence number": 2},
        ),
        _ev("aten::threshold_backward", "cpu_op", 205, 10),
        _ev("nn.Module: Block_0", "python_function", 1, 90),
        _ev("torch/nn/modules/module.py(1782): _call_impl", "python_function", 2, 80),
        _ev("nn.Module: Linear_0", "python_function", 10, 20),
        _ev("nn.Module: LayerNorm_0", "python_function", 35, 10),
        _ev(apply, "python_function", 48, 20),
        _ev("nn.Module: Linear_1", "python_function", 150, 20),
    ]
    layer = _kineto_layer(tmp_path, events)
    assert (layer.fwd_modules, layer.fwd_functions) == (3.0, 1.0)


def test_an_action_is_issued_layer_by_layer():
    # Layer A: 4 ops of 0.25 s host, 0.0625 s device each (host-bound); layer B: 1 op of
    # 0.25 s host, 1 s device (device-bound). One by one: A's ops are issued at 0.25 ... 1.0
    # and end at 1.0625; B is issued at 1.25 and ends at 2.25. Summarised as one action of 5
    # alike ops the device would end at 1.5 (B's device time hidden in A's host slack).
    host = HostOverhead(op_s=0.25)
    parts = (LayerPart(0.25, 4.0, 0.0, 0.0, 0.0, 0.0), LayerPart(1.0, 1.0, 0.0, 0.0, 0.0, 0.0))
    exact = issue_exactly([0.25] * 5, [0.0625] * 4 + [1.0], 0.0, 0.0)
    assert layered_work(host, "F", parts).finish(0.0, 0.0) == pytest.approx(exact)
    assert exact == pytest.approx((2.25, 1.25))
    assert action_work(host, "F", 1.25, 5.0).finish(0.0, 0.0)[0] == pytest.approx(1.5)
    # each recomputed layer is one checkpointed region: its wrapper cost comes with it
    wrapped = HostOverhead(op_s=0.25, checkpoint_s=0.5)
    assert layered_work(wrapped, "R", parts).host_s == pytest.approx(1.25 + 2 * 0.5)


def test_python_module_and_function_calls_cost_the_host_per_layer():
    # One layer of 8 ops, 2 nn.Module calls and 1 autograd.Function (and so 1 Python backward
    # node), issued layer by layer; p = 1, m = 2, GPipe, t_F = 1, t_B = 2.
    # Forward host: 8 x 0.0625 + 2 x 0.25 + 1 x 0.5 = 1.5 s: K = max(1.5 + 1/8, 1 + 1.5/8) =
    # 1.625. F0 ends 1.625 (host 1.5); F1 max(1.625 + 1, 1.5 + 1.625) = 3.125 (host 3).
    # Backward host: 8 x 0.0625 + 1 x 1.0 = 1.5 s: K = max(1.5 + 2/8, 2 + 1.5/8) = 2.1875.
    # B0 max(3.125 + 2, 3 + 2.1875) = 5.1875 (host 4.5); B1 max(7.1875, 6.6875) = 7.1875.
    host = HostOverhead(
        op_s=0.0625, backward_op_s=0.0625, module_s=0.25, function_s=0.5, function_backward_s=1.0
    )
    inp = _one_stage(host)
    cost = replace(
        inp.costs[0], fwd_layers=((1.0, 8.0, 2.0, 1.0, 0.0),), bwd_layers=((2.0, 8.0, 1.0),)
    )
    log = simulate(replace(inp, costs=(cost,)))
    assert _spans(log) == sorted(
        [
            ("host_wait", "gpu0", "host 0F0", 0.0, 0.625),
            ("compute", "gpu0", "0F0", 0.625, 1.625),
            ("host_wait", "gpu0", "host 0F1", 1.625, 2.125),
            ("compute", "gpu0", "0F1", 2.125, 3.125),
            ("host_wait", "gpu0", "host 0B0", 3.125, 3.1875),
            ("compute", "gpu0", "0B0", 3.1875, 5.1875),
            ("compute", "gpu0", "0B1", 5.1875, 7.1875),
            ("optimizer", "gpu0", "0STEP0", 7.1875, 7.1875),
        ]
    )
    # without the Python calls (a trace that lacks them) the same layer ends at 6.0625
    bare = replace(cost, fwd_layers=((1.0, 8.0, 0.0, 0.0, 0.0),), bwd_layers=((2.0, 8.0, 0.0),))
    assert simulate(replace(inp, costs=(bare,))).iteration_ends_s == [6.0625]
    # a recomputed layer re-runs its calls with its ops, besides the checkpoint wrapper
    parts = (LayerPart(1.0, 8.0, 0.0, 2.0, 1.0, 0.0),)
    wrapped = replace(host, checkpoint_s=0.125)
    assert layered_work(wrapped, "R", parts).host_s == pytest.approx(1.5 + 0.125)
    assert layered_work(host.under("cuda_graphs"), "F", parts).host_s == 0.0


def test_pair_work_host_issues_both_actions_and_waits_at_forward_sync():
    """Megatron's combined 1F1B (sim.engine.pair_host): one host thread issues the forward's
    100 ops (a token-count sync half-way) and then the backward's 100 ops at 10 us each; the
    pair's 2 ms of device time overlapped into 1.6 ms (0.4 + 0.4 ms forward, 0.8 ms backward).
    By hand: the forward's first half ends on the device at 0.5 + 0.4/50 = 0.508 ms, where the
    host waits; its second half is issued by 1.008 ms and ends at 1.016 ms; the backward is
    issued by 2.008 ms and ends at 1.008 + 1.0 + 0.8/100 = 2.016 ms."""
    h = HostOverhead(op_s=10e-6, backward_op_s=10e-6)
    fwd = LayerPart(1e-3, 100.0, 0.0, 0.0, 0.0, 0.0, (0.5,))
    bwd = LayerPart(1e-3, 100.0, 0.0, 0.0, 0.0, 0.0)
    work = pair_work(lambda op, p: layered_work(h, op, p), [fwd], [bwd], 1.6e-3)
    device_end, host_end = work.finish(0.0, 0.0)
    assert device_end == pytest.approx(2.016e-3)
    assert host_end == pytest.approx(2.008e-3)
    assert work.host_s == pytest.approx(2e-3)


def _drained_stage(drains: tuple[int, ...]):
    """One stage over 2 tensor ranks (1 GB/s links), one micro-batch: a layer of 2 forward
    ops (1 s of host each) and 0.5 s of device, a host sync half-way, two all-reduces of
    0.5 GB (0.5 s each: ring, 2 (t - 1)/t x bytes / bandwidth), the first issued before the
    sync (``drains``); a backward of 1 op (1 s of host) and 0.5 s of device."""
    inp = uniform_input("1f1b", 1, 1, topology=chain_topology(2, bandwidth_Bps=1e9))
    ar = ("allreduce", 0.5e9)
    cost = StageCost(
        0.5, 0.5, 0.0, 0.0, tp_fwd=(("allreduce", 0.5e9, 2),), fwd_ops=2.0, bwd_ops=1.0,
        fwd_layers=((0.5, 2.0, 0.0, 0.0, 0.0),), bwd_layers=((0.5, 1.0, 0.0),),
        fwd_syncs=((0.5,),), tp_fwd_layers=((ar, ar),), fwd_sync_drains=drains,
    )  # fmt: skip
    plan = inp.plans[0][0]
    return replace(
        inp, costs=(cost,), tensor_groups=(((0, 1),),), tensor_plans=(((plan, plan),),),
        host=HostOverhead(op_s=1.0, backward_op_s=1.0),
    )  # fmt: skip


def test_a_host_sync_after_a_collective_waits_for_it():
    # First op: host 0-1, device 1-1.25 (K = max(1 + 0.25, 0.25 + 1) = 1.25).
    # Without the drain (the all-reduces after the action's kernels): the sync finds the
    #   device done at 1.25; host 1.25-2.25, device 2.25-2.5; both all-reduces 2.5-3.5. The
    #   backward's op, issued 2.25-3.25, runs 3.5-4.0.
    # With it (Megatron-DeepSpeed's scalars' copy after the attention's all-reduce): the
    #   device runs the first all-reduce 1.25-1.75 and the sync waits for it; host 1.75-2.75,
    #   device 2.75-3.0; the second all-reduce 3.0-3.5. The backward's op, issued 2.75-3.75,
    #   runs 3.75-4.25: the host's lead lost to the drained all-reduce.
    before, after = simulate(_drained_stage(())), simulate(_drained_stage((1,)))
    assert before.iteration_ends_s == [4.0]
    assert after.iteration_ends_s == [4.25]
    tp = {(e.start_s, e.end_s, e.nbytes) for e in after.events if e.name == "tp allreduce 0F0"}
    assert tp == {(3.0, 3.5, 0.5e9)}  # the drained one is device time before the sync


def test_a_drained_all_reduce_is_logged_on_the_tensor_stream_not_as_compute():
    # The drained stage above, by hand on gpu0: the host issues the first op 0-1 (the device
    # idles), the device runs it 1-1.25, the drained all-reduce (0.5 s on the ring) 1.25-1.75
    # on the group's stream, idles while the host issues the second op 1.75-2.75, runs it
    # 2.75-3.0; the other all-reduce after the kernels 3.0-3.5. The forward's compute is its
    # 0.5 s of device work, not 1.0 s with the all-reduce in it.
    log = simulate(_drained_stage((1,)))
    spans = [
        (e.kind, e.stream, e.start_s, e.end_s)
        for e in log.events
        if e.device == "gpu0" and e.stage == 0 and e.name in ("0F0", "host 0F0", "tp allreduce 0F0 drained")
    ]  # fmt: skip
    assert sorted(spans, key=lambda x: x[2]) == [
        ("host_wait", "compute", 0.0, 1.0),
        ("compute", "compute", 1.0, 1.25),
        ("allreduce", "tp", 1.25, 1.75),
        ("host_wait", "compute", 1.75, 2.75),
        ("compute", "compute", 2.75, 3.0),
    ]
    drained = [e for e in log.events if e.name == "tp allreduce 0F0 drained"]
    assert [(e.device, e.nbytes) for e in drained] == [("gpu0", 0.5e9), ("gpu1", 0.5e9)]


def test_pair_forward_without_layer_costs_issues_its_recompute_ops_without_autograd():
    """An overlapped F/B pair on a stage without per-layer costs, recompute on: the pair's
    forward is one part whose 40 recomputed ops of 100 are issued without autograd recording,
    as the engine's forward alone issues them (``nograd_ops = plan.recompute_ops``). By hand,
    at 10 us per op, 6 us per op without autograd and 10 us per backward op: the forward's
    host 60 x 10 + 40 x 6 = 840 us, the backward's 100 x 10 = 1000 us, 1.84 ms for the pair
    (2 ms if the 40 ops were charged as recorded ones)."""
    h = HostOverhead(op_s=10e-6, backward_op_s=10e-6, nograd_op_s=6e-6)
    cost = StageCost(1e-3, 1e-3, 0.0, 0.0, fwd_ops=100.0, bwd_ops=100.0)
    plan = StagePlan(0.0, 0.0, recompute_s=0.5e-3, recompute_ops=40.0, recompute_regions=1)
    fwd, bwd = pair_parts(cost, plan, "F"), pair_parts(cost, plan, "B")
    work = pair_work(lambda op, p: layered_work(h, op, p), fwd, bwd, 1.6e-3)
    assert work.host_s == pytest.approx(1.84e-3)
    alone = action_work(h, "F", 1e-3, 100.0, nograd_ops=plan.recompute_ops)
    assert layered_work(h, "F", fwd).host_s == pytest.approx(alone.host_s)

"""The host as a second queue (sim.compute.host, sim.engine.host): closed forms against an
op-by-op issue, and exact timelines of tiny pipelines worked out by hand.

Scenario numbers are dyadic (powers of two) so that every sum is exact in floating point.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.compute.host import HostOverhead, HostWork, issue_exactly
from sim.engine import StageCost, simulate
from tests.helpers import uniform_input

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


def _spans(log, kinds=("compute", "stall", "optimizer")):
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
    # F0: device end max(0 + 1, 0 + 2.125) = 2.125, host 2: the GPU idles 1.125 s (stall).
    # F1: max(2.125 + 1, 2 + 2.125) = 4.125, host 4: host-bound again.
    # Backward: 8 ops x 0.0625 s (H = 0.5), 2 s device: K = max(0.5 + 0.25, 2 + 0.0625).
    # B0: max(4.125 + 2, 4 + 2.0625) = 6.125 (device-bound), host 4.5.
    # B1: the host is 1.625 s ahead: max(6.125 + 2, 4.5 + 2.0625) = 8.125, host 5.
    log = simulate(_one_stage(HostOverhead(op_s=0.25, backward_op_s=0.0625)))
    assert _spans(log) == sorted(
        [
            ("stall", "gpu0", "host 0F0", 0.0, 1.125),
            ("compute", "gpu0", "0F0", 1.125, 2.125),
            ("stall", "gpu0", "host 0F1", 2.125, 3.125),
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
    assert not [e for e in log.events if e.kind == "stall"]


def _two_stages(syncs: frozenset[str]):
    # p = 2, m = 1, GPipe; 8 ops per F and B at 0.0625 s: H = 0.5 each.
    inp = uniform_input("gpipe", 2, 1)
    costs = tuple(replace(c, fwd_ops=8.0, bwd_ops=8.0) for c in inp.costs)
    host = HostOverhead(op_s=0.0625, backward_op_s=0.0625)
    return replace(inp, costs=costs, host=host, host_syncs=syncs)


def test_recv_sync_point_blocks_the_host_until_the_input_is_there():
    # F: K = max(0.5 + 0.125, 1 + 0.0625) = 1.0625; B: K = max(0.5 + 0.25, 2 + 0.0625) = 2.0625.
    # gpu0 F0: max(1, 1.0625) = 1.0625 (stall 0.0625), host 0.5; the activation is there.
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
    assert ("stall", "gpu1", "host 1F0", 1.0625, 1.125) in _spans(synced)
    assert ("stall", "gpu0", "host 0B0", 4.125, 4.1875) in _spans(synced)


def test_step_sync_keeps_the_host_within_an_iteration():
    # Two iterations of the one-stage case with a device-bound forward (host 8 x 0.0625 =
    # 0.5 s, K = max(0.5 + 0.125, 1 + 0.0625) = 1.0625) and a free backward:
    # it 0: F0 [0.0625, 1.0625] (stall 0.0625), F1 max(2.0625, 1 + ...) = 2.0625, B0, B1 ->
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

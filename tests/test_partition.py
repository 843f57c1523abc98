"""Tests of :mod:`sim.parallel.partition`: DP optimality against brute force, hand cases, errors."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from sim.errors import InputError
from sim.parallel.partition import (
    Partition,
    default_stage_memory,
    evaluate,
    partition,
    partition_json,
    partition_table,
    uniform_partition,
)
from sim.trace.schema import LayerProfile, Trace


def L(name: str, fwd: float, bwd: float, params=0, act=0, out=0) -> LayerProfile:
    return LayerProfile(name, fwd, bwd, params, act, out)


def fp16_adam_1f1b(stages):
    """The documented default memory model, written out here (not imported): 16 B/param = 8x
    the fp16 parameter bytes, plus ``stages - j`` micro-batches of activations in flight."""
    return lambda j, param_bytes, act_bytes: 8 * param_bytes + (stages - j) * act_bytes


def hand_cost(layers, boundaries, bw, cap, mem_fn):
    """Cost a split straight from the problem statement (module docstring of sim.parallel.partition).

    Returns (stage times, comm per stage, param bytes, act bytes, memory, fits) as lists.
    """
    stages = len(boundaries)
    ends = (*boundaries[1:], len(layers))
    out = {k: [] for k in ("time", "comm", "params", "act", "mem", "fits")}
    for j, (a, e) in enumerate(zip(boundaries, ends, strict=True)):
        seg = layers[a:e]
        bw_j = bw[j] if isinstance(bw, list) and j < stages - 1 else bw
        comm = 0.0 if j == stages - 1 or bw is None else 2 * seg[-1].out_bytes / bw_j
        params, act = sum(x.param_bytes for x in seg), sum(x.act_bytes for x in seg)
        used = mem_fn(j, params, act)
        out["time"].append(sum(x.fwd_s + x.bwd_s for x in seg) + comm)
        out["comm"].append(comm)
        out["params"].append(params)
        out["act"].append(act)
        out["mem"].append(used)
        out["fits"].append(cap is None or used <= (cap[j] if isinstance(cap, list) else cap))
    return out


def brute_force(layers, stages, bw, cap, mem_fn):
    """Every C(n-1, P-1) split, costed directly from the problem statement.

    Returns (best bottleneck over feasible splits or None, best bottleneck ignoring memory).
    """
    n = len(layers)
    best_fit, best_any = math.inf, math.inf
    for cuts in itertools.combinations(range(1, n), stages - 1):
        cost = hand_cost(layers, (0, *cuts), bw, cap, mem_fn)
        best_any = min(best_any, max(cost["time"]))
        if all(cost["fits"]):
            best_fit = min(best_fit, max(cost["time"]))
    return (None if best_fit == math.inf else best_fit), best_any


def assert_costed_as_by_hand(part, layers, bw, cap, mem_fn):
    """Every per-stage figure of ``part`` equals the hand costing of its boundaries."""
    cost = hand_cost(layers, part.boundaries, bw, cap, mem_fn)
    close = lambda xs: [pytest.approx(x, rel=1e-9, abs=1e-12) for x in xs]  # noqa: E731
    assert list(part.stage_time_s) == close(cost["time"])
    assert list(part.stage_comm_s) == close(cost["comm"])
    assert list(part.stage_param_bytes) == cost["params"]
    assert list(part.stage_act_bytes) == cost["act"]
    assert list(part.stage_memory_bytes) == close(cost["mem"])
    assert list(part.fits) == cost["fits"]


layer_st = st.builds(
    L,
    name=st.just("l"),
    fwd=st.floats(0, 10, allow_nan=False),
    bwd=st.floats(0, 10, allow_nan=False),
    params=st.integers(0, 100),
    act=st.integers(0, 100),
    out=st.integers(0, 100),
)


@st.composite
def problems(draw):
    layers = draw(st.lists(layer_st, min_size=1, max_size=9))
    stages = draw(st.integers(1, len(layers)))
    bw_st = st.floats(1.0, 1000.0)
    bw = draw(st.none() | bw_st | st.lists(bw_st, min_size=stages - 1, max_size=stages - 1))
    cap_st = st.integers(0, 3000)
    cap = draw(st.none() | cap_st | st.lists(cap_st, min_size=stages, max_size=stages))
    mem = draw(st.sampled_from([None, weird_memory]))
    return layers, stages, bw, cap, mem


def weird_memory(j: int, param_bytes: float, act_bytes: float) -> float:
    """Not monotone in the stage's size: the DP must not assume it is."""
    return abs(param_bytes - 2 * act_bytes) + 50 * j


@settings(max_examples=400, deadline=None)
@given(problems())
def test_dp_matches_brute_force(problem):
    layers, stages, bw, cap, mem = problem
    kw = {"bandwidth_Bps": bw, "memory_capacity_bytes": cap, "stage_memory_bytes": mem}
    part = partition(layers, stages, **kw)
    mem_fn = mem or fp16_adam_1f1b(stages)
    best_fit, best_any = brute_force(layers, stages, bw, cap, mem_fn)
    assert part.stages == stages and part.n_layers == len(layers)
    assert part.feasible == (best_fit is not None)
    expected = best_fit if best_fit is not None else best_any
    assert math.isclose(part.bottleneck_s, expected, rel_tol=1e-9, abs_tol=1e-12)
    # The reported costs agree with a hand costing of the same boundaries (not the module's).
    assert_costed_as_by_hand(part, layers, bw, cap, mem_fn)


@settings(max_examples=200, deadline=None)
@given(problems(), st.data())
def test_evaluate_costs_any_split_as_by_hand(problem, data):
    layers, stages, bw, cap, mem = problem
    cuts = data.draw(
        st.lists(
            st.integers(1, len(layers) - 1), min_size=stages - 1, max_size=stages - 1, unique=True
        )
        if stages > 1
        else st.just([])
    )
    boundaries = (0, *sorted(cuts))
    kw = {"bandwidth_Bps": bw, "memory_capacity_bytes": cap, "stage_memory_bytes": mem}
    part = evaluate(layers, boundaries, **kw)
    assert part.boundaries == boundaries
    assert_costed_as_by_hand(part, layers, bw, cap, mem or fp16_adam_1f1b(stages))


def test_hand_case_exact():
    # times 1, 2, 3, 4 (fwd + bwd); out_bytes 10 each; bandwidth 10 B/s -> comm 2 s per cut.
    layers = [L(f"l{i}", t / 2, t / 2, out=10) for i, t in enumerate([1, 2, 3, 4])]
    free = partition(layers, 2)
    assert free.boundaries == (0, 3)  # [1,2,3] | [4] -> 6 vs 4
    assert free.bottleneck_s == 6.0
    paid = partition(layers, 2, bandwidth_Bps=10.0)
    # [1,2,3]+2 = 8 | [4] = 4  vs  [1,2]+2 = 5 | [3,4] = 7  -> (0, 2) with bottleneck 7.
    assert paid.boundaries == (0, 2)
    assert paid.stage_time_s == (5.0, 7.0)
    assert paid.stage_comm_s == (2.0, 0.0)
    three = partition(layers, 3, bandwidth_Bps=[10.0, 1e9])
    assert three.boundaries == (0, 2, 3)  # [1,2]+2=5 | [3]+~0 | [4] -> 5
    assert three.bottleneck_s == 5.0


def test_memory_cap_forces_unbalanced_split():
    # Four equal-time layers; layer 0 is heavy in parameters. Balanced split is (0, 2).
    layers = [L("emb", 1, 1, params=100), L("a", 1, 1), L("b", 1, 1), L("c", 1, 1)]
    assert partition(layers, 2).boundaries == (0, 2)
    mem = lambda j, p, a: p + 10 * a  # noqa: E731
    layers = [L("emb", 1, 1, params=100), *(L(x, 1, 1, act=20) for x in "abc")]
    part = partition(layers, 2, memory_capacity_bytes=[150, 1000], stage_memory_bytes=mem)
    # Stage 0 may hold only the embedding (100 <= 150; with one more layer 300 > 150).
    assert part.boundaries == (0, 1)
    assert part.stage_time_s == (2.0, 6.0)
    assert part.stage_memory_bytes == (100.0, 600.0)
    assert part.feasible


def test_infeasible_returns_unconstrained_optimum_with_fits():
    layers = [L(f"l{i}", 1, 1, params=10) for i in range(4)]
    part = partition(layers, 2, memory_capacity_bytes=[1000, 50])  # default: 8 * params
    assert part.boundaries == (0, 2)
    assert part.stage_memory_bytes == (160.0, 160.0)  # one layer alone (80) > 50 too
    assert part.fits == (True, False)
    assert not part.feasible


def test_default_stage_memory_is_1f1b_fp16_adam():
    mem = default_stage_memory(4)
    assert mem(0, 2.0, 3.0) == 2 * 8 + 3 * 4
    assert mem(3, 2.0, 3.0) == 2 * 8 + 3 * 1
    reference = fp16_adam_1f1b(4)
    assert all(mem(j, 5.0, 7.0) == reference(j, 5.0, 7.0) for j in range(4))


@pytest.mark.parametrize("stages", [0, 4, -1])
def test_bad_stage_count_names_layer_count(stages):
    with pytest.raises(InputError, match="the trace has 3 layers"):
        partition([L("x", 1, 1)] * 3, stages)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bandwidth_Bps": [1.0, 2.0]},  # needs P-1 = 1 value
        {"bandwidth_Bps": 0.0},
        {"memory_capacity_bytes": [1.0]},  # needs P = 2 values
        {"memory_capacity_bytes": -1.0},
    ],
)
def test_bad_bandwidth_or_capacity(kwargs):
    with pytest.raises(InputError):
        partition([L("x", 1, 1)] * 3, 2, **kwargs)


def test_negative_time_is_input_error():
    with pytest.raises(InputError, match="fwd_s"):
        partition([L("x", -1.0, 1)], 1)


def test_uniform_partition():
    assert uniform_partition(10, 4) == (0, 3, 6, 8)  # sizes 3, 3, 2, 2
    assert uniform_partition(8, 8) == tuple(range(8))
    assert uniform_partition(5, 1) == (0,)
    with pytest.raises(InputError, match="the trace has 2 layers"):
        uniform_partition(2, 3)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_uniform_partition_closed_form(case):
    """Sizes: the first ``n mod P`` stages get ``ceil(n/P)`` layers, the rest ``floor(n/P)``."""
    n, stages = case
    starts = uniform_partition(n, stages)
    sizes = [e - a for a, e in zip(starts, (*starts[1:], n), strict=True)]
    extra = n % stages
    assert sizes == [n // stages + 1] * extra + [n // stages] * (stages - extra)


def test_the_replay_splits_with_the_simulators_function():
    """One even split: the torch backend has no second one (its default is uniform_partition)."""
    pytest.importorskip("torch")
    import backends.torch.models.transformer as models
    import backends.torch.replay.reference as reference
    import backends.torch.replay.runtime as runtime
    import backends.torch.replay.torch_schedules as torch_schedules

    assert not hasattr(models, "even_boundaries")
    assert runtime.uniform_partition is uniform_partition
    assert torch_schedules.stage_setup is runtime.stage_setup  # torch's schedules split as ours
    assert reference.uniform_partition is uniform_partition  # and the numerics reference


def test_optimal_never_worse_than_uniform():
    layers = [L(f"l{i}", (i % 7) * 0.1, 0.2, out=i) for i in range(40)]
    opt = partition(layers, 5, bandwidth_Bps=100.0)
    uni = hand_cost(layers, uniform_partition(40, 5), 100.0, None, fp16_adam_1f1b(5))
    assert opt.bottleneck_s <= max(uni["time"]) + 1e-12


def test_partition_invariants_and_json():
    trace = Trace("toy", tuple(L(f"l{i}", 1e-3, 2e-3, 4, 8, 8) for i in range(6)), 1, "fp16", "cpu")
    part = partition(trace, 3, bandwidth_Bps=1e6, memory_capacity_bytes=1e9)
    assert part.stage_slices() == [range(0, 2), range(2, 4), range(4, 6)]
    assert part.stage_comm_s[-1] == 0.0
    json.dumps(part.to_dict())
    doc = partition_json(part, trace)
    json.dumps(doc)
    assert doc["trace"] == "toy" and doc["stages"][1]["first_layer"] == "l2"
    assert doc["stages"][1]["last_layer"] == "l3" and doc["feasible"]
    console = Console(width=120, record=True)
    console.print(partition_table(part, trace))
    text = console.export_text()
    assert "l0..l1" in text and "l4..l5" in text
    with pytest.raises(ValueError):
        Partition((1,), 2, (0.0,), (0.0,), (0.0,), (0.0,), (0.0,), (True,))

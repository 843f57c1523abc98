"""Periodic steady state (sim.engine.periodic): a long pipeline simulated over a few periods
more than its fill (1F1B: p + 8 micro-batches) with the missing steady-state periods inserted
gives the full simulation's iteration time, bubble, sums and peak memory, under every schedule
with a steady state (1F1B, interleaved 1F1B, interleaved zero bubble, ZB-V, DualPipeV,
PipeDream, 2BW, PipeMare); every case it cannot handle falls back to the full simulation and
says why."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.engine import simulate
from sim.engine.period_check import find_period
from sim.engine.period_program import spliced
from sim.engine.periodic import short_microbatches, simulate_periodic
from sim.metrics import compute_metrics
from sim.schedules.action import Action
from sim.schedules.interleaved_1f1b import Interleaved1F1B
from sim.schedules.one_f_one_b import OneFOneB
from sim.schedules.registry import get_schedule
from tests.helpers import cluster_1f1b, small_gpt_csv, uniform_input
from tests.test_symmetry import _moe

REL = 1e-11  # float rounding of sums of many durations (sim.engine.period_check.REL_TOL)


def _metrics(log, p, m, repeated=None, schedule=None):
    return compute_metrics(
        log,
        stages=p,
        microbatches=m,
        synchronous=schedule.synchronous if schedule else True,
        fill_microbatches=schedule.fill_microbatches() if schedule else None,
        samples_per_step=m,
        repeated=repeated,
    )


def _both(inp, p, m):
    """(full metrics, periodic metrics, periodic log, repeated) of ``inp``."""
    full = _metrics(simulate(inp), p, m)
    log, rep = simulate_periodic(inp, OneFOneB(p, m))
    return full, _metrics(log, p, m, rep), log, rep


def _assert_equal(full, per):
    assert per.iteration_time_s == pytest.approx(full.iteration_time_s, rel=REL)
    assert per.peak_memory_bytes == full.peak_memory_bytes
    assert {d: full.peak_by_device[d] for d in per.peak_by_device} == per.peak_by_device
    assert per.bubble_fraction == pytest.approx(full.bubble_fraction, rel=1e-9, abs=1e-12)
    assert per.comm_bytes == pytest.approx(full.comm_bytes, rel=REL)
    assert per.recompute_s == pytest.approx(full.recompute_s, rel=REL)


@pytest.mark.parametrize(("p", "m"), [(4, 32), (4, 64), (8, 128), (16, 128)])
def test_periodic_equals_full_uniform(p, m):
    inp = uniform_input(
        "1f1b", p, m, fwd_s=1.0, bwd_s=2.0, out_bytes=3e6, act_bytes=1e6, iterations=2
    )
    inp = replace(
        inp, plans=tuple(tuple(replace(pl, optimizer_s=0.5) for pl in r) for r in inp.plans)
    )
    full, per, log, rep = _both(inp, p, m)
    assert rep is not None and rep.repeats >= 1, log.meta["periodic"]
    assert log.meta["periodic"].startswith("periodic:")
    _assert_equal(full, per)
    # closed form of free-communication 1F1B: (m + p - 1)(f + b) + optimizer step
    if p == 4 and m == 16:
        assert full.iteration_time_s == pytest.approx((m + p - 1) * 3.0 + 0.5, rel=1e-12)


STEADY = [
    ("1f1b", 4, 64, None),
    ("interleaved_1f1b", 4, 64, 2),
    ("interleaved_1f1b", 4, 96, 3),
    ("interleaved_1f1b", 1, 32, 2),
    ("interleaved_zero_bubble", 4, 64, 2),
    ("zbv_zero_bubble", 4, 64, None),
    ("dualpipe_v", 4, 64, None),
    ("pipedream", 4, 64, None),
    ("pipedream_2bw", 4, 64, None),
    ("pipemare", 4, 64, None),
]


@pytest.mark.parametrize(("name", "p", "m", "v"), STEADY)
def test_periodic_equals_full_every_schedule(name, p, m, v):
    """Sends that cost time (3 MB at 10 GB/s), stashes, an optimizer step: the periodic run
    of each schedule with a steady state equals its full simulation."""
    sched = get_schedule(name)(p, m, v)
    inp = uniform_input(
        name, p, m, fwd_s=1.0, bwd_s=2.0, out_bytes=3e6, act_bytes=1e6,
        iterations=sched.steady_state_iterations(), virtual_stages=v,
    )  # fmt: skip
    inp = replace(
        inp, plans=tuple(tuple(replace(pl, optimizer_s=0.5) for pl in r) for r in inp.plans)
    )
    full = _metrics(simulate(inp), p, m, schedule=sched)
    log, rep = simulate_periodic(inp, sched)
    assert rep is not None and rep.repeats >= 1, log.meta["periodic"]
    _assert_equal(full, _metrics(log, p, m, rep, sched))


@pytest.mark.parametrize("name", ["gpipe", "looped_bfs"])
def test_falls_back_without_a_steady_phase(name):
    sched = get_schedule(name)(4, 32, None)
    inp = uniform_input(name, 4, 32, iterations=2, virtual_stages=sched.virtual_stages)
    assert "every forward before its backwards" in _fallback(inp, sched)


def test_falls_back_when_no_shorter_run_keeps_the_rounds():
    """Interleaved 1F1B with m = 20 on p = 8 runs rounds of 10 micro-batches: a run that shows
    four of them after the fill is longer than the iteration."""
    sched = Interleaved1F1B(8, 20, 2)
    assert sched.period_microbatches() == 10
    inp = uniform_input("interleaved_1f1b", 8, 20, iterations=2, virtual_stages=2)
    assert "too few" in _fallback(inp, sched)


def test_falls_back_when_the_program_is_not_the_schedules():
    """A program with one action moved is not the short run's with periods inserted."""
    p, m = 4, 40
    inp = uniform_input("1f1b", p, m, iterations=2)
    prog = [list(r) for r in inp.program]
    i = next(i for i, a in enumerate(prog[1]) if a.op == "F" and a.microbatch == 20)
    prog[1][i], prog[1][i + 1] = prog[1][i + 1], prog[1][i]  # 1B16, 1F20 -> 1F20, 1B16
    why = _fallback(replace(inp, program=type(inp.program)(prog)), OneFOneB(p, m))
    assert "rank 1's actions are not the short run's" in why


def test_spliced_inserts_relabelled_copies_of_the_period():
    """PipeDream's per-backward STEPs carry step numbers: they move with the periods."""
    short = [Action.from_str(x) for x in "0F0 0F1 0B0 0STEP0 0F2 0B1 0STEP1 0B2 0STEP2".split()]
    out = spliced(short, [(4, 3)], count=2, q=1, chunks=1)
    assert [str(a) for a in out] == (
        "0F0 0F1 0B0 0STEP0 0F2 0B1 0STEP1 0F3 0B2 0STEP2 0F4 0B3 0STEP3 0B4 0STEP4".split()
    )


@settings(max_examples=12, deadline=None)
@given(
    p=st.integers(2, 6),
    extra=st.integers(2, 30),
    fwd=st.floats(0.1, 3.0),
    bwd=st.floats(0.1, 6.0),
    out_mb=st.sampled_from([0.0, 1.0, 50.0]),
)
def test_periodic_equals_full_property(p, extra, fwd, bwd, out_mb):
    m = short_microbatches(p, 1) + extra
    inp = uniform_input(
        "1f1b", p, m, fwd_s=fwd, bwd_s=bwd, out_bytes=out_mb * 1e6, act_bytes=1e6, iterations=2
    )
    full, per, log, rep = _both(inp, p, m)
    if rep is None:  # allowed (it said why), but it must then be the full simulation
        assert log.meta["periodic"].startswith("full pipeline simulated")
    _assert_equal(full, per)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory) -> str:
    return small_gpt_csv(tmp_path_factory.mktemp("trace"))


def _exp(trace, servers, t, p, w, m, mode, framework="megatron-lm", **sweep) -> dict:
    return cluster_1f1b(trace, servers, t, p, w, m * w, mode, name="periodic", framework=framework,
                        **sweep)  # fmt: skip


@pytest.mark.parametrize(
    ("servers", "t", "p", "w", "m", "framework", "sweep"),
    [
        (2, 2, 4, 2, 32, "megatron-lm", {}),  # TP and DP collectives (local DDP: at the step)
        (2, 1, 8, 2, 96, "pipesim", {}),  # DDP buckets overlapping the last backward
        (2, 1, 4, 4, 24, "deepspeed", {}),  # blocking sends, step barrier
        (4, 2, 16, 1, 40, "megatron-lm", {}),  # p = 16 across 4 servers, TP only
        # issue 28: the other schedules with a steady state
        (2, 2, 2, 4, 48, "megatron-lm", {"schedule": "interleaved_1f1b"}),  # blocking, v = 2
        (2, 1, 4, 2, 48, "pipesim", {"schedule": "zbv_zero_bubble"}),
        (2, 1, 4, 2, 48, "pipesim", {"schedule": "dualpipe_v"}),
        (2, 1, 4, 4, 32, "pipesim", {"schedule": "pipedream_2bw", "memory_policy": "none"}),
    ],
)
def test_periodic_equals_full_gpt(gpt, servers, t, p, w, m, framework, sweep):
    full = api.simulate(_exp(gpt, servers, t, p, w, m, "full", framework, **sweep))
    per = api.simulate(_exp(gpt, servers, t, p, w, m, "symmetric", framework, **sweep))
    assert per.resolved.sim_input.mirrored
    assert per.log.meta["periodic"].startswith("periodic:"), per.log.meta["periodic"]
    assert any(n.startswith("periodic:") for n in per.log.meta["compute_notes"])
    assert "periodic" not in full.log.meta  # the full mode's log is the engine's, unchanged
    _assert_equal(full.metrics, per.metrics)


def _fallback(inp, schedule) -> str:
    log, rep = simulate_periodic(inp, schedule)
    assert rep is None
    return log.meta["periodic"]


def test_falls_back_with_too_few_microbatches():
    inp = uniform_input("1f1b", 4, 13, iterations=2)
    assert "too few" in _fallback(inp, OneFOneB(4, 13))


def test_falls_back_for_a_straggler():
    inp = replace(uniform_input("1f1b", 4, 32, iterations=2), stragglers=((2, 1.5),))
    assert "straggler" in _fallback(inp, OneFOneB(4, 32))


def test_falls_back_for_swaps():
    inp = uniform_input("1f1b", 4, 32, act_bytes=1e6, iterations=2)
    plans = tuple(tuple(replace(pl, swap_bytes=1e5) for pl in r) for r in inp.plans)
    assert "off its GPU" in _fallback(replace(inp, plans=plans), OneFOneB(4, 32))


def test_falls_back_for_a_degraded_link(gpt):
    sim = api.simulate(_exp(gpt, 2, 1, 2, 8, 32, "full", "pipesim"))
    inp, topo = sim.resolved.sim_input, sim.resolved.sim_input.topology
    links = tuple(
        replace(lk, bandwidth_Bps=lk.bandwidth_Bps / 4) if lk.name == "gpu5->leaf0.5" else lk
        for lk in topo.links
    )
    inp = replace(inp, topology=replace(topo, links=links, _route_cache={}))
    assert "gpu5" in _fallback(inp, OneFOneB(2, 32))


def test_windows_that_differ_are_no_period():
    p, m = 4, 32
    log = simulate(uniform_input("1f1b", p, m + 0, fwd_s=1.0, bwd_s=2.0, iterations=2))
    found = find_period(log, 1)
    assert not isinstance(found, str)
    # stretch one event in the middle of the checked windows: the periods no longer repeat
    i = next(
        i
        for i, e in enumerate(log.events)
        if found.cut_s + found.delta_s <= e.start_s < found.cut_s + 2 * found.delta_s
    )
    log.events[i] = log.events[i]._replace(end_s=log.events[i].end_s + 0.25)
    assert isinstance(find_period(log, 1), str)


def test_the_inserted_periods_are_marked_where_the_log_has_none():
    """Free-communication 1F1B, f = 1 s, b = 2 s: each micro-batch left out adds f + b = 3 s
    to an iteration, so the gaps recorded per iteration sum to (m - M) x 3 s, no event starts
    inside one, and the timeline plot shades them with a legend entry (the log had no record
    of them: a 5 s blank in llama3-70b-fp8-64xh100's timeline read as idle GPUs)."""
    from sim.report.gantt import plot_gantt
    from sim.report.memory_plots import plot_memory_timeline

    p, m = 4, 64
    inp = uniform_input("1f1b", p, m, fwd_s=1.0, bwd_s=2.0, act_bytes=1e6, iterations=2)
    log, rep = simulate_periodic(inp, OneFOneB(p, m))
    assert rep is not None, log.meta["periodic"]
    short = int(log.meta["periodic"].split()[1])
    gaps = log.meta["periodic_gaps_s"]
    assert len(gaps) == 2
    for a, b in gaps:
        assert b - a == pytest.approx((m - short) * 3.0, rel=1e-12)
        assert not [e for e in log.events if a + 1e-9 < e.start_s < b - 1e-9]
    for fig in (plot_gantt(log, iteration=1), plot_memory_timeline(log)):
        labels = fig.axes[0].get_legend_handles_labels()[1]
        assert "steady state, simulated once, not drawn" in labels


def test_periodic_equals_full_under_megatrons_combined_1f1b():
    """Megatron's combined 1F1B (``overlap_moe_expert_parallel_comm``: each backward paired
    with the next forward, run as two chains of layer parts, ``"0B1.3"``): the short run is
    paired as the long program is (``SimInput.combined_pairs``), stage 0's backwards are
    counted once each, not once per layer part, so a period is found and spliced; the
    iteration is the full simulation's (16 GPUs, EP 4, v 2, 64 micro-batches)."""
    sweep = {"expert_parallel": 4, "schedule": "interleaved_1f1b", "virtual_stages": 2,
             "gb": 256, "framework": "megatron-lm[overlap_moe_expert_parallel_comm=true]"}  # fmt: skip
    full = api.simulate(_moe("full", **dict(sweep)))
    per = api.simulate(_moe("symmetric", **dict(sweep)))
    assert per.resolved.sim_input.combined_pairs
    assert per.log.meta["periodic"].startswith("periodic:"), per.log.meta["periodic"]
    _assert_equal(full.metrics, per.metrics)

"""Memory policies: PatrickStar's chunks (Belady eviction, steady misses, sharded data
parallelism) and the auto planner."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.memory.chunks import access_sequence, belady, steady_misses
from sim.trace.generator import transformer_trace
from sim.trace.schema import Trace
from tests.helpers import chain_topology
from tests.policy_helpers import POLICIES, GiB, d2d_trace, dgx1, run, stage_gpus, tiny_gpt

# ------------------------------------------------------------------ chunks (PatrickStar)


def test_belady_evicts_the_chunk_used_farthest_in_the_future():
    seq = [0, 1, 2, 0, 3, 0, 1, 2]
    res = belady(seq, 3)
    # at 4 (chunk 3): next uses 0 -> 5, 1 -> 6, 2 -> 7: evict 2 (LRU would evict 1);
    # at 7 (chunk 2): 0, 1, 3 are never used again: the lowest id goes (PatrickStar's ties)
    assert res.evictions == ((4, 2), (7, 0))
    assert res.misses == (0, 1, 2, 4, 7)


def _lru_misses(seq, cap):
    cache, misses = [], 0
    for c in seq:
        if c in cache:
            cache.remove(c)
        else:
            misses += 1
            if len(cache) >= cap:
                cache.pop(0)
        cache.append(c)
    return misses


@settings(max_examples=60, deadline=None)
@given(seq=st.lists(st.integers(0, 6), max_size=40), cap=st.integers(1, 5))
def test_belady_never_misses_more_than_lru(seq, cap):
    assert len(belady(seq, cap).misses) <= _lru_misses(seq, cap)


def test_forward_backward_chunk_order_and_steady_misses():
    seq, ops = access_sequence(["F", "B"], 4)
    assert seq == [0, 1, 2, 3, 3, 2, 1, 0] and ops == ["F"] * 4 + ["B"] * 4
    assert steady_misses(["F", "B"] * 2, 4, 4) == (0, 0)
    # a cache of 3: each reversal reuses what the last pass left: one miss per pass
    assert steady_misses(["F", "B"], 4, 3) == (1, 1)


def test_chunked_streams_chunks_when_the_gpu_is_short_and_still_fits():
    trace = transformer_trace(
        "gpt",
        name="g",
        layers=8,
        hidden=2048,
        heads=16,
        seq_len=512,
        vocab=1024,  # the largest parameter group is then fc1, 4h^2 + 4h < 17 * 2**20
        microbatch_size=1,
        gpu_model="x",
        peak_flops=62.5e12,
    )
    topo = chain_topology(2, bandwidth_Bps=12e9, memory_bytes=1.25 * GiB)
    res, met, log = run(trace, topo, "chunked:17", schedule="1f1b", p=2, m=4)
    plan = res.sim_input.plans[0][0]
    assert plan.fetch_bytes > 0 and plan.host_bytes > 0
    assert any(e.kind == "chunk_move" for e in log.events)
    assert met.fits and log.meta["policy_notes"]["s0"]["streamed_chunks"] > 0
    _, none, _ = run(trace, topo, "none", schedule="1f1b", p=2, m=4)
    assert not none.fits


def test_sharded_data_parallel_reduce_scatters_and_all_gathers():
    trace = tiny_gpt()
    topo = chain_topology(4, bandwidth_Bps=1e9, memory_bytes=64 * GiB)
    _, _, log = run(trace, topo, "zero_offload", p=2, w=2, m=2)
    kinds = {e.kind for e in log.events}
    assert {"reduce_scatter", "all_gather"} <= kinds and "allreduce" not in kinds
    rs = next(e for e in log.events if e.kind == "reduce_scatter")
    assert rs.duration_s == pytest.approx(0.5 * 2 * (2 - 1) / 2 * rs.nbytes / 1e9)


# ------------------------------------------------------------------ auto


def _gpt24() -> Trace:
    """The 24-layer h=2048 GPT of the auto tests, at micro-batch 1."""
    return transformer_trace(
        "gpt",
        name="g",
        layers=24,
        hidden=2048,
        heads=16,
        seq_len=1024,
        vocab=50257,
        microbatch_size=1,
        gpu_model="x",
        peak_flops=62.5e12,
    )


def _fitting(trace, topo, policy, **kw):
    _, met, log = run(trace, topo, policy, **kw)
    return met, log


@pytest.mark.parametrize(
    "cap,sched,p", [(5.0, "1f1b", 8), (16.0, "gpipe", 4), (8.0, "pipedream", 4), (6.0, "1f1b", 4)]
)
def test_auto_fits_when_a_single_policy_fits_and_is_about_as_fast(cap, sched, p):
    """Each case is one where keeping everything (``none``) does not fit and some single policy
    does (asserted, so every case exercises auto's choice): auto must fit, say so in its notes,
    and be within 5% of the fastest single policy that fits."""
    trace = _gpt24()
    topo = dgx1(cap)
    auto, log = _fitting(trace, topo, "auto", schedule=sched, p=p, m=16)
    others = {
        pol: _fitting(trace, topo, pol, schedule=sched, p=p, m=16)[0] for pol in POLICIES[:-1]
    }
    assert not others["none"].fits, "case must need a policy"
    fitting = [o.throughput_samples_per_s for o in others.values() if o.fits]
    assert fitting, "case must have a single policy that fits"
    assert auto.fits, auto.oom
    assert all(v["fits"] for k, v in log.meta["policy_notes"].items() if k != "policy")
    assert auto.throughput_samples_per_s >= 0.95 * max(fitting)


def test_auto_picks_the_strictly_best_policy():
    """Uniform 8-stage 1F1B on 8 GiB V100s: the first stages do not fit, the last ones have room
    one NVLink hop away. Parking stashes there (MPress) costs nothing; every other policy is
    strictly slower (selective recompute a little, full recompute, swaps over the shared PCIe
    uplinks and host optimizers much more): auto must pick d2d for the heavy stages."""
    trace = d2d_trace(4)
    kw = dict(schedule="1f1b", p=8, m=16, partition="uniform")
    results = {pol: _fitting(trace, dgx1(8.0), pol, **kw) for pol in POLICIES}
    fit = {pol: met.throughput_samples_per_s for pol, (met, _) in results.items() if met.fits}
    singles = {k: v for k, v in fit.items() if k != "auto"}
    assert max(singles, key=singles.get) == "d2d_swap" and not results["none"][0].fits
    assert all(v < 0.99 * singles["d2d_swap"] for k, v in singles.items() if k != "d2d_swap")
    notes = results["auto"][1].meta["policy_notes"]
    assert "d2d" in notes["s0"]["choice"] and "d2d" in notes["s1"]["choice"]
    assert fit["auto"] == pytest.approx(singles["d2d_swap"])


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    "cap,sched,p,w",
    [
        (20.0, "gpipe", 4, 2),
        (6.0, "1f1b", 8, 1),
        (8.0, "pipedream", 4, 1),
        (9.0, "pipedream_2bw", 4, 2),
    ],
)
def test_a_stage_whose_notes_say_it_fits_does_fit(policy, cap, sched, p, w):
    """The planning estimate (GPU peak, peers' reservations, host DRAM) is never optimistic:
    every stage whose notes say ``fits`` runs on GPUs the engine's ledger keeps within capacity.
    Each case overflows without a policy yet leaves some stage fitting under every policy
    (asserted), so every sample checks at least one stage."""
    trace = _gpt24()
    res, met, log = run(
        trace, dgx1(cap), policy, schedule=sched, p=p, w=w, m=16, partition="uniform"
    )
    over = {device for device, *_ in log.meta.get("over_capacity", [])}
    said_fits = [k for k, v in log.meta["policy_notes"].items() if k != "policy" and v["fits"]]
    assert said_fits, "case must leave some stage fitting"
    for key in said_fits:
        assert not stage_gpus(key, res.sim_input.placement) & over, (key, met.oom)
    if len(said_fits) == len(log.meta["policy_notes"]) - ("policy" in log.meta["policy_notes"]):
        assert met.fits, met.oom


def test_the_notes_cases_overflow_without_a_policy():
    trace = _gpt24()
    for cap, sched, p, w in [
        (20.0, "gpipe", 4, 2),
        (6.0, "1f1b", 8, 1),
        (8.0, "pipedream", 4, 1),
        (9.0, "pipedream_2bw", 4, 2),
    ]:
        met, _ = _fitting(
            trace, dgx1(cap), "none", schedule=sched, p=p, w=w, m=16, partition="uniform"
        )
        assert not met.fits, (cap, sched)

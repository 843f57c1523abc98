"""``sim memory``'s shortcuts (issue 26) give the rows of the direct path: each point's peaks
and each advice as :func:`sim.point.memory.point_memory` of every point and of every change
in order would give them (:mod:`sim.plan.memory_grid`)."""

from __future__ import annotations

from functools import cache, partial

from sim.api.experiment import load
from sim.memory.allocator import replay
from sim.memory.allocator_rules import MIB
from sim.plan import memory_jobs
from sim.plan.memory_grid import (
    CHANGES,
    Advice,
    GridMemory,
    _memo_point,
    advise,
    grid_memory,
    overflowing,
)
from sim.plan.sweep import expand
from sim.point.experiment import Prepared
from sim.point.memory import PointMemory, point_memory

SMALL = {
    "name": "small",
    "hardware": "dgx1-v100-16gb",
    "models": [
        {"name": "gpt2", "trace": "gpt2-1.5b", "global_batch": 8, "microbatch_size": [2, 4]}
    ],
    "sweep": {"schedule": "1f1b", "stages": 2, "dp_width": [1, 2], "memory_policy": "none"},
}
"""Three points of GPT-2 1.5B (b = 4 with dp = 2 has no micro-batch count) on two 16 GB V100s,
none of which fits by more than 15 GiB."""


@cache
def _small() -> tuple[Prepared, tuple]:
    prep = load(SMALL)
    return prep, tuple(expand(prep)[0])


def _direct(prep: Prepared, points) -> list[GridMemory]:
    """Every point and every change of :data:`CHANGES` resolved in full, one by one."""
    out = []
    for point in points:
        pm = point_memory(prep, point)
        if pm.fits:
            out.append(GridMemory(point, pm))
            continue
        advice = Advice(overflowing(pm.tightest), -pm.tightest.headroom_bytes)
        for label, make in CHANGES:
            changed = make(point)
            if changed is None:
                continue
            other = point_memory(prep, changed)
            if other.fits:
                dev = other.tightest.device_bytes
                advice = Advice(advice.category, advice.over_bytes, label, changed, dev)
                break
        out.append(GridMemory(point, pm, advice=advice))
    return out


def test_grid_memory_gives_the_direct_paths_rows():
    prep, points = _small()
    got = grid_memory(prep, list(points))
    assert got == _direct(prep, points)
    # the bound ruled a change out: dist_opt (dp = 2) shards 3/4 of Adam's 16 bytes per
    # parameter over 2, 0.75e9 x 6 B = 4.2 GiB per GPU saved of the 15 GiB and more over
    (two,) = [g.memory for g in got if g.point.dp_width == 2]
    over: set = set()
    advise(prep, two, {}, over)
    assert [p.memory_policy for p in over] == ["dist_opt"]


def test_worker_processes_give_the_same_rows(monkeypatch):
    prep, points = _small()
    monkeypatch.setattr(memory_jobs, "MIN_POINTS", 2)  # a pool for three points
    work = partial(_memo_point, advice=True)
    with memory_jobs.ahead(prep, list(points), 2, work) as ahead:  # computed by the workers
        assert all(isinstance(g, GridMemory) for g in ahead)
    assert grid_memory(prep, list(points), jobs=2) == grid_memory(prep, list(points))


def test_the_bound_without_replay_is_the_peak_less_the_allocator_margin():
    """``replay=False`` drops exactly the replay's margin (``allocator``) and nothing else, so
    its device bytes bound the peak's from below."""
    prep, points = _small()
    for point in points:
        full, low = point_memory(prep, point), point_memory(prep, point, replay=False)
        assert isinstance(low, PointMemory)
        for r_full, r_low in zip(full.ranks, low.ranks, strict=True):
            assert r_low.by_category["allocator"] == 0.0
            assert r_full.by_category["allocator"] > 0.0  # the replay's margin (dgx1: torch)
            rest = {k: v for k, v in r_full.by_category.items() if k != "allocator"}
            assert {k: v for k, v in r_low.by_category.items() if k != "allocator"} == rest
            assert r_low.device_bytes <= r_full.device_bytes


def test_a_segment_freed_after_a_release_is_released_by_the_next():
    """The allocator replay skips its scan for wholly free segments while none can be there;
    one freed after a scan found none is still released. Capacity 60 MiB: a (20 MiB) and b
    (30 MiB) take 50; c (20 MiB) finds nothing to release and goes over, to 70; a freed, d
    (25 MiB, a 26 MiB segment) releases a's segment first: 50 + 26 = 76 MiB, not 96."""
    ops = [("alloc", "a", 20 * MIB), ("alloc", "b", 30 * MIB), ("alloc", "c", 20 * MIB)]
    ops += [("free", "a", 0), ("alloc", "d", 25 * MIB)]
    assert replay(ops, capacity_bytes=60 * MIB).reserved == 76 * MIB

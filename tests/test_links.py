"""The engine's link resource (sim.engine.links.FifoLink) schedules exactly what
``simpy.Resource(env, capacity=1)`` schedules: the same grants at the same times in the same
order, so replacing one by the other leaves every simulation unchanged."""

from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.links import DENSE, EXPERT, FifoLink, Links
from sim.hardware.parts import Link

# A job: (start delay, hold time, links it holds in order); delays and holds are small
# integers so that many requests, releases and grants fall on the same instant (where the
# order of the events, not only their times, decides who goes first).
JOBS = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(0, 3),
        st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True),
    ),
    min_size=1,
    max_size=12,
)


def _trace(jobs: list[tuple[int, int, list[int]]], make) -> list[tuple]:
    """``(time, job, what)`` of every grant and release, in the order they happened, with
    the resources built by ``make(env)``."""
    env = simpy.Environment()
    res = [make(env) for _ in range(3)]
    out: list[tuple] = []

    def job(j: int, delay: int, hold: int, links: list[int]):
        yield env.timeout(delay)
        reqs = []
        for k in links:
            req = res[k].request()
            yield req
            out.append((env.now, j, "got", k))
            reqs.append((res[k], req))
        yield env.timeout(hold)
        for r, req in reqs:
            r.release(req)
            out.append((env.now, j, "released"))

    def marker():  # an unrelated process woken at every integer time: interleaving shows
        for _ in range(12):
            out.append((env.now, -1, "tick"))
            yield env.timeout(1)

    env.process(marker())
    for j, (delay, hold, links) in enumerate(jobs):
        env.process(job(j, delay, hold, links))
    env.run()
    return out


@settings(max_examples=300, deadline=None)
@given(JOBS)
def test_fifo_link_schedules_as_simpy_resource(jobs):
    ours = _trace(jobs, FifoLink)
    theirs = _trace(jobs, lambda env: simpy.Resource(env, capacity=1))
    assert ours == theirs


def test_fifo_link_serves_in_request_order():
    # three jobs ask for one link at t=0 and hold it 2 s each: granted at 0, 2, 4, in order
    trace = _trace([(0, 2, [0]), (0, 2, [0]), (0, 2, [0])], FifoLink)
    grants = [(t, j) for t, j, what, *_ in trace if what == "got"]
    assert grants == [(0, 0), (2, 1), (4, 2)]


# FIFO links (PCIe): the order of grants below is what FIFO links keep; network and NVLink
# links are shared between communicators instead (tests/test_fair_share.py)
R1 = Link("r1", "gpu0", "sw1", 1e9, 0.0, kind="pcie")
R2 = Link("r2", "gpu1", "sw2", 1e9, 0.0, kind="pcie")


def _timeline(jobs: list[tuple]) -> dict[str, tuple[float, float]]:
    """``{name: (start, end)}`` of ``jobs``, each ``(name, issued at, links, seconds, order)``
    held by :meth:`Links.hold` (a collective's), processes started in the list's order."""
    env = simpy.Environment()
    links = Links(env, None, [])  # type: ignore[arg-type]
    ends: dict[str, tuple[float, float]] = {}

    def job(name, at_s, held, dur_s, order):
        yield env.timeout(at_s)
        start = yield from links.hold(held, dur_s, comm=name, order=order)
        ends[name] = (start, env.now)

    for name, at_s, held, dur_s, order in jobs:
        env.process(job(name, at_s, held, dur_s, order))
    env.run()
    return ends


def test_wide_transfer_is_not_overtaken_rail_by_rail():
    """No convoy: rail 1 is busy until 1 s, rail 2 until 2 s; a wide collective over both is
    issued at 0.1 s, a narrow one over rail 2 at 0.5 s, and over rail 1 at 1.5 s, 1 s each.
    The wide one queues on both rails at 0.1 s: it starts when rail 2 frees, 2-3 s, and both
    narrow ones wait behind it, 3-4 s. (Rail by rail, in name order, the wide one held rail 1
    from 1 s and queued on rail 2 behind the narrow one of 0.5 s: 3-4 s, that one 2-3 s, the
    one of 1.5 s 4-5 s.)"""
    ends = _timeline([
        ("x1", 0.0, (R1,), 1.0, DENSE), ("x2", 0.0, (R2,), 2.0, DENSE),
        ("wide", 0.1, (R1, R2), 1.0, DENSE),
        ("y2", 0.5, (R2,), 1.0, DENSE), ("y1", 1.5, (R1,), 1.0, DENSE),
    ])  # fmt: skip
    assert ends["wide"] == (2.0, 3.0)
    assert ends["y2"] == (3.0, 4.0)
    assert ends["y1"] == (3.0, 4.0)


def test_collectives_of_one_instant_queue_dense_first():
    """Three collectives issued at 1 s, their processes run expert (rail 1), dense (both
    rails), expert (rail 2): each instant's collectives queue at its end, dense first, so the
    dense one runs 1-2 s and both expert ones 2-3 s, whichever process ran first (as issued,
    the first expert one took rail 1 at 1 s and the dense one held rail 2 idle until 2 s: the
    second expert one ended at 4 s)."""
    ends = _timeline([
        ("e1", 1.0, (R1,), 1.0, EXPERT), ("dense", 1.0, (R1, R2), 1.0, DENSE),
        ("e2", 1.0, (R2,), 1.0, EXPERT),
    ])  # fmt: skip
    assert ends == {"dense": (1.0, 2.0), "e1": (2.0, 3.0), "e2": (2.0, 3.0)}


def test_point_to_point_transfer_queues_before_a_collective_of_its_instant():
    """A send over one link issued at 0 s after a collective over the same link was issued at
    0 s goes first (sends queue at once, collectives at the instant's end): send 0-1 s, then
    the collective 1-3 s (its 2e9 bytes at 1 GB/s would be 0-2 s as issued)."""
    env = simpy.Environment()
    link = Link("gpu0->gpu1", "gpu0", "gpu1", 1e9, 0.0, kind="pcie")  # FIFO

    class Topo:  # the one route the send asks for
        links = (link,)

        @staticmethod
        def route(src, dst):
            return (link,)

    topo = Topo()
    links = Links(env, topo, [])  # type: ignore[arg-type]
    ends = {}

    def coll():
        start = yield from links.hold(topo.links, 2.0, comm="c")
        ends["coll"] = (start, env.now)

    def send():
        start = yield from links.transfer("gpu0", "gpu1", 1e9, "swap_out", "s", "d2h")
        ends["send"] = (start, env.now)

    env.process(coll())
    env.process(send())
    env.run()
    assert ends == {"send": (0.0, 1.0), "coll": (1.0, 3.0)}

"""The engine's link resource (sim.engine.links.FifoLink) schedules exactly what
``simpy.Resource(env, capacity=1)`` schedules: the same grants at the same times in the same
order, so replacing one by the other leaves every simulation unchanged."""

from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.links import FifoLink, Links
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


def test_multi_link_transfer_queues_on_every_link_at_once():
    """No convoy: a collective over two rails, issued at 0.1 s while each rail is busy until
    1 s, queues on both at once, so a second transfer on rail 2 issued at 0.5 s waits behind
    it. Hand-computed: the collective holds both 1-2 s, the later transfer 2-3 s (acquiring
    rail by rail, the later one took rail 2 first, 1-2 s, and the collective ran 2-3 s)."""
    env = simpy.Environment()
    links = Links(env, None, [])  # type: ignore[arg-type]
    r1 = Link("r1", "gpu0", "sw1", 1e9, 0.0, kind="nvswitch")
    r2 = Link("r2", "gpu1", "sw2", 1e9, 0.0, kind="nvswitch")
    ends = {}

    def job(name, at_s, held, dur_s):
        yield env.timeout(at_s)
        start = yield from links.hold(held, dur_s)
        ends[name] = (start, env.now)

    for name, at_s, held in [("x1", 0.0, (r1,)), ("x2", 0.0, (r2,)),
                             ("wide", 0.1, (r1, r2)), ("y2", 0.5, (r2,))]:  # fmt: skip
        env.process(job(name, at_s, held, 1.0))
    env.run()
    assert ends["wide"] == (1.0, 2.0)
    assert ends["y2"] == (2.0, 3.0)

"""The engine's link resource (sim.engine.links.FifoLink) schedules exactly what
``simpy.Resource(env, capacity=1)`` schedules: the same grants at the same times in the same
order, so replacing one by the other leaves every simulation unchanged."""

from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.links import FifoLink

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

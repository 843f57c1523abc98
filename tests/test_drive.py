"""sim.engine.drive.run_to_end processes events as simpy.Environment.run() does."""

from __future__ import annotations

import pytest
import simpy

from sim.engine.drive import run_to_end
from sim.engine.fifo_link import EndOfInstant


def _scenario(env: simpy.Environment, seen: list) -> None:
    """Two processes that wake at the same instants, a resource they share and an event that
    runs at the end of its instant: the order is simpy's (time, priority, insertion)."""

    def proc(name: str, res: simpy.Resource, hold_s: float):
        yield env.timeout(1.0)
        seen.append((env.now, name, "woke"))
        with res.request() as req:
            yield req
            seen.append((env.now, name, "got"))
            yield env.timeout(hold_s)
        seen.append((env.now, name, "done"))

    res = simpy.Resource(env, capacity=1)
    env.process(proc("a", res, 2.0))
    env.process(proc("b", res, 1.0))
    EndOfInstant(env, lambda _: seen.append((env.now, "late", "end of instant 0")))


def test_run_to_end_processes_events_in_simpys_order():
    # hand-computed: both wake at 1 (a first: created first); a's grant is an event scheduled
    # after b's wake-up, so b wakes before a gets the resource; a holds it 1..3, b gets it
    # when a's release is processed (3) and holds it to 4; the end-of-instant event runs at 0
    expected = [
        (0.0, "late", "end of instant 0"),
        (1.0, "a", "woke"),
        (1.0, "b", "woke"),
        (1.0, "a", "got"),
        (3.0, "a", "done"),
        (3.0, "b", "got"),
        (4.0, "b", "done"),
    ]
    plain, fast = simpy.Environment(), simpy.Environment()
    seen_plain: list = []
    seen_fast: list = []
    _scenario(plain, seen_plain)
    _scenario(fast, seen_fast)
    plain.run()
    run_to_end(fast)
    assert seen_fast == seen_plain == expected
    assert fast.now == plain.now == 4.0


def test_run_to_end_raises_a_failed_events_error():
    env = simpy.Environment()

    def boom():
        yield env.timeout(1.0)
        raise ValueError("boom")

    env.process(boom())
    with pytest.raises(ValueError, match="boom"):
        run_to_end(env)

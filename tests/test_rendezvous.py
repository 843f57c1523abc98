"""The engine's rendezvous (sim.engine.rendezvous.Rendezvous): hand-computed small cases."""

from __future__ import annotations

import simpy

from sim.engine.rendezvous import Rendezvous

TRANSFER_S = 3.0


def _run(arrivals_s: dict[str, float], start: bool = True):
    """Members named by ``arrivals_s`` arrive under one key at those times; the collective
    (if ``start``) takes ``TRANSFER_S``. Returns ``(starts, resumed)``: the times the
    collective's process began, and ``{member: (arrived_s, value, resumed_s)}``."""
    env = simpy.Environment()
    meet = Rendezvous(env)
    starts: list[float] = []
    resumed: dict[str, tuple] = {}

    def transfer(done: simpy.Event):
        starts.append(env.now)
        yield env.timeout(TRANSFER_S)
        done.succeed("spans")

    def member(name: str, at_s: float):
        yield env.timeout(at_s)
        arrived_s, value = yield from meet.join("k", len(arrivals_s), transfer if start else None)
        resumed[name] = (arrived_s, value, env.now)

    for name, at_s in arrivals_s.items():
        env.process(member(name, at_s))
    env.run()
    return starts, resumed


def test_transfer_starts_at_the_last_arrival_and_all_resume_at_its_end():
    # arrivals at 1, 4 and 2 s: the last is at 4 s, the transfer runs 4..7 s
    starts, resumed = _run({"a": 1.0, "b": 4.0, "c": 2.0})
    assert starts == [4.0]
    assert resumed == {
        "a": (1.0, "spans", 7.0),
        "b": (4.0, "spans", 7.0),
        "c": (2.0, "spans", 7.0),
    }


def test_barrier_without_a_transfer_releases_everyone_at_the_last_arrival():
    starts, resumed = _run({"a": 0.5, "b": 2.5, "c": 1.5}, start=False)
    assert starts == []
    assert {name: r[2] for name, r in resumed.items()} == {"a": 2.5, "b": 2.5, "c": 2.5}


def test_a_closed_key_opens_a_new_rendezvous():
    env = simpy.Environment()
    meet = Rendezvous(env)
    first = [meet.arrive("k", 2), meet.arrive("k", 2)]
    second = meet.arrive("k", 2)
    assert first[0] is first[1] and first[0].triggered
    assert second is not first[0] and not second.triggered

"""Max-min fair sharing between communicators, FIFO within one (sim.engine.fair_share,
sim.engine.links): closed forms computed by hand, and full == mirrored where replicas'
collectives meet on links (measurements/engine/link_sharing.md)."""

from __future__ import annotations

import pytest
import simpy
import yaml

from sim import api
from sim.engine.fair_share import FairShare
from sim.engine.links import Links
from sim.hardware.parts import Link

T = 2.0
L1 = Link("l1", "gpu0", "sw", 1e9, 0.0, kind="nvswitch")
L2 = Link("l2", "gpu1", "sw", 1e9, 0.0, kind="network")


def _ends(jobs: list[tuple]) -> dict[str, tuple[float, float]]:
    """``{name: (start, end)}`` of ``jobs``, each ``(name, issued at, links, seconds, comm)``
    run by :meth:`Links.hold`."""
    env = simpy.Environment()
    links = Links(env, None, [])  # type: ignore[arg-type]
    out: dict[str, tuple[float, float]] = {}

    def job(name, at_s, held, work_s, comm):
        yield env.timeout(at_s)
        start = yield from links.hold(held, work_s, comm=comm)
        out[name] = (start, env.now)

    for j in jobs:
        env.process(job(*j))
    env.run()
    return out


def test_two_communicators_share_one_link_and_one_communicator_is_fifo():
    """Two flows of T on one link from 0: of two communicators both at half rate, both end
    at 2T (NVIDIA/nccl#204: two broadcasts at half the rate each); of one communicator one
    after the other, T and 2T (NVIDIA/nccl#574)."""
    two = _ends([("a", 0.0, (L1,), T, "x"), ("b", 0.0, (L1,), T, "y")])
    assert two == {"a": (0.0, pytest.approx(2 * T)), "b": (0.0, pytest.approx(2 * T))}
    one = _ends([("a", 0.0, (L1,), T, "x"), ("b", 0.0, (L1,), T, "x")])
    assert one == {"a": (0.0, pytest.approx(T)), "b": (pytest.approx(T), pytest.approx(2 * T))}


def test_staggered_flows():
    """A (T) from 0, B (T) from T/2: A alone does T/2, then both at half rate; A's last T/2
    takes T, it ends at 1.5T; B has done T/2 by then and ends alone at 2T."""
    ends = _ends([("a", 0.0, (L1,), T, "x"), ("b", T / 2, (L1,), T, "y")])
    assert ends["a"][1] == pytest.approx(1.5 * T)
    assert ends["b"][1] == pytest.approx(2 * T)


def test_max_min_rates_on_two_links():
    """A on link 1, B on links 1 and 2, C and D on link 2, T each: link 2's three flows get
    1/3 each (its equal share, the least), A the rest of link 1, 2/3. A ends at 1.5T; B, C, D
    have T/2 done then and keep 1/3 (link 2 still carries three), ending at 1.5T + 1.5T = 3T:
    link 2 carried 3T of work in 3T (work conserving)."""
    ends = _ends([
        ("a", 0.0, (L1,), T, "a"), ("b", 0.0, (L1, L2), T, "b"),
        ("c", 0.0, (L2,), T, "c"), ("d", 0.0, (L2,), T, "d"),
    ])  # fmt: skip
    assert ends["a"][1] == pytest.approx(1.5 * T)
    for name in "bcd":
        assert ends[name][1] == pytest.approx(3 * T)


def test_work_conserving_on_one_link():
    """Flows of 1, 2 and 3 s of three communicators starting at 0, 0.5 and 1 s on one link
    keep it busy from 0: the last ends at 1 + 2 + 3 = 6 s, as under FIFO; the shortest ends
    first (the 1 s flow: alone 0-0.5 s, then at half rate, 0.5 s more work by 1.5 s)."""
    ends = _ends([
        ("a", 0.0, (L1,), 1.0, "a"), ("b", 0.5, (L1,), 2.0, "b"), ("c", 1.0, (L1,), 3.0, "c"),
    ])  # fmt: skip
    assert max(e for _, e in ends.values()) == pytest.approx(6.0)
    # a: 0.5 alone, 0.5-1.0 at 1/2 (0.25), from 1.0 at 1/3: 0.25 left takes 0.75 -> 1.75
    assert ends["a"][1] == pytest.approx(1.75)


@pytest.mark.parametrize(("d", "r"), [(1.0, 8.0), (2.0, 0.5)])
def test_old_bulk_rule_is_the_two_flow_case(d, r):
    """A flow of d meeting another communicator's flow with r left on one link ends after
    d + min(d, r); the other ends min(d, r) later than alone (the former Bulk rule,
    ``d + min(d, r)``, now a consequence)."""
    start = 10.0 - r
    ends = _ends([("bulk", 0.0, (L1, L2), 10.0, "dp"), ("x", start, (L1,), d, "pp")])
    assert ends["x"][1] - start == pytest.approx(d + min(d, r))
    assert ends["bulk"][1] == pytest.approx(10.0 + min(d, r))


def test_alone_flow_takes_its_work_and_rates_are_recomputed_on_end():
    """FairShare directly: a flow alone on its links takes exactly its work; a second one
    on a disjoint link does not touch it (separate components)."""
    env = simpy.Environment()
    share = FairShare(env)
    done = {}

    def flow(name, links, work_s):
        yield share.start(links, work_s)
        done[name] = env.now

    env.process(flow("a", ("l1",), 3.0))
    env.process(flow("b", ("l2",), 1.0))
    env.run()
    assert done == {"a": 3.0, "b": 1.0}


def test_early_links_leave_the_flow_after_their_work():
    """A (3 s) gives l1 back after 1 s of its work; B (2 s) shares l1 from 0: both at 1/2
    until A's first 1 s is done at 2 s (B has 1 s done), then B alone ends at 3 s and A's
    other 2 s, on no shared link, at the full rate end at 4 s."""
    env = simpy.Environment()
    share = FairShare(env)
    done = {}

    def flow(name, work_s, early):
        yield share.start(("l1",), work_s, early)
        done[name] = env.now

    env.process(flow("a", 3.0, (("l1",), 1.0)))
    env.process(flow("b", 2.0, ((), 0.0)))
    env.run()
    assert done == {"a": pytest.approx(4.0), "b": pytest.approx(3.0)}


def _toy(mode: str) -> dict:
    """Llama-3.1-8B under torchtitan on one DGX H100: 2 replicas x TP 2 + SP, FSDP2 over
    the replicas, SAC (the 64-GPU experiment cut to 4 GPUs)."""
    with open("experiments/llama3.1-8b-torchtitan-fsdp2-tp.yaml") as f:
        cfg = yaml.safe_load(f)
    cfg["hardware"] = "dgx-h100"
    cfg["models"] = [dict(cfg["models"][0], global_batch=4)]
    cfg["options"] = dict(cfg["options"], simulation=mode)
    cfg["sweep"] = dict(
        cfg["sweep"], gpus=4, tensor_parallel=2, sequence_parallel=True,
        memory_policy="recompute:sac",
    )  # fmt: skip
    return cfg


def test_full_equals_mirrored_with_tensor_parallel_and_fsdp():
    """Each replica's TP collectives share NVSwitch ports with the FSDP collectives of its
    tensor rank: per link the same flows in every replica, so the mirrored run (replica 0
    only) gives the full one's time. Under FIFO with all-at-once acquisition the full run's
    FSDP collective waited for the latest replica's TP collective (0.98957 against 0.98671 s
    mirrored at 4 GPUs, +9 % at 16 GPUs, +41 % at 64)."""
    full = api.simulate(_toy("full"))
    sym = api.simulate(_toy("symmetric"))
    assert sym.resolved.sim_input.mirrored and not full.resolved.sim_input.mirrored
    assert sym.metrics.iteration_time_s == pytest.approx(full.metrics.iteration_time_s, rel=1e-9)

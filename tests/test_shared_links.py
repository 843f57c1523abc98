"""A data-parallel collective shares its network links with other traffic and holds a server's
local links only for the local phases (sim.engine.links, sim.comm.hierarchical): hand-computed
cases."""

from __future__ import annotations

import pytest
import simpy

from sim.comm.hierarchical import collective_plan
from sim.engine.links import Links
from sim.events import EventKind
from sim.hardware.loader import load_hardware
from sim.hardware.parts import Link

NIC = Link("gpu0->leaf", "gpu0", "leaf", 50e9, 0.0, kind="network")
NVL = Link("gpu0->sw", "gpu0", "sw", 900e9, 0.0, kind="nvswitch")


def _run(bulk_s: float, send_at: float, send_s: float, link: Link, early=((), 0.0)):
    """A collective holding ``link`` (and NIC) for ``bulk_s`` from 0, and a hold of
    ``send_s`` over ``link`` from ``send_at``: ``(collective end, other's start, other's end)``."""
    env = simpy.Environment()
    links = Links(env, None, [])  # type: ignore[arg-type]
    out = {}

    def coll():
        yield from links.hold((NIC, NVL), bulk_s, comm="dp", early=early)
        out["coll"] = env.now

    def other():
        yield env.timeout(send_at)
        out["start"] = yield from links.hold((link,), send_s, comm="pp")
        out["end"] = env.now

    env.process(coll())
    env.process(other())
    env.run()
    return out["coll"], out["start"], out["end"]


def test_network_link_is_shared_with_a_data_parallel_collective():
    # 10 s collective; a 1 s send at t=2 passes at half rate: 2 s, the collective ends 1 s late
    assert _run(10.0, 2.0, 1.0, NIC) == pytest.approx((11.0, 2.0, 4.0))
    # with 0.5 s of the collective left, the send shares 2 x 0.5 s, then runs alone 1.5 s
    assert _run(10.0, 9.5, 2.0, NIC) == pytest.approx((10.5, 9.5, 12.0))


def test_nvlink_is_shared_with_a_data_parallel_collective():
    """Another communicator's send over an NVLink a collective holds passes at half rate (it
    waited for the whole collective under FIFO: start 10, end 11)."""
    assert _run(10.0, 2.0, 1.0, NVL) == pytest.approx((11.0, 2.0, 4.0))
    # a local link held for its local phase (1.5 s): a 1 s send at 0.5 shares 0.5-2.5 with it
    # (1 s of the phase's work left, at half rate both), the collective ends 1 s late
    assert _run(10.0, 0.5, 1.0, NVL, ((NVL,), 1.5)) == pytest.approx((11.0, 0.5, 2.5))
    # a send after the local phase: the link is free, the collective is not slowed
    assert _run(10.0, 3.0, 1.0, NVL, ((NVL,), 1.5)) == pytest.approx((10.0, 3.0, 4.0))
    # the network link stays shared after the local phase's NVLink is given back
    assert _run(10.0, 3.0, 1.0, NIC, ((NVL,), 1.5)) == pytest.approx((11.0, 3.0, 5.0))


def test_hierarchical_collective_local_links_and_phases():
    """2 DGX H100 x 2 GPUs each: the local rings cross only NVSwitch links, the rails the NICs;
    the local reduce-scatter of B over 2 GPUs is one step of B/2 over GPU -> NVSwitch -> GPU
    (2 x 5 us latency, 18 NVLinks x 20.6 GB/s NCCL rate); an all-reduce has it twice."""
    topo = load_hardware("2x-dgx-h100")
    plan = collective_plan(topo, ("gpu0", "gpu1", "gpu8", "gpu9"))
    assert plan.hierarchical
    local = plan.local_links()
    assert local and all(lk.kind != "network" for lk in local)
    assert {lk.name for lk in local} <= {lk.name for lk in plan.links}
    B = 1e9
    step = 2 * 5e-6 + B / 2 / (18 * 20.6e9)
    assert plan.local_s(B, EventKind.REDUCE_SCATTER) == pytest.approx(step)
    assert plan.local_s(B, EventKind.ALL_GATHER) == pytest.approx(step)
    assert plan.local_s(B, EventKind.ALLREDUCE) == pytest.approx(2 * step)
    flat = collective_plan(topo, ("gpu0", "gpu1"))
    assert flat.local_links() == () and flat.local_s(B, EventKind.ALLREDUCE) == 0.0


def test_network_link_of_a_waiting_collective_is_free_to_pass():
    """A collective over two NICs, issued at 0 s while its communicator's previous one holds
    NIC 2 until 2 s, waits for it (FIFO within a communicator, NVIDIA/nccl#574) and moves
    nothing meanwhile: a 1 s send over NIC 1 at 0.5 s passes at the full rate, 0.5-1.5 s,
    and the 1 s collective runs 2-3 s, not later (sharing counts only while it runs)."""
    env = simpy.Environment()
    links = Links(env, None, [])  # type: ignore[arg-type]
    nic2 = Link("gpu1->leaf", "gpu1", "leaf", 50e9, 0.0, kind="network")
    out = {}

    def busy():
        yield from links.hold((nic2,), 2.0, comm="dp")

    def coll():
        out["coll"] = (yield from links.hold((NIC, nic2), 1.0, comm="dp")), env.now

    def send():
        yield env.timeout(0.5)
        out["send"] = (yield from links.hold((NIC,), 1.0, comm="pp")), env.now

    for proc in (busy, coll, send):
        env.process(proc())
    env.run()
    assert out == {"coll": (2.0, 3.0), "send": (0.5, 1.5)}

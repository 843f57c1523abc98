"""NCCL's rings (channels) over a communicator's NVLinks (sim.comm.rings): hand-built cases,
the DGX-1 cube mesh, NVSwitch presets, and properties over random small topologies."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.comm.rings import MAX_RINGS, reserved_Bps, ring_set
from sim.engine import simulate
from sim.engine.microbench import allreduce_busbw_Bps, allreduce_time_s
from sim.hardware.loader import load_hardware
from sim.hardware.parts import GPU, Host, Link
from sim.hardware.topology import Topology
from sim.memory.plan import StagePlan
from tests.helpers import uniform_input

GB = 1e9


def _topology(n: int, pairs: dict[tuple[int, int], float], kind: str = "nvlink") -> Topology:
    """``n`` GPUs on one host (PCIe 1 GB/s, 1 us each way) plus a link each way for every pair
    ``(a, b)`` of ``pairs``, at the given NCCL rate (bytes/s), latency 0."""
    gpus = tuple(GPU(f"gpu{i}", "test", 16e9, 100e12, 1e12, "cpu0") for i in range(n))
    links = []
    for (a, b), bw in sorted(pairs.items()):
        for s, d in ((a, b), (b, a)):
            links.append(Link(f"gpu{s}->gpu{d}", f"gpu{s}", f"gpu{d}", bw, 0.0, kind, bw))
    for i in range(n):
        links.append(Link(f"gpu{i}->cpu0", f"gpu{i}", "cpu0", 1e9, 1e-6, "pcie"))
        links.append(Link(f"cpu0->gpu{i}", "cpu0", f"gpu{i}", 1e9, 1e-6, "pcie"))
    return Topology("test", gpus, (Host("cpu0", 1e12),), tuple(links))


SQUARE = {(0, 1): 20 * GB, (1, 2): 20 * GB, (2, 3): 20 * GB, (3, 0): 20 * GB}
GPUS4 = ("gpu0", "gpu1", "gpu2", "gpu3")


def test_two_disjoint_directed_rings_double_the_single_ring():
    """4 GPUs in a square of NVLinks, 20 GB/s each way, no latency. The links of one direction
    form ring 0->1->2->3->0, the other direction 0->3->2->1->0: two rings of 20 GB/s that share
    no link. All-reduce of B: each ring carries B/2 in 2(4-1) = 6 steps of (B/2)/4 / 20e9:
    t = 6 * B / 160e9, busbw = B/t * 6/4 = 40 GB/s. The same square with links that are not
    NVLink (one ring, as before) moves B in 6 steps of (B/4) / 20e9: busbw 20 GB/s, half."""
    topo = _topology(4, SQUARE)
    rings = ring_set(topo, GPUS4)
    assert [r.order for r in rings] == [
        ("gpu0", "gpu1", "gpu2", "gpu3"),
        ("gpu0", "gpu3", "gpu2", "gpu1"),
    ]
    assert [r.bandwidth_Bps for r in rings] == [20 * GB, 20 * GB]
    nbytes = 2**30
    assert allreduce_time_s(topo, GPUS4, nbytes) == pytest.approx(6 * nbytes / 160e9, rel=1e-12)
    assert allreduce_busbw_Bps(topo, GPUS4, nbytes) == pytest.approx(40 * GB, rel=1e-12)
    single = _topology(4, SQUARE, kind="link")
    assert len(ring_set(single, GPUS4)) == 1
    assert allreduce_time_s(single, GPUS4, nbytes) == pytest.approx(6 * nbytes / 80e9, rel=1e-12)
    assert allreduce_busbw_Bps(single, GPUS4, nbytes) == pytest.approx(20 * GB, rel=1e-12)


def test_rings_of_unequal_bandwidth_split_the_bytes_by_bandwidth():
    """Square whose 0-1 pair has 40 GB/s, the rest 20, latency 0: the widest ring is one
    direction at 20 GB/s (0->1->2->3->0), then the other direction at 20, then nothing left
    but 0-1's spare 20 each way (no ring): 2 rings of 20 GB/s, B/2 each, as in the square."""
    topo = _topology(4, {**SQUARE, (0, 1): 40 * GB})
    rings = ring_set(topo, GPUS4)
    assert [r.bandwidth_Bps for r in rings] == [20 * GB, 20 * GB]
    assert reserved_Bps(rings)["gpu0->gpu1"] == 20 * GB


def test_dgx1_eight_gpus_use_all_six_nvlinks_of_every_gpu():
    """Cube mesh (hardware.md §3.1), NCCL 20 GB/s per NVLink: the NV2 pairs form the ring
    0-3-2-1-5-6-7-4 (40 GB/s, one ring per direction), the NV1 pairs the ring 0-1-3-7-5-4-6-2
    (20 GB/s each direction): 40 + 40 + 20 + 20 = 120 GB/s, and every NVLink direction is
    reserved to its full NCCL rate (6 links x 2 directions x 8 GPUs / 2 = 48 link directions)."""
    topo = load_hardware("dgx1-v100-16gb")
    gpus = tuple(f"gpu{i}" for i in range(8))
    rings = ring_set(topo, gpus)
    assert [r.bandwidth_Bps for r in rings] == [40 * GB, 40 * GB, 20 * GB, 20 * GB]
    assert rings[0].order == ("gpu0", "gpu3", "gpu2", "gpu1", "gpu5", "gpu6", "gpu7", "gpu4")
    assert rings[2].order == ("gpu0", "gpu1", "gpu3", "gpu7", "gpu5", "gpu4", "gpu6", "gpu2")
    nvlinks = [lk for lk in topo.links if lk.kind == "nvlink"]
    assert len(nvlinks) == 32  # 16 pairs, both directions (NV2 pairs are one link of count 2)
    assert reserved_Bps(rings) == {lk.name: lk.rate_Bps(True) for lk in nvlinks}


def test_dgx1_allreduce_in_the_engine_is_the_hand_computed_multi_ring_time():
    """p=1, w=8 on a DGX-1, 1.2e9 B of gradients at the step: rings of 40, 40, 20, 20 GB/s
    carry 1/3, 1/3, 1/6, 1/6 of B; every ring's step moves (B/3)/8 / 40e9 = B / 960e9 s; 2(8-1)
    = 14 steps: the bus bandwidth is 120 GB/s. NCCL runs ring Simple at this size, whose latency
    is baseLat 8.4 + 14 x NVLink hwLat 3.4 us (tuning.cc). The all-reduce holds the 32 NVLink
    directions and no PCIe link."""
    topo = load_hardware("dgx1-v100-16gb")
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=1.2e9)
    base = uniform_input("gpipe", 1, 1, w=8, plan=plan)
    log = simulate(replace(base, topology=topo, dp_bucket_bytes=0.0))
    ar = [e for e in log.events if e.kind == "allreduce"]
    assert len(ar) == 8
    for e in ar:
        assert e.duration_s == pytest.approx((8.4 + 14 * 3.4) * 1e-6 + 14 * 1.2e9 / 960e9)
        assert set(e.links) == {lk.name for lk in topo.links if lk.kind == "nvlink"}


@pytest.mark.parametrize("preset", ["dgx2-v100", "dgx-a100-40gb", "dgx-h100", "hgx-a800-80gb"])
def test_an_nvswitch_port_is_one_ring_at_the_ports_nccl_rate(preset):
    """One gpu -> nvswitch link per GPU: the first ring reserves the whole port, so the set is
    that one ring, at the port's NCCL rate (count x NCCL per-NVLink rate)."""
    topo = load_hardware(preset)
    gpus = tuple(g.name for g in topo.gpus)
    rings = ring_set(topo, gpus)
    assert len(rings) == 1
    port = topo.direct_link("gpu0", "nvswitch")
    assert rings[0].bandwidth_Bps == port.rate_Bps(True)


@pytest.mark.parametrize("members", [(0, 5), (0, 1, 2, 4), (0, 1, 2, 3, 4, 5, 6, 7)])
def test_pcie_box_and_pairs_without_nvlink_keep_the_single_routed_ring(members):
    """No NVLink ring over the communicator: one ring, the routed one of Topology.ring (on the
    PCIe preset for the full box; on DGX-1 for 0-5, across the sockets, and 0,1,2,4, where gpu4
    has one NVLink into the set)."""
    preset = "pcie-8gpu" if len(members) == 8 else "dgx1-v100-16gb"
    topo = load_hardware(preset)
    gpus = tuple(f"gpu{i}" for i in members)
    rings = ring_set(topo, gpus)
    assert len(rings) == 1
    assert rings[0].order == topo.ring(gpus)


@st.composite
def _random_case(draw):
    n = draw(st.integers(2, 6))
    pairs = {}
    for a in range(n):
        for b in range(a + 1, n):
            count = draw(st.integers(0, 3))
            if count:
                pairs[(a, b)] = count * 20 * GB
    switch = draw(st.booleans())
    members = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))
    return n, pairs, switch, tuple(f"gpu{i}" for i in sorted(members))


def _with_switch(topo: Topology, port_Bps: float) -> Topology:
    links = list(topo.links)
    for g in topo.gpus:
        for s, d in ((g.name, "nvswitch"), ("nvswitch", g.name)):
            links.append(Link(f"{s}->{d}", s, d, port_Bps, 0.0, "nvswitch", port_Bps))
    return Topology("test", topo.gpus, topo.hosts, tuple(links), ("nvswitch",))


@settings(max_examples=150, deadline=None)
@given(_random_case())
def test_rings_never_reserve_more_than_a_link_carries_nor_leave_the_communicator(case):
    """Random NVLink graphs on 2-6 GPUs (0-3 NVLinks per pair, optionally an NVSwitch), random
    communicators: in every sample, each ring visits every member once, its hops go from one
    member to the next and touch no other GPU, the rings' reservations on every link are at
    most its NCCL rate, there are at most MAX_RINGS rings, and the search is deterministic."""
    n, pairs, switch, gpus = case
    topo = _topology(n, pairs)
    if switch:
        topo = _with_switch(topo, 60 * GB)
    rings = ring_set(topo, gpus)
    assert 1 <= len(rings) <= MAX_RINGS
    comm = set(gpus)
    for ring in rings:
        assert sorted(ring.order) == sorted(gpus)
        assert len(ring.routes) == (len(gpus) if len(gpus) > 1 else 0)
        for i, route in enumerate(ring.routes):
            assert route[0].src == ring.order[i]
            assert route[-1].dst == ring.order[(i + 1) % len(gpus)]
            touched = {x for lk in route for x in (lk.src, lk.dst) if x.startswith("gpu")}
            assert touched <= comm
        assert all(bw > 0 for bw in ring.hop_bandwidths_Bps)
    rates = {lk.name: lk.rate_Bps(True) for lk in topo.links}
    for name, bw in reserved_Bps(rings).items():
        assert bw <= rates[name] * (1 + 1e-9), name
    fresh = _topology(n, pairs)
    again = ring_set(_with_switch(fresh, 60 * GB) if switch else fresh, gpus)
    assert [(r.order, r.hop_bandwidths_Bps) for r in again] == [
        (r.order, r.hop_bandwidths_Bps) for r in rings
    ]


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=2, max_size=8))
def test_dgx1_rings_stay_inside_the_communicator(members):
    """Every ring of every DGX-1 communicator only touches the communicator's GPUs."""
    topo = load_hardware("dgx1-v100-16gb")
    gpus = tuple(f"gpu{g}" for g in sorted(members))
    for ring in ring_set(topo, gpus):
        touched = {x for r in ring.routes for lk in r for x in (lk.src, lk.dst)}
        assert {x for x in touched if x.startswith("gpu")} <= set(gpus)

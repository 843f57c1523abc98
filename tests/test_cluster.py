"""Clusters: Nx-PRESET names, the rail-optimised fat tree, collectives across servers against
closed forms (NCCL 2.20.3 tuning.cc / search.cc, written out by hand here)."""

from __future__ import annotations

import math

import pytest

from sim.comm import nccl
from sim.comm.hierarchical import collective_plan, ring_routes, ring_time_s
from sim.errors import InputError
from sim.events import EventKind
from sim.hardware.build import topology_from_spec
from sim.hardware.describe import topology_to_dict
from sim.hardware.fabric import RailFatTree
from sim.hardware.loader import load_hardware, load_hardware_spec, multi_server

NVS_LAT = 5e-6  # dgx-h100: GPU <-> NVSwitch latency (its raw rate, 375 GB/s, is for copies)
NVS_NCCL_BW = 18 * 20.6e9  # NCCL's rate over it: 18 NVLinks x 20.6 GB/s (NCCL topo.h)
NIC_BW, NIC_LAT = 50e9, 1e-6  # 400 Gb/s NDR per GPU, per network link (dgx-h100 preset)
NIC_NCCL = 48e9  # NCCL's GPU-to-NIC rate: PCIe gen5 x16 as NCCL reads it


def cluster(preset: str, servers: int):
    """A cluster built past the loader's size check (the unit under test is the topology)."""
    return topology_from_spec(load_hardware_spec(preset).model_copy(update={"servers": servers}))


@pytest.mark.parametrize(
    ("name", "gpus", "servers"), [("2x-dgx-h100", 16, 2), ("4x-dgx-h100", 32, 4)]
)
def test_multi_server_presets(name, gpus, servers):
    topo = load_hardware(name)
    assert topo.num_gpus == gpus and len(topo.servers) == servers
    assert all(len(s) == 8 for s in topo.servers)
    # rail-optimised: GPU i of each server reaches GPU i of the others through its leaf only
    route = topo.route("gpu3", f"gpu{8 + 3}")
    assert [lk.name for lk in route] == ["gpu3->leaf0.3", "leaf0.3->gpu11"]
    assert all(lk.bandwidth_Bps == NIC_BW and lk.rate_Bps(True) == NIC_NCCL for lk in route)
    # another rail goes up to a spine and down
    assert len(topo.route("gpu3", "gpu12")) == 4
    # inside a server nothing changes: NVSwitch
    assert [lk.kind for lk in topo.route("gpu8", "gpu9")] == ["nvswitch", "nvswitch"]
    assert {topo.gpu(g).host for g in topo.servers[1]} == {"cpu2", "cpu3"}
    assert load_hardware(topology_to_dict(topo)) == topo


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("384x-dgx-a100-80gb", (384, "dgx-a100-80gb")),
        ("512x-dgx-h100", (512, "dgx-h100")),
        ("2048x-dgx-h100", (2048, "dgx-h100")),
        ("nvl72x4-gb200", (4, "gb200-nvl72")),
        ("3x-no-such-server", None),
        ("nvl8x2-gb200", None),
        ("0x-dgx-h100", None),
    ],
)
def test_preset_names_are_parsed(name, want):
    assert multi_server(name) == want


def test_a_bad_name_lists_what_exists():
    with pytest.raises(InputError) as err:
        load_hardware("384x-dgx-a100-8gb")
    msg = str(err.value)
    assert "\n" not in msg and "did you mean '384x-dgx-a100-80gb'" in msg
    assert "dgx-h100" in msg and "nvl72x4-gb200" in msg and "Nx-PRESET" in msg


def test_gb200_nvl72_racks():
    topo = load_hardware("nvl72x2-gb200")
    assert topo.num_gpus == 144 and [len(s) for s in topo.servers] == [72, 72]
    assert topo.gpu(71).host == "cpu35" and topo.gpu(72).host == "cpu36"
    assert [lk.kind for lk in topo.route("gpu0", "gpu71")] == ["nvswitch", "nvswitch"]


def test_servers_need_a_network():
    with pytest.raises(InputError) as err:
        load_hardware({"base": "pcie-8gpu", "servers": 2})
    assert err.value.field == "hardware.servers"


def test_fat_tree_counts_and_d_mod_k_routing():
    """40 servers, 20 per SU (2 SUs), oversubscription 2: 10 uplinks (spines) per leaf; traffic
    to server n leaves on uplink (n mod 20) mod 10, so destinations 21 and 31 share one."""
    tree = RailFatTree(40, 8, 25e9, 1e-6, servers_per_leaf=20, oversubscription=2)
    assert (tree.units, tree.uplinks) == (2, 10)
    assert len(tree.switches()) == 2 * 8 + 10
    assert len(tree.link_ends()) == 2 * 320 + 2 * (2 * 8 * 10)
    to21 = tree.route_names(0, 21 * 8)
    to31 = tree.route_names(8, 31 * 8)
    assert to21[1] == "leaf0.0->spine1" and to31[1] == "leaf0.0->spine1"
    assert tree.route_names(0, 22 * 8)[1] == "leaf0.0->spine2"
    with pytest.raises(ValueError):
        tree.route_names(0, 7)


def test_oversubscription_shares_uplinks_in_the_engine_topology():
    spec = load_hardware_spec("dgx-h100")
    net = spec.network.model_copy(update={"servers_per_leaf": 4, "oversubscription": 2.0})
    topo = topology_from_spec(spec.model_copy(update={"servers": 8, "network": net}))
    up = {lk.name for lk in topo.links if lk.src == "leaf0.0" and lk.dst.startswith("spine")}
    assert up == {"leaf0.0->spine0", "leaf0.0->spine1"}
    a = [lk.name for lk in topo.route("gpu0", "gpu32")]  # server 4: uplink 0
    b = [lk.name for lk in topo.route("gpu8", "gpu48")]  # server 6: uplink 0 too
    assert a[1] == b[1] == "leaf0.0->spine0"


def test_inter_node_ring_time_closed_form():
    """16 GPUs of 2 servers, links' own model (no NCCL): reduce-scatter over 8 on NVSwitch,
    all-reduce of B/8 between the 2 servers on each rail, all-gather over 8."""
    topo = load_hardware("2x-dgx-h100")
    plan = collective_plan(topo, tuple(f"gpu{i}" for i in range(16)))
    assert plan.hierarchical
    B = 1e9
    local = 7 * (2 * NVS_LAT + B / 8 / NVS_NCCL_BW)  # L-1 steps of B/L, 2 links per hop
    rails = 2 * 1 * (2 * NIC_LAT + (B / 8) / 2 / NIC_NCCL)  # 2(N-1) steps of B/(L N)
    assert plan.ring_time_s(B, EventKind.ALLREDUCE) == pytest.approx(local + rails + local)
    assert plan.ring_time_s(B, EventKind.REDUCE_SCATTER) == pytest.approx(local + rails / 2)
    assert plan.ring_time_s(B, EventKind.ALL_GATHER) == pytest.approx(rails / 2 + local)
    flat = ring_time_s(ring_routes(topo, tuple(f"gpu{i}" for i in range(16))), B, "allreduce")
    assert flat > 3 * plan.ring_time_s(B, EventKind.ALLREDUCE)


def ring_simple_us(n: int, servers: int, nbytes: float, bus_GBps: float, plateau: float):
    """NCCL 2.20.3's ring/Simple all-reduce time across servers, by hand (tuning.cc):
    baseLat 8.4 + (2(n-1) - 2N) x max(hwLat[NVLink] 3.4, 3 x netOverhead 1) + 2N x hwLat[NET]
    14; x plateau when nBytes/(nCh n) >= 64; bandwidth bus x n / (2(n-1))."""
    lat = 8.4 + (2 * (n - 1) - 2 * servers) * 3.4 + 2 * servers * 14.0
    return lat * plateau + nbytes / (1000 * bus_GBps * n / (2 * (n - 1)))


@pytest.mark.parametrize("servers", [2, 8, 64, 512])
def test_allreduce_across_servers_ring_closed_form(servers):
    """16 to 4,096 A100s (HDR, 8 NICs per server): NCCL's graph is 8 channels of 24 GB/s (the
    first speedArrayInter entry under the 24 GB/s PCIe gen4 path; no doubling below 25), bus
    192 GB/s; ring/Simple at 1 GiB is the hand formula, with the x1.4 plateau."""
    topo = cluster("dgx-a100-80gb", servers)
    n = 8 * servers
    plan = collective_plan(topo, tuple(f"gpu{i}" for i in range(n)))
    comm = plan.communicator(EventKind.ALLREDUCE)
    assert comm is not None and (comm.servers, comm.nics) == (servers, 8)
    assert comm.bus_Bps == pytest.approx(192e9)
    B = 2.0**30
    ring = [c for c in nccl.candidates(comm, "allreduce", B) if (c.algorithm, c.protocol) == (
        "ring", "Simple")][0]  # fmt: skip
    assert ring.time_s * 1e6 == pytest.approx(ring_simple_us(n, servers, B, 192.0, 1.4))


@pytest.mark.parametrize("servers", [4, 64, 512])
def test_allreduce_across_servers_tree_closed_form(servers):
    """Tree/Simple (double binary tree across servers, chain inside): bus min(0.92 x 192, 8 x
    perChMaxTree 17.8 (Ampere, 4+ servers)) = 142.4 GB/s, algorithm bandwidth x 1/2 x the
    size correction (none at 1 GiB: log2(2^30 / 64) = 24 is past the 23-entry table); latency 2 ((8-1)
    x 28 + log2(N) x 28) us."""
    topo = cluster("dgx-a100-80gb", servers)
    plan = collective_plan(topo, tuple(f"gpu{i}" for i in range(8 * servers)))
    comm = plan.communicator(EventKind.ALLREDUCE)
    B = 2.0**30
    tree = [c for c in nccl.candidates(comm, "allreduce", B) if (c.algorithm, c.protocol) == (
        "tree", "Simple")][0]  # fmt: skip
    lat_us = 2 * (7 * 28.0 + int(math.log2(servers)) * 28.0)
    assert tree.latency_s * 1e6 == pytest.approx(lat_us)
    assert tree.bandwidth_Bps == pytest.approx(142.4e9 * 0.5)


def test_one_gpu_per_server_is_a_ring_over_the_rail():
    """Data parallelism with t = 8: one GPU per server, NCCL's graph one NIC (48 GB/s on
    Hopper, kept below 50 with one channel: doubled to 2 x 24), bus 48 GB/s; LL128 gets x0.7
    (ppn < 2)."""
    topo = load_hardware("4x-dgx-h100")
    gpus = ("gpu2", "gpu10", "gpu18", "gpu26")
    plan = collective_plan(topo, gpus)
    assert not plan.hierarchical
    comm = plan.communicator(EventKind.ALLREDUCE)
    assert (comm.nics, comm.bus_Bps) == (1, pytest.approx(48e9))
    assert nccl.channels(comm) == 2
    B = 4e8
    want = 2 * 3 * (2 * NIC_LAT + B / 4 / NIC_NCCL)  # the links' own model
    assert plan.ring_time_s(B, "allreduce") == pytest.approx(want)
    ll128 = [c for c in nccl.candidates(comm, "allreduce", B) if (c.algorithm, c.protocol) == (
        "ring", "LL128")][0]  # fmt: skip
    assert ll128.bandwidth_Bps == pytest.approx(min(48e9 * 0.7, 2 * 36.7e9) * 4 / 6)


def test_nvls_tree_across_h100_servers():
    """Hopper with NVLink SHARP across 8 servers: NVLS Tree, bus min(local, 384 / 2) x 5/6,
    latency hwLat[NVLink] 23 + 2 log2(8) x hwLat[NET] 14 us."""
    topo = load_hardware("8x-dgx-h100")
    plan = collective_plan(topo, tuple(f"gpu{i}" for i in range(64)))
    comm = plan.communicator(EventKind.ALLREDUCE)
    c = [x for x in nccl.candidates(comm, "allreduce", 1e9) if x.algorithm == "nvls_tree"][0]
    assert c.latency_s * 1e6 == pytest.approx(23 + 2 * 3 * 14)
    assert c.bandwidth_Bps == pytest.approx(min(comm.local_Bps, 192e9) * 5 / 6)


def test_inter_graph_speeds():
    assert nccl.inter_graph(8, 24e9, 8.0) == (8, 24.0)  # A100 + HDR: gen4 PCIe
    assert nccl.inter_graph(8, 48e9, 9.0) == (8, 48.0)  # H100 + NDR: kept (sm90, <50, >4 ch)
    assert nccl.inter_graph(1, 48e9, 9.0) == (2, 24.0)  # one NIC: doubled
    assert nccl.inter_graph(8, 12.5e9, 8.0) == (8, 12.0)  # 100 Gb/s NICs
    # Blackwell, 800 Gb/s NIC read as 96 GB/s: sm100 array starts at 96, doubled to 2 x 48
    assert nccl.inter_graph(1, 96e9, 10.3) == (2, 48.0)
    assert nccl.inter_graph(4, 96e9, 10.0) == (8, 48.0)
    assert nccl.inter_graph(1, 48e9, 10.0) == (2, 24.0)  # 400 Gb/s: 48, doubled, as sm90


def test_within_one_server_the_plan_is_the_ring():
    topo = load_hardware("2x-dgx-h100")
    gpus = tuple(f"gpu{i}" for i in range(8, 12))
    plan = collective_plan(topo, gpus)
    assert not plan.hierarchical
    want = ring_time_s(ring_routes(topo, gpus), 1e8, "allreduce")
    assert plan.ring_time_s(1e8, "allreduce") == pytest.approx(want)

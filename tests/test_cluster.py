"""A few servers: Nx-PRESET presets with rails, and hierarchical collectives across them."""

from __future__ import annotations

import pytest

from sim.engine.hierarchical import collective_plan, ring_routes, ring_time_s
from sim.errors import InputError
from sim.events import EventKind
from sim.hardware.loader import load_hardware

NVS_LAT = 5e-6  # dgx-h100: GPU <-> NVSwitch latency (its raw rate, 375 GB/s, is for copies)
NVS_NCCL_BW = 18 * 20.6e9  # NCCL's rate over it: 18 NVLinks x 20.6 GB/s (NCCL topo.h)
NIC_BW, NIC_LAT = 50e9, 5e-6  # 400 Gb/s NDR per GPU, per network link


@pytest.mark.parametrize(
    ("name", "gpus", "servers"), [("2x-dgx-h100", 16, 2), ("4x-dgx-h100", 32, 4)]
)
def test_multi_server_presets(name, gpus, servers):
    topo = load_hardware(name)
    assert topo.num_gpus == gpus and len(topo.servers) == servers
    assert all(len(s) == 8 for s in topo.servers)
    # rail-optimised: GPU i of each server reaches GPU i of the others through rail i only
    route = topo.route("gpu3", f"gpu{8 + 3}")
    assert [lk.name for lk in route] == ["gpu3->rail3", "rail3->gpu11"]
    assert all(lk.bandwidth_Bps == NIC_BW for lk in route)
    # inside a server nothing changes: NVSwitch
    assert [lk.kind for lk in topo.route("gpu8", "gpu9")] == ["nvswitch", "nvswitch"]
    # every GPU has its own socket's host within its server
    assert {topo.gpu(g).host for g in topo.servers[1]} == {"cpu2", "cpu3"}


def test_dgx_a100_nic_is_hdr_200():
    topo = load_hardware("2x-dgx-a100-80gb")
    assert topo.route("gpu0", "gpu8")[0].bandwidth_Bps == 25e9


def test_one_server_preset_unchanged():
    one = load_hardware("dgx-h100")
    assert one.num_gpus == 8 and len(one.servers) == 1
    assert not [lk for lk in one.links if lk.kind == "network"]


def test_unknown_multi_server_preset():
    with pytest.raises(InputError) as err:
        load_hardware("2x-nope")
    assert "Nx-PRESET" in str(err.value)


def test_servers_need_a_network():
    with pytest.raises(InputError) as err:
        load_hardware({"base": "pcie-8gpu", "servers": 2})
    assert err.value.field == "hardware.servers"


def test_inter_node_allreduce_closed_form():
    """16 GPUs of 2 servers: reduce-scatter over 8 on NVSwitch, all-reduce of B/8 between the
    2 servers on each rail, all-gather over 8 on NVSwitch."""
    topo = load_hardware("2x-dgx-h100")
    plan = collective_plan(topo, tuple(f"gpu{i}" for i in range(16)))
    assert plan.hierarchical
    B = 1e9
    local = 7 * (2 * NVS_LAT + B / 8 / NVS_NCCL_BW)  # L-1 steps of B/L, 2 links per hop
    rails = 2 * 1 * (2 * NIC_LAT + (B / 8) / 2 / NIC_BW)  # 2(N-1) steps of B/(L N)
    assert plan.ring_time_s(B, EventKind.ALLREDUCE) == pytest.approx(local + rails + local)
    assert plan.ring_time_s(B, EventKind.REDUCE_SCATTER) == pytest.approx(local + rails / 2)
    assert plan.ring_time_s(B, EventKind.ALL_GATHER) == pytest.approx(rails / 2 + local)
    # the flat ring over 16 would cross the network at one NIC's bandwidth: far slower
    flat = ring_time_s(ring_routes(topo, tuple(f"gpu{i}" for i in range(16))), B, "allreduce")
    assert flat > 3 * plan.ring_time_s(B, EventKind.ALLREDUCE)


def test_one_member_per_server_is_a_ring_over_the_rail():
    topo = load_hardware("4x-dgx-h100")
    gpus = ("gpu2", "gpu10", "gpu18", "gpu26")
    plan = collective_plan(topo, gpus)
    assert not plan.hierarchical
    B = 4e8
    want = 2 * 3 * (2 * NIC_LAT + B / 4 / NIC_BW)
    assert plan.ring_time_s(B, "allreduce") == pytest.approx(want)


def test_within_one_server_the_plan_is_the_ring():
    topo = load_hardware("2x-dgx-h100")
    gpus = tuple(f"gpu{i}" for i in range(8, 12))
    plan = collective_plan(topo, gpus)
    assert not plan.hierarchical
    want = ring_time_s(ring_routes(topo, gpus), 1e8, "allreduce")
    assert plan.ring_time_s(1e8, "allreduce") == pytest.approx(want)

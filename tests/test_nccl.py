"""NCCL's cost model (sim/comm/nccl.py, NCCL 2.20.3 src/graph/tuning.cc): a hand-computed
case per algorithm and protocol, NCCL's choice by size, sends, measured tables, and the
published nccl-tests sweeps (measurements/nccl-tests, benchmarks/accuracy/accuracy_comm.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sim.comm import nccl
from sim.comm.hierarchical import collective_plan
from sim.engine.microbench import allreduce_time_s, sendrecv_time_s
from sim.errors import InputError
from sim.events import EventKind
from sim.hardware.comm_tables import CollectiveTable, find_table
from sim.hardware.loader import load_hardware

AR, AG = EventKind.ALLREDUCE, EventKind.ALL_GATHER
A100x8 = nccl.Communicator(8, 1, 240e9, nccl.NVLINK, 8.0)
"""8 A100 on NVSwitch: NCCL's ring bus bandwidth 12 NVLinks x 20 GB/s (topo.h SM80)."""
GB = 1e9


def _load_benchmark():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy" / "accuracy_comm.py"
    spec = importlib.util.spec_from_file_location("accuracy_comm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pick(comm, kind, nbytes, algo, proto) -> nccl.Choice:
    (c,) = [
        c for c in nccl.candidates(comm, kind, nbytes) if (c.algorithm, c.protocol) == (algo, proto)
    ]
    return c


def test_channels_follow_ncclTopoCompute_and_DupChannels():
    """240 GB/s: 6 channels of 40 (speedArrayIntra), duplicated to 12 of 20 (speed >= 25);
    DGX-1's 120 GB/s with 20 GB/s rings: 6 of 20, not duplicated; H100 370.8: 6 of 60 (sm90
    speeds), duplicated to 12."""
    assert nccl.channels(A100x8) == 12
    v100 = nccl.Communicator(8, 1, 120e9, nccl.NVLINK, 7.0, max_ring_Bps=40e9)
    assert nccl.channels(v100) == 6
    assert nccl.channels(nccl.Communicator(8, 1, 370.8e9, nccl.NVLINK, 9.0)) == 12


def test_ring_ll_closed_form():
    """Ring LL all-reduce: baseLat 6.6 + 14 steps x hwLat 0.6 us; bus min(llMaxBw 87.7, 240/4);
    algorithm bandwidth x n / 2(n-1)."""
    c = _pick(A100x8, AR, 8, nccl.RING, nccl.LL)
    assert c.latency_s == pytest.approx(15.0e-6)
    assert c.bandwidth_Bps == pytest.approx(60 * GB * 8 / 14)
    assert c.time_s == pytest.approx(15.0e-6 + 8 / (60 * GB * 8 / 14))
    # an all-gather's LL gets a third of the bus (not a quarter) and n/(n-1)
    g = _pick(A100x8, AG, 8, nccl.RING, nccl.LL)
    assert g.latency_s == pytest.approx((6.6 + 7 * 0.6) * 1e-6)
    assert g.bandwidth_Bps == pytest.approx(80 * GB * 8 / 7)


def test_ring_ll128_closed_form():
    """Ring LL128: baseLat 14 + 14 x 1.9 us; bus min(0.92 x 240, 12 ch x 20 GB/s)."""
    c = _pick(A100x8, AR, 2**22, nccl.RING, nccl.LL128)
    assert c.latency_s == pytest.approx(40.6e-6)
    assert c.bandwidth_Bps == pytest.approx(220.8 * GB * 8 / 14)
    one_per_node = nccl.Communicator(2, 2, 50e9, nccl.NVLINK, 8.0)  # ppn < 2: x 0.7
    bw = _pick(one_per_node, AR, 2**22, nccl.RING, nccl.LL128).bandwidth_Bps
    assert bw == pytest.approx(min(0.7 * 50, 2 * 20) * GB * 2 / 2)


def test_ring_simple_closed_form():
    """Ring Simple: baseLat 8.4 + 14 x 3.4 us; the whole bus."""
    c = _pick(A100x8, AR, 2**30, nccl.RING, nccl.SIMPLE)
    assert c.latency_s == pytest.approx(56.0e-6)
    assert c.time_s == pytest.approx(56.0e-6 + 2**30 * 14 / 8 / (240 * GB))


@pytest.mark.parametrize(
    "proto,lat_us,bus_GBps",
    [
        # tree = min(0.92 x 240, 12 x perChMaxTree 24) = 220.8; LL / 3.8; LL128 x 7/9 (one node)
        (nccl.LL, 6.8 + 2 * 7 * 0.6, 220.8 / 3.8),
        (nccl.LL128, 14.0 + 2 * 7 * 1.25, 220.8 * 7 / 9),
        (nccl.SIMPLE, 0.0 + 2 * 7 * 28.0, 220.8),
    ],
)
def test_tree_closed_form(proto, lat_us, bus_GBps):
    """Tree all-reduce on one server: latency baseLat + 2 (n/N - 1) intraLat; algorithm
    bandwidth half the bus, times treeCorrectionFactor at log2(B / 64) (1.0 from 2^29 B: index
    23 is past the table)."""
    nbytes = 2**30
    c = _pick(A100x8, AR, nbytes, nccl.TREE, proto)
    assert c.latency_s == pytest.approx(lat_us * 1e-6)
    assert c.bandwidth_Bps == pytest.approx(bus_GBps * GB * 0.5)
    # 4 KiB: log2(4096 / 64) = 6 -> LL 0.7, LL128 0.8, Simple 0.9
    small = _pick(A100x8, AR, 4096, nccl.TREE, proto)
    factor = {nccl.LL: 0.7, nccl.LL128: 0.8, nccl.SIMPLE: 0.9}[proto]
    assert small.bandwidth_Bps == pytest.approx(bus_GBps * GB * 0.5 * factor)


def test_tree_is_all_reduce_only():
    assert {c.algorithm for c in nccl.candidates(A100x8, AG, 2**20)} == {nccl.RING}


def test_nvls_closed_form_and_only_where_the_hardware_has_it():
    """NVLS (sm90, one server): latency hwLat NVLink NVLS 23 us, algorithm bandwidth 5/6 of the
    bus; absent without nvls or before Hopper."""
    h100 = nccl.Communicator(8, 1, 370.8e9, nccl.NVLINK, 9.0, nvls=True)
    c = _pick(h100, AR, 2**30, nccl.NVLS, nccl.SIMPLE)
    assert c.latency_s == pytest.approx(23e-6)
    assert c.bandwidth_Bps == pytest.approx(370.8 * GB * 5 / 6)
    assert nccl.choose(h100, AR, 2**30).algorithm == nccl.NVLS
    off = nccl.Communicator(8, 1, 370.8e9, nccl.NVLINK, 9.0)
    assert nccl.NVLS not in {c.algorithm for c in nccl.candidates(off, AR, 2**30)}


def test_ll128_is_off_on_pcie():
    """tuning.cc enables LL128 only on NVLink paths (typeIntra <= PATH_NVB)."""
    pcie = nccl.Communicator(2, 1, 12.5e9, nccl.PCI, 7.0)
    assert nccl.LL128 not in {c.protocol for c in nccl.candidates(pcie, AR, 2**20)}
    simple = _pick(pcie, AR, 2**20, nccl.RING, nccl.SIMPLE)
    assert simple.latency_s == pytest.approx((8.4 + 2 * 5.7) * 1e-6)  # PCI hwLat 5.7


def test_across_servers_ring_latency_has_network_steps_and_the_plateau():
    """16 H100 on 2 servers, ring Simple all-reduce: nsteps 30, nInterSteps 2N = 4 at NET
    hwLat 14 us, the other 26 at max(NVLink 3.4, 3 x net overhead 1.0) us, baseLat 8.4; then
    the ring plateau x1.4 (sm80+) once B / (nCh n) >= 64."""
    comm = nccl.Communicator(16, 2, 100e9, nccl.NVLINK, 9.0)
    lat_us = 8.4 + 26 * 3.4 + 4 * 14.0
    assert _pick(comm, AR, 2**30, nccl.RING, nccl.SIMPLE).latency_s == pytest.approx(
        1.4 * lat_us * 1e-6
    )
    assert _pick(comm, AR, 64, nccl.RING, nccl.SIMPLE).latency_s == pytest.approx(lat_us * 1e-6)


def test_choice_by_size_on_8_a100():
    """NCCL's least-time choice: LL up to ~1.2 MB, LL128 up to ~24 MB, Simple beyond (hand
    crossovers: 15 + B/34.3 = 40.6 + B/126.2 -> B = 1.2 MB; 40.6 + B/126.2 = 56 + B/137.1 ->
    B = 24 MB, B in kB and bandwidths in GB/s)."""
    picks = {b: nccl.choose(A100x8, AR, b) for b in (8, 2**20, 2**21, 2**24, 2**25, 2**30)}
    assert [(c.algorithm, c.protocol) for c in picks.values()] == [
        (nccl.RING, nccl.LL),
        (nccl.RING, nccl.LL),
        (nccl.RING, nccl.LL128),
        (nccl.RING, nccl.LL128),
        (nccl.RING, nccl.SIMPLE),
        (nccl.RING, nccl.SIMPLE),
    ]


def test_the_engine_times_a_preset_collective_by_nccls_choice():
    """dgx-a100-40gb, 8 GPUs: the plan's bus bandwidth is the ring's 240 GB/s, and the
    collective's time is NCCL's choice (ring LL128 at 4 MiB: 40.6 us + 4 MiB / 126.2 GB/s);
    the preset's measured tables dropped (they take precedence)."""
    topo = load_hardware({"base": "dgx-a100-40gb", "collectives": []})
    gpus = tuple(f"gpu{i}" for i in range(8))
    comm = collective_plan(topo, gpus).communicator(AR)
    assert comm is not None and comm.bus_Bps == pytest.approx(240 * GB)
    assert allreduce_time_s(topo, gpus, 2**22) == pytest.approx(
        40.6e-6 + 2**22 / (220.8e9 * 8 / 14)
    )


def test_a_gb300_tp4_group_runs_ring_simple_at_nccls_blackwell_ring_speed():
    """GB300 NVL72, a tensor-parallel group of 4 (gpu0-3, one compute tray): bus 18 NVLinks x
    40.1 GB/s = 721.8 GB/s (SM100_NVLINK_BW), no NVLS, NCCL runs ring Simple for a 256 MiB
    all-gather: (8.4 + 3 x 3.4) us + B / (721.8 GB/s x 4/3), all-reduce (8.4 + 6 x 3.4) us +
    B / (721.8 x 4/6). NCCL 2.27-2.30.7's Blackwell tables give the same ring Simple figures
    (sm100SpeedArrayIntra 90 GB/s x 8 channels, duplicated to 16 x 45 = 720 GB/s; baseLat and
    NVLink hwLat unchanged) and price NVLS below the ring on 4 ranks (NVIDIA/nccl@73cf112 = v2.30.7: search.cc 1063, 1127-1137
    four NVLS channels; tuning.cc 143, 306-323, 376-383: 4 x 90 x 0.74 x 3/4 x 3/4 = 150 GB/s
    all-gather, no bus-to-algorithm conversion)."""
    topo = load_hardware("gb300-nvl72")
    plan = collective_plan(topo, ("gpu0", "gpu1", "gpu2", "gpu3"))
    nbytes = 2**28
    for kind, steps in ((AG, 3), (AR, 6)):
        comm = plan.communicator(kind)
        assert comm is not None and comm.bus_Bps == pytest.approx(18 * 40.1 * GB)
        assert not comm.nvls
        pick = plan.choice(nbytes, kind)
        assert pick is not None and (pick.algorithm, pick.protocol) == (nccl.RING, nccl.SIMPLE)
        hand = (8.4 + steps * 3.4) * 1e-6 + nbytes / (721.8 * GB * 4 / steps)
        assert plan.time_s(nbytes, kind) == pytest.approx(hand)


def test_nccl_send_latency_by_protocol():
    """A send between two A100s: LL up to 16 KiB (NCCL_P2P_LL_THRESHOLD) with baseLat 6.6 +
    hwLat 0.6 us at a third of the rate; Simple above, 8.4 + 3.4 us at the full NCCL rate."""
    topo = load_hardware("dgx-a100-40gb")
    pair = ("gpu0", "gpu1")
    assert sendrecv_time_s(topo, pair, 16384) == pytest.approx(7.2e-6 + 16384 / 80e9)
    assert sendrecv_time_s(topo, pair, 2**20) == pytest.approx(11.8e-6 + 2**20 / 240e9)


def test_measured_table_interpolates_and_takes_precedence():
    """A measured table is piecewise linear in bytes, floored below its first size, the last
    slope beyond; a communicator of its size uses it instead of any model."""
    table = CollectiveTable(AR, 2, (1e3, 1.001e6), (100e-6, 1100e-6))  # 1 ns per byte
    assert table.time_s(10) == 100e-6
    assert table.time_s(0.5e6) == pytest.approx(100e-6 + (0.5e6 - 1e3) * 1e-9)
    assert table.time_s(2e6) == pytest.approx(1100e-6 + 0.999e6 * 1e-9)
    spec = {
        "base": "dgx-a100-40gb",
        "collectives": [
            {
                "kind": "allreduce",
                "ranks": 2,
                "sizes": [1000, 1.001e6],
                "times": ["100 us", "1100 us"],
            }
        ],
    }
    topo = load_hardware(spec)
    assert allreduce_time_s(topo, ("gpu0", "gpu1"), 0.5e6) == pytest.approx(table.time_s(0.5e6))
    assert allreduce_time_s(topo, ("gpu0", "gpu1", "gpu2"), 0.5e6) != pytest.approx(
        table.time_s(0.5e6)
    )


def test_a_table_holds_inside_one_server_only():
    """The DGX A100 tables (measured inside one server) time an 8-GPU communicator of one
    server of a cluster, never a 2-GPU one across two servers (NCCL's model does)."""
    topo = load_hardware("2x-dgx-a100-80gb")
    inside = collective_plan(topo, tuple(f"gpu{i}" for i in range(8)))
    assert inside.time_s(4 * 2**20, AR) == pytest.approx(95.8e-6)  # AR_GPU8 at 4 MiB
    across = collective_plan(topo, ("gpu0", "gpu8"))
    assert across.servers == 2 and across.choice(4 * 2**20, AR) is not None
    assert across.time_s(4 * 2**20, AR) == pytest.approx(across.choice(4 * 2**20, AR).time_s)


def test_reduce_scatter_and_all_gather_are_half_the_measured_all_reduce():
    """Ring all-reduce = reduce-scatter + all-gather of the same buffer: without their own
    tables they take half the measured all-reduce (sim.hardware.comm_tables)."""
    ar = CollectiveTable(AR, 4, (1e6, 2e6), (100e-6, 160e-6), "m")
    own = CollectiveTable("all_gather", 4, (1e6,), (70e-6,))
    rs = find_table((ar,), "reduce_scatter", 4)
    assert rs is not None and rs.time_s(1.5e6) == pytest.approx(65e-6)
    assert find_table((ar, own), "all_gather", 4) is own
    assert find_table((ar,), "all_gather", 4, servers=2) is None


def test_below_a_table_the_model_capped_by_its_first_point():
    """No measurement below a table's smallest size: NCCL's model there, never more than the
    smallest measured time (dgx-a100-40gb, 8 GPUs, AR_GPU8 from 1 MiB: 92.79 us)."""
    topo = load_hardware("dgx-a100-40gb")
    bare = load_hardware({"base": "dgx-a100-40gb", "collectives": []})
    gpus = tuple(f"gpu{i}" for i in range(8))
    for nbytes in (4096, 256 * 1024):
        model = collective_plan(bare, gpus).time_s(nbytes, AR)
        assert collective_plan(topo, gpus).time_s(nbytes, AR) == pytest.approx(min(model, 92.79e-6))


def test_a_bad_table_is_one_clear_error():
    spec = {
        "base": "dgx-a100-40gb",
        "collectives": [{"kind": "allreduce", "ranks": 2, "sizes": [1e6, 1000], "times": [1, 2]}],
    }
    with pytest.raises(InputError) as err:
        load_hardware(spec)
    assert err.value.field.endswith("collectives.0") and "increase" in str(err.value)


def test_cpu_ranks_keep_the_links_model():
    """No compute capability (a calibrated CPU rank): the ring with the links' latencies."""
    topo = load_hardware({"base": "dgx-a100-40gb", "gpu": {"model": "cpu-rank"}})
    plan = collective_plan(topo, ("gpu0", "gpu1"))
    assert plan.nccl_info is None
    assert plan.time_s(1e6, AR) == plan.ring_time_s(1e6, AR)


# ------------------------------------------------ published nccl-tests sweeps (8 GPUs)

ACC = _load_benchmark()
SWEEPS = ACC.sweep_rows()


@pytest.mark.parametrize("source", sorted({r["source"] for r in SWEEPS if r["bytes"] >= 2**28}))
def test_large_all_reduces_within_10_percent_of_nccl_tests(source):
    """>= 256 MiB, the bandwidth regime: NCCL's model within 10 % of every published sweep."""
    rows = [r for r in SWEEPS if r["source"] == source and r["bytes"] >= 2**28]
    assert all(abs(r["nccl_error"]) <= 0.10 for r in rows), rows


@pytest.mark.parametrize("source", sorted({r["source"] for r in SWEEPS if r["bytes"] <= 2**16}))
def test_small_all_reduces_differ_from_nccl_tests_by_a_constant_launch_floor(source):
    """<= 64 KiB, the latency regime, measured with -g 8 (one thread launches the 8 GPUs'
    kernels one after the other): NCCL's latency is below every measurement and the rest is a
    constant (its spread over 8 B - 64 KiB under 5 us): the launches, which NCCL's model leaves
    to the host."""
    gaps = [
        r["measured_us"] - r["nccl_us"]
        for r in SWEEPS
        if r["source"] == source and r["bytes"] <= 2**16
    ]
    assert min(gaps) > 0
    assert max(gaps) - min(gaps) < 5.0, gaps

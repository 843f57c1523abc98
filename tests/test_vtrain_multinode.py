"""vTrain's multi-node rows: the cluster network they ran on (800 Gb/s per 8-GPU node, vTrain's
configs; ``sim/hardware/overlays/vtrain-a100-cluster.yaml``) is chosen for rows over one node,
and what it changes, by hand (NCCL 2.20.3 search.cc / tuning.cc as ``tests/test_cluster.py``
writes them out)."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.vtrain_predict import row_hardware
from sim.comm import nccl
from sim.comm.hierarchical import collective_plan
from sim.events import EventKind
from sim.hardware.loader import load_hardware
from sim.hardware.overlay import with_overlays
from sim.runs.express import express
from sim.runs.vtrain import MULTI_NODE_OVERLAY, read_vtrain

NIC_LAT = 1e-6  # the dgx-a100 presets' network latency per link crossed (kept by the overlay)
HEADER = ("gpus,global_batch,microbatch_size,hidden,heads,layers,seq_len,tensor_parallel,"
          "data_parallel,pipeline_parallel,iteration_time_ms\n")  # fmt: skip


def _rows(tmp_path, *lines: str):
    """A vTrain-layout CSV of synthetic configurations (iteration_time_ms a placeholder 1.0:
    not a measurement)."""
    path = tmp_path / "rows.csv"
    path.write_text(HEADER + "".join(line + ",1.0\n" for line in lines))
    return read_vtrain(path)


def test_rows_over_one_node_carry_the_cluster_overlay(tmp_path):
    """A row over ``node_size`` 8 GPUs runs on the Nx- DGX A100 its GPUs fill, with vTrain's
    cluster overlay; a one-node row has none (its predictions stay as they were)."""
    one, multi = _rows(tmp_path, "8,16,2,2048,16,24,1024,4,1,2", "64,512,4,2048,16,24,1024,4,8,2")
    assert one.hardware_overlay == ""
    assert multi.hardware_overlay == MULTI_NODE_OVERLAY
    item = express(multi)
    assert (item.hardware, item.overlay) == ("8x-dgx-a100-40gb", MULTI_NODE_OVERLAY)
    assert express(one).hardware == "dgx-a100-40gb"


def test_bench_rows_get_the_overlay_only_across_servers():
    """``bench_measured.py --rows``: 800 Gb/s / 8 GPUs = 12.5 GB/s per GPU's link; NCCL's rate
    half its 24 GB/s PCIe gen4 read of one NIC; '' keeps the preset's 8 x HDR 200 Gb/s."""
    assert row_hardware("dgx-a100-40gb", 8, 8, MULTI_NODE_OVERLAY) == "dgx-a100-40gb"
    assert row_hardware("dgx-a100-40gb", 64, 8, "") == "8x-dgx-a100-40gb"
    fabric = load_hardware(row_hardware("dgx-a100-40gb", 64, 8, MULTI_NODE_OVERLAY)).fabric
    assert (fabric.servers, fabric.nic_Bps, fabric.nccl_nic_Bps) == (8, 12.5e9, 12e9)
    model = {"base": "dgx-a100-40gb", "name": "m", "collectives": []}  # --collectives model
    hw = row_hardware(model, 16, 8, MULTI_NODE_OVERLAY)
    assert hw["collectives"] == [] and hw["network"]["nic_bandwidth"] == "12.5 GB/s"


def _cluster(servers: int, overlay: str):
    return load_hardware(with_overlays(f"{servers}x-dgx-a100-40gb", overlay))


@pytest.mark.parametrize("servers", [2, 8])
def test_dp_allreduce_with_t8_is_a_ring_over_half_a_nic(servers):
    """``t = 8``: the data-parallel group is GPU 0 of every node, one ring over the rail.
    NCCL's graph: one NIC at 12 GB/s (speedArrayInter's entry at or below 12; below 25, not
    doubled): bus 12 GB/s, half the preset's 24. The links' ring, by hand:
    ``2 (N - 1)`` steps of ``B / N`` at 12 GB/s, two network links of 1 us per hop."""
    gpus = tuple(f"gpu{8 * n}" for n in range(servers))
    B = 4e8
    times = {}
    for overlay, bus in (("", 24e9), (MULTI_NODE_OVERLAY, 12e9)):
        plan = collective_plan(_cluster(servers, overlay), gpus)
        comm = plan.communicator(EventKind.ALLREDUCE)
        assert (comm.nics, comm.bus_Bps) == (1, pytest.approx(bus))
        want = 2 * (servers - 1) * (2 * NIC_LAT + B / servers / bus)
        assert plan.ring_time_s(B, "allreduce") == pytest.approx(want)
        times[overlay] = plan.time_s(B, "allreduce")
    # NCCL's own choice at 400 MB is bandwidth-bound: close to twice as long
    assert times[MULTI_NODE_OVERLAY] / times[""] == pytest.approx(2.0, rel=0.05)


def test_whole_node_allreduce_bus_is_the_nodes_800_gbps():
    """``t = 1``, all 64 GPUs of 8 nodes: 8 channels of 12 GB/s, 96 GB/s of bus per node
    (4 NICs x 24 GB/s), half the preset's 8 x 24 = 192; NCCL ring/Simple's bandwidth term
    at 1 GiB is ``B / (bus x n / (2 (n - 1)))``."""
    gpus = tuple(f"gpu{i}" for i in range(64))
    comm = collective_plan(_cluster(8, MULTI_NODE_OVERLAY), gpus).communicator(EventKind.ALLREDUCE)
    assert (comm.nics, comm.bus_Bps) == (8, pytest.approx(96e9))
    assert nccl.inter_graph(comm.nics, comm.nic_Bps, 8.0) == (8, 12.0)
    B = 2.0**30
    ring = [c for c in nccl.candidates(comm, "allreduce", B)
            if (c.algorithm, c.protocol) == ("ring", "Simple")][0]  # fmt: skip
    assert ring.bandwidth_Bps == pytest.approx(96e9 * 64 / (2 * 63))

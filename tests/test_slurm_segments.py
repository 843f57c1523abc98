"""Megatron-Bridge's Slurm segments on NVL72 racks (sim.runs.slurm_segments), by hand."""

from __future__ import annotations

from sim.comm.hierarchical import collective_plan
from sim.hardware.loader import load_hardware
from sim.runs.slurm_segments import racks, rank_gpu, segment_nodes, segment_placement


def test_128_gpus_are_two_segments_of_64():
    # 32 trays > 18: largest divisor <= 18 is 16 trays = 64 GPUs per rack (executors.py)
    assert segment_nodes(32) == 16 and segment_nodes(18) == 18 and segment_nodes(36) == 18
    assert [rank_gpu(g, 128) for g in (0, 63, 64, 127)] == [0, 63, 72, 135]
    assert racks(128) == 2 and racks(256) == 4
    # tp 2, 64 replicas, 1 stage: replica r holds ranks 2r, 2r + 1
    rows = segment_placement(128, 1, 64, 2)
    assert rows is not None and rows[0] == [[0, 1]] and rows[31] == [[62, 63]]
    assert rows[32] == [[72, 73]] and rows[63] == [[134, 135]]
    assert segment_placement(144, 1, 144, 1) is None  # 36 trays: 2 full racks, in order


def test_fsdp_group_of_the_segments_is_hierarchical():
    # tensor rank 0 of every replica: 32 GPUs in each rack, so NCCL's per-rack rings and
    # rails (sim.comm.hierarchical), not one ring across an unequal 36 + 28 split
    topo = load_hardware("nvl72x2-gb200")
    rows = segment_placement(128, 1, 64, 2)
    assert rows is not None
    gpus = tuple(f"gpu{row[0][0]}" for row in rows)
    plan = collective_plan(topo, gpus)
    assert plan.servers == 2 and plan.hierarchical

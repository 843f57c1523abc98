"""Placement for every dimension (issue 26 item 5; sim.parallel.domains, sim.point.stages):
expert-parallel groups inside an NVL72 rack, the consecutive assignment where groups divide the
domains, and ``options.placement`` honoured with tensor, context and expert parallelism."""

from __future__ import annotations

import pytest

from sim.config import parse_experiment
from sim.errors import InputError
from sim.hardware.loader import load_hardware
from sim.parallel.domains import domain_groups, unit_replicas
from sim.parallel.groups import tensor_groups
from sim.parallel.layout import ParallelLayout
from sim.point.config import PointConfig
from sim.point.experiment import prepare
from sim.point.stages import stage_layout
from sim.schedules.one_f_one_b import OneFOneB


def test_expert_groups_stay_inside_a_72_gpu_rack():
    # 4 racks of 72 GB200; 4 pipeline stages of 64 replicas, EP 64 (t = 1): every stage's EP
    # group takes 64 GPUs of one rack (72 s .. 72 s + 63), leaving 8 idle, instead of the
    # consecutive 64 s .. 64 s + 63 (stages 1-3 would straddle two racks).
    topo = load_hardware("nvl72x4-gb200")
    unit = unit_replicas(ParallelLayout(pp=4, dp_replicate=64, ep=64))
    groups = domain_groups(topo, 4, 64, 1, unit)
    for s in range(4):
        gpus = [groups[r][s][0] for r in range(64)]
        assert gpus == list(range(72 * s, 72 * s + 64))
        assert {topo.server_of(g) for g in gpus} == {s}
    with pytest.raises(ValueError, match="do not fit the domains"):
        domain_groups(topo, 5, 64, 1, 64)  # a fifth rack's worth


def test_units_that_divide_the_domains_are_the_consecutive_assignment():
    # Where every unit fits a domain exactly, nothing moves (Megatron's rank order):
    # 2 DGX H100, p = 2, 8 replicas of t = 2, EP 4 (units of 4 replicas = 8 GPUs).
    topo = load_hardware("2x-dgx-h100")
    assert domain_groups(topo, 2, 4, 2, 4) == tensor_groups(topo, 2, 4, 2)
    assert domain_groups(topo, 1, 8, 2, 2) == tensor_groups(topo, 1, 8, 2)


def test_unit_of_context_expert_and_shard_groups():
    assert unit_replicas(ParallelLayout(dp_replicate=4, cp=2, ep=4)) == 4
    assert unit_replicas(ParallelLayout(dp_replicate=2, dp_shard=4, cp=2)) == 8
    assert unit_replicas(ParallelLayout(dp_replicate=8, tp=2, ep=8, etp=1)) == 4


def _layout(placement, **sweep):
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx-h100",
            "models": [{"name": "m", "trace": "mixtral-8x7b", "global_batch": 8}],
            "options": {"placement": placement},
        }
    )
    point = PointConfig(
        model="m",
        schedule="1f1b",
        stages=1,
        dp_width=sweep.get("w", 4),
        tensor_parallel=sweep.get("t", 2),
        sequence_parallel=True,
        expert_parallel=sweep.get("ep", 1),
        microbatch_size=1,
        microbatches=2,
        memory_policy="none",
        global_batch=8,
    )
    prep = prepare(exp, "x.yaml")
    return stage_layout(exp, prep.topology, point, OneFOneB(1, 2), "x.yaml")


def test_fixed_placement_is_honoured_with_tensor_and_expert_parallelism():
    # 4 replicas of t = 2, EP 4: the user's [replica][stage][tensor rank] GPUs are used as
    # given (before, automatic groups replaced them silently).
    fixed = [[[6, 7]], [[0, 1]], [[2, 3]], [[4, 5]]]
    lay = _layout(fixed, ep=4)
    assert lay.stage_groups == ((((6, 7)),), (((0, 1)),), (((2, 3)),), (((4, 5)),))
    assert lay.placement == ((6,), (0,), (2,), (4,))
    with pytest.raises(InputError, match="4 rows .* each a list of 2 distinct GPU"):
        _layout([[0], [1], [2], [3]], ep=4)

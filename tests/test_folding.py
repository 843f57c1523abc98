"""MoE parallel folding and expert parallelism with ZeRO-3 / FSDP (issue 26 item 5;
sim.parallel.folding, sim.memory.zero3, sim.memory.fsdp): hand-computed rank groups and shards.

A GPU of a pipeline stage is ``(replica, tensor rank)``, its rank in the stage ``g = k + t r``
(Megatron's ``tp-cp-dp`` order); the experts fold the same ranks as ``g = e + etp (j + ep i)``.
"""

from __future__ import annotations

import pytest

from sim.config import load_experiment
from sim.engine.groups import GroupCollectives
from sim.engine.replicas import StageReplica
from sim.parallel.folding import (
    expert_dp_group,
    expert_group,
    expert_replicate_group,
    expert_shard_group,
    expert_tp_group,
)
from sim.parallel.layout import ParallelLayout
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.simulate import resolve


def test_folded_expert_groups_span_tensor_ranks():
    # t = 4, dp = 2, ep = 4, etp = 1: the 8 ranks g = 0..7 fold as j = g mod 4, i = g // 4.
    # EP group of (0, 0): g 0..3 = the tensor group of replica 0; of (1, 2): g 4..7.
    # Expert-data-parallel group of (0, 1): j = 1, i = 0, 1: g 1 and 5.
    lay = ParallelLayout(dp_replicate=2, tp=4, ep=4, etp=1)
    assert expert_group(lay, 0, 0) == ((0, 0), (0, 1), (0, 2), (0, 3))
    assert expert_group(lay, 1, 2) == ((1, 0), (1, 1), (1, 2), (1, 3))
    assert expert_dp_group(lay, 0, 1) == ((0, 1), (1, 1))
    assert lay.expert_dp == 2 and lay.problems() == []


def test_expert_tensor_parallel_other_than_tensor_parallel():
    # t = 4, dp = 2, ep = 2, etp = 2: g = e + 2 (j + 2 i). (0, 0): ETP g 0, 1; EP g 0, 2;
    # EDP g 0, 4 = (1, 0).
    lay = ParallelLayout(dp_replicate=2, tp=4, ep=2, etp=2)
    assert expert_tp_group(lay, 0, 0) == ((0, 0), (0, 1))
    assert expert_group(lay, 0, 0) == ((0, 0), (0, 2))
    assert expert_dp_group(lay, 0, 0) == ((0, 0), (1, 0))
    # ep x etp must divide t x cp x dp
    bad = ParallelLayout(dp_replicate=2, tp=4, ep=4, etp=4).problems()
    assert bad == [
        "expert_parallel x expert_tensor_parallel = 16 must divide tensor_parallel x "
        "context_parallel x dp = 8"
    ]


def test_unfolded_groups_are_the_consecutive_replicas():
    # etp = t: EP groups of ep consecutive replicas (one tensor rank), EDP the r mod ep ones.
    lay = ParallelLayout(dp_replicate=8, tp=2, ep=4)
    assert expert_group(lay, 5, 1) == ((4, 1), (5, 1), (6, 1), (7, 1))
    assert expert_dp_group(lay, 5, 1) == ((1, 1), (5, 1))


def test_experts_shard_over_the_ep_x_shard_mesh():
    # HSDP 2 x shard 4, EP 2: replica 1 holds experts j = 1; inside its shard group {0..3}
    # the ranks with the same experts are 1 and 3 (its experts' FSDP group), and the same
    # shard sits on 5 in the other replicate group.
    lay = ParallelLayout(dp_replicate=2, dp_shard=4, ep=2)
    assert expert_shard_group(lay, 1) == ((1, 0), (3, 0))
    assert expert_replicate_group(lay, 1) == ((1, 0), (5, 0))


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    # Qwen3-30B-A3B on one DGX B200: t = 2 with sequence parallelism, 4 data-parallel
    # replicas, EP 8 over t x dp (etp 1): the all-to-all group is every GPU.
    path = tmp_path_factory.mktemp("fold") / "fold.yaml"
    path.write_text(
        "name: fold\nhardware: dgx-b200\nframework: megatron-lm\n"
        "models: [{name: q, trace: qwen3-30b-a3b, global_batch: 16}]\n"
        "sweep: {schedule: 1f1b, stages: 1, dp_width: 4, tensor_parallel: 2, "
        "sequence_parallel: true, expert_parallel: 8, expert_tensor_parallel: 1, "
        "microbatch_size: 1, memory_policy: [dist_opt, zero3]}\n"
        "options: {partition: uniform}\n"
    )
    prep = prepare(load_experiment(path), str(path))
    points, _ = expand(prep)
    return prep, {p.memory_policy: p for p in points}


def test_folded_all_to_all_group_in_the_engine(folded):
    prep, points = folded
    res = resolve(prep.exp, points["dist_opt"], prep.topology, prep.traces["q"], shared=prep)
    inp = res.sim_input
    groups = GroupCollectives(None, inp, None)
    rep = StageReplica.of(inp, 1, 0, 1)
    assert sorted(groups.gpus(rep, "ep")) == [f"gpu{g}" for g in range(8)]
    # the routed experts' GEMMs are whole (etp 1): 128 experts / 8 on each GPU
    plan = res.sim_input.plans[0][0]
    assert "routed experts over 1" in plan.notes["choice"]


def test_zero3_partitions_experts_over_their_group(folded):
    # ZeRO-3 with EP: dense parameters 1/4 (the 4 replicas), routed experts 1/1 (the
    # expert-data-parallel group of the folded mesh is one GPU): owned P((1 - f)/4 + f/1).
    prep, points = folded
    res = resolve(prep.exp, points["zero3"], prep.topology, prep.traces["q"], shared=prep)
    plan, cost = res.sim_input.plans[0][0], res.sim_input.costs[0]
    params = res.trace.layers
    total = sum(x.param_bytes for x in params) / 2
    f = cost.expert_grad_share
    assert plan.weight_bytes == pytest.approx(total * ((1 - f) / 4 + f) * 2)

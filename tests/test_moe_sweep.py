"""Expert and context parallelism in the sweep, points, memory policy and outputs: bad input,
skipped combinations with their reason, GPU counts, the distributed optimizer's shards, the
throughput of context-parallel points and winner.yaml round trips."""

from __future__ import annotations

import pytest
import yaml

from sim.config import parse_experiment
from sim.errors import InputError
from sim.plan.point_row import point_row
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.report.outputs import winner_config

BASE = {
    "name": "t",
    "hardware": "dgx-h100",
    "models": [{"name": "q", "trace": "qwen1.5-moe-a2.7b", "global_batch": 16}],
    "training": {"optimizer": "adam", "dtype": "bf16"},
}


def prep_of(tmp_path, sweep: dict, **top):
    data = {**BASE, **top, "sweep": {"microbatch_size": 1, **sweep}}
    file = str(tmp_path / "e.yaml")
    return prepare(parse_experiment(data, file=file), file)


def test_unknown_context_parallel_comm_names_the_field(tmp_path):
    prep = prep_of(tmp_path, {"context_parallel": 2, "context_parallel_comm": "ring"})
    with pytest.raises(InputError) as exc:
        expand(prep)
    assert exc.value.field == "sweep.context_parallel_comm"


def test_bad_routing_names_the_model_field(tmp_path):
    models = [{**BASE["models"][0], "routing": "imbalance:x"}]
    prep = prep_of(tmp_path, {"expert_parallel": 2}, models=models)
    with pytest.raises(InputError) as exc:
        expand(prep)
    assert exc.value.field == "models.0.routing"


def test_invalid_combinations_are_skipped_with_their_reason(tmp_path):
    prep = prep_of(
        tmp_path,
        {
            "schedule": ["1f1b"],
            "stages": 1,
            "dp_width": [2, 4, 8],
            "expert_parallel": [4, 8],
            "ep_overlap": [False, True],
        },
    )
    points, skipped = expand(prep)
    got = {(p.dp_width, p.expert_parallel, p.ep_overlap) for p in points}
    assert got == {(4, 4, False), (8, 4, False)}
    reasons = " | ".join(r for _, r in skipped)
    assert "expert_parallel 4 must divide dp_width x context_parallel = 2" in reasons
    assert "expert_parallel 8 must divide the 60 experts" in reasons
    assert "ep_overlap needs a schedule with OVERLAP_F_B pairs" in reasons


def test_expert_parallel_needs_a_decoder_trace(tmp_path):
    models = [{"name": "g", "trace": "gpt2-1.5b", "global_batch": 16}]
    prep = prep_of(tmp_path, {"stages": 1, "dp_width": 2, "expert_parallel": 2}, models=models)
    with pytest.raises(InputError, match="decoder traces"):
        expand(prep)


def test_context_parallel_uses_its_gpus_and_keeps_samples(tmp_path):
    # stages 1 x dp 2 x cp 4 = 8 GPUs; the step still trains global_batch samples
    prep = prep_of(tmp_path, {"stages": 1, "dp_width": 2, "context_parallel": 4})
    (point,), _ = expand(prep)
    row = point_row(prep, point)[0]
    assert row.microbatches == 8 and not row.error
    assert row.throughput_samples_per_s == pytest.approx(16 / row.iteration_time_s)
    placement = yaml.safe_load(row.placement)  # [replica][stage]: the dp x cp = 8 replicas
    assert sorted(g for rep in placement for g in rep) == list(range(8))
    over = prep_of(tmp_path, {"stages": 2, "dp_width": 2, "context_parallel": 4})
    with pytest.raises(InputError, match="exceeds the 8 GPUs"):
        expand(over)


def test_distributed_optimizer_shards_experts_over_their_group(tmp_path):
    # dp 8, ep 4: dense optimizer state / 8, routed experts' / (8/4) = / 2
    from sim.point.simulate import resolve

    prep = prep_of(
        tmp_path, {"stages": 1, "dp_width": 8, "expert_parallel": 4, "memory_policy": "dist_opt"}
    )
    (point,), _ = expand(prep)
    res = resolve(prep.exp, point, prep.topology, prep.traces["q"])
    plan, cost = res.sim_input.plans[0][0], res.sim_input.costs[0]
    params = sum(x.param_bytes for x in res.trace.layers) / 2
    f = cost.expert_grad_share
    assert 0.5 < f < 1.0
    assert plan.optimizer_bytes == pytest.approx(12 * params * ((1 - f) / 8 + f / 2))
    assert plan.dp_sharded


def test_winner_yaml_keeps_the_parallel_sizes(tmp_path):
    prep = prep_of(
        tmp_path,
        {
            "stages": 1,
            "dp_width": 4,
            "expert_parallel": 4,
            "context_parallel": 2,
            "context_parallel_comm": "all_gather",
        },
    )
    (point,), _ = expand(prep)
    row = point_row(prep, point)[0]
    data = winner_config(prep.exp, str(tmp_path / "e.yaml"), row)
    again = prep_of(tmp_path, {k: v for k, v in data["sweep"].items() if k != "microbatch_size"})
    (same,), _ = expand(again)
    assert same == point

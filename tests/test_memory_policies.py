"""Memory policies: the formulas (memory.md §1, §2) and the grammar, configuration and results."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from sim.config import parse_experiment
from sim.errors import InputError
from sim.memory.per_stage import PerStagePolicy
from sim.memory.recompute import RecomputePolicy
from sim.memory.registry import parse_policy
from sim.plan.point_row import point_row
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.trace.schema import LayerProfile, Trace
from tests.helpers import chain_topology
from tests.policy_helpers import GiB, category_peak, run, tiny_gpt

# ------------------------------------------------------------------ formulas (memory.md §1, §2)


def test_activation_memory_follows_korthikanti_per_policy():
    """1F1B, p=2, m=4: stage s holds p - s stashes; per block 34sbh + 5as^2b (none),
    34sbh (selective, plus one layer's attention core while recomputing), 2sbh (full, plus one
    layer's whole stash while recomputing)."""
    b, s, h, a, L = 2, 128, 64, 4, 4
    trace = tiny_gpt(L, b, h, a, s)
    sbh, core = s * b * h, 5 * a * s * s * b
    block = 34 * sbh + core
    topo = chain_topology(2, memory_bytes=64 * GiB)
    bounds = {"boundaries": [0, 3]}  # stage 0: embedding + 2 blocks; stage 1: 2 blocks + head
    emb, head = trace.layers[0].act_bytes, trace.layers[-1].act_bytes
    expect = {
        "none": (2 * (emb + 2 * block), 1 * (2 * block + head)),
        "recompute:selective": (2 * (emb + 2 * 34 * sbh) + core, 2 * 34 * sbh + head + core),
    }
    for policy, (s0, s1) in expect.items():
        _, _, log = run(trace, topo, policy, **bounds)
        assert category_peak(log, "gpu0", "activations") == pytest.approx(s0), policy
        assert category_peak(log, "gpu1", "activations") == pytest.approx(s1), policy
    res, _, log = run(trace, topo, "recompute", **bounds)
    plan0 = res.sim_input.plans[0][0]
    # only blocks are checkpointed (Megatron, DeepSpeed's GPTModelPipe, the torch replay): the
    # embedding keeps its stash, each block its 2sbh input
    assert plan0.resident_act_bytes == pytest.approx(emb + 2 * 2 * sbh)
    assert plan0.rebuild_bytes == pytest.approx(block - 2 * sbh)
    assert category_peak(log, "gpu0", "activations") == pytest.approx(
        2 * (emb + 2 * 2 * sbh) + block - 2 * sbh
    )
    full = res.sim_input.plans[0][1]  # the head is not re-run, only its stage's 2 blocks
    assert full.recompute_s == pytest.approx(sum(x.fwd_s for x in trace.layers[3:5]))
    assert full.recompute_regions == 2


def test_pipemare_memory_is_one_weight_copy_and_2_p_minus_s_plus_2_stashes():
    """PipeMare (schedules.md §2.5): one weight copy (no stashed versions) and 2(p-s)+2 stashes
    in flight on stage s (sim/schedules/pipemare.py), by hand for p=2, m=8 (8 micro-batches per
    iteration, several iterations): stage 0 holds 6, stage 1 holds 4. PipeDream, for contrast,
    holds p-s weight versions and p-s stashes."""
    trace = tiny_gpt()
    topo = chain_topology(2, memory_bytes=64 * GiB)
    bounds = {"boundaries": [0, 3]}
    res, _, log = run(trace, topo, "none", schedule="pipemare", m=8, **bounds)
    edges = [0, 3, len(trace.layers)]
    for s, stashes in enumerate((6, 4)):
        layers = trace.layers[edges[s] : edges[s + 1]]
        act = sum(x.act_bytes for x in layers)
        weights = sum(x.param_bytes for x in layers)
        assert category_peak(log, f"gpu{s}", "activations") == pytest.approx(stashes * act)
        assert res.sim_input.plans[0][s].weight_bytes == pytest.approx(weights)
    res, _, _ = run(trace, topo, "none", schedule="pipedream", m=8, **bounds)
    stage0 = sum(x.param_bytes for x in trace.layers[:3])
    assert res.sim_input.plans[0][0].weight_bytes == pytest.approx(2 * stage0)


def test_selective_recompute_time_is_the_attention_core_share():
    trace = tiny_gpt()
    res, _, _ = run(trace, chain_topology(2, memory_bytes=64 * GiB), "recompute:selective")
    b, s, h = 2, 128, 64
    share = 4 * b * s * s * h / (24 * b * s * h * h + 4 * b * s * s * h)
    layers = trace.layers[res.boundaries[0] : res.boundaries[1]]
    blocks = [x for x in layers if x.name.startswith("block")]
    assert res.sim_input.plans[0][0].recompute_s == pytest.approx(
        sum(x.fwd_s for x in blocks) * share
    )


def test_selective_without_attention_fields_does_nothing_and_says_so():
    layers = tuple(LayerProfile(f"l{i}", 1e-3, 2e-3, 1e6, 1e8, 1e6) for i in range(4))
    trace = Trace("plain", layers, 1, "fp16", "x", {"source": "test"})
    res, _, _ = run(trace, chain_topology(2, memory_bytes=64 * GiB), "recompute:selective")
    plan = res.sim_input.plans[0][0]
    assert plan.recompute_s == 0 and plan.resident_act_bytes == plan.act_bytes
    assert "does nothing" in plan.notes["warning"]


def test_model_state_bytes_per_policy():
    """none 16 B/param on the GPU; ZeRO-Offload 2 + 2 on the GPU (the model is smaller than one
    reduce bucket) and 4 + 2 + 4 + 8 on the host (DeepSpeed's buffers); gradients go down in
    fp32 at the step's micro-batch (4 B/param) and in 16 bits before it (2 B/param), i.e.
    (3 * 2 + 4) / 4 = 2.5 B/param per B with m = 4, and 2 B/param come up after the step (the
    16-bit staging copy); chunks 16 B/param (14 with one micro-batch: the gradient reuses the
    parameter chunk, PatrickStar)."""
    trace = tiny_gpt()
    topo = chain_topology(2, memory_bytes=64 * GiB)
    res, _, log = run(trace, topo, "zero_offload")
    for s, plan in enumerate(res.sim_input.plans[0]):
        psi = (
            sum(
                x.param_bytes
                for x in trace.layers[res.boundaries[s] :][
                    : len(trace.layers) if s else res.boundaries[1]
                ]
            )
            / 2
        )
        assert plan.weight_bytes + plan.grad_bytes == pytest.approx(4 * psi)
        # DeepSpeed on the host: fp32 master (pinned: torch 2's power-of-two block), 16-bit
        # staging copy, fp32 gradients, Adam moments (sim.memory.deepspeed)
        pinned_master = 2 ** math.ceil(math.log2(4 * psi))
        assert plan.optimizer_bytes == 0
        assert plan.host_bytes == pytest.approx(pinned_master + (2 + 4 + 8) * psi)
        moved = sum(t.nbytes for t in plan.step_transfers_before + plan.step_transfers_after)
        assert moved == pytest.approx(2 * psi) and plan.writeback_bytes == pytest.approx(2.5 * psi)
        # CPU Adam and the unscale pass, 8 of its 28 host bytes per parameter (zero_offload)
        rate = topo.hosts[0].adam_params_per_s
        assert plan.host_optimizer_s == pytest.approx(psi / rate * (1 + 8 / 28))
    assert any(e.kind == "host_optimizer" for e in log.events)
    for m, per_param in ((4, 16), (1, 14)):
        res, _, _ = run(trace, topo, "chunked", m=m, schedule="gpipe")
        plan = res.sim_input.plans[0][0]
        psi = (plan.weight_bytes + plan.grad_bytes) / (per_param - 12)
        assert plan.static_gpu_bytes == pytest.approx(per_param * psi)


# ------------------------------------------------------------------ grammar, config, results


@pytest.mark.parametrize(
    "spec,cls",
    [
        ("recompute:full:4", "RecomputePolicy"),
        ("recompute:selective", "RecomputePolicy"),
        ("cpu_swap:0.5", "CpuSwapPolicy"),
        ("d2d_swap:weights", "D2DSwapPolicy"),
        ("chunked:32", "ChunkedPolicy"),
        ("none|auto", "PerStagePolicy"),
    ],
)
def test_policy_specs(spec, cls):
    pol = parse_policy(spec)
    assert type(pol).__name__ == cls and pol.text == spec
    assert parse_policy(spec) is pol  # parsed once: every point with the string shares it


def test_parse_policy_gives_the_typed_fields_the_string_says():
    plain = parse_policy("recompute")
    assert isinstance(plain, RecomputePolicy) and (plain.text, plain.mode, plain.layers) == (
        "recompute",
        "full",
        None,
    )
    full = parse_policy("recompute:full:4")
    assert (full.name, full.mode, full.layers, full.text) == (
        "recompute",
        "full",
        4,
        "recompute:full:4",
    )
    assert parse_policy("recompute:selective").mode == "selective"
    assert parse_policy("cpu_swap").fraction == 1.0 and parse_policy("cpu_swap:0.5").fraction == 0.5
    per = parse_policy("none|recompute:full:2|cpu_swap:0.25|none")
    assert isinstance(per, PerStagePolicy)
    assert {p.name for p in per.parts()} == {"none", "recompute", "cpu_swap"}
    assert [per.for_stage(s, 4).text for s in range(4)] == [
        "none",
        "recompute:full:2",
        "cpu_swap:0.25",
        "none",
    ]
    assert per.for_stage(2, 4).fraction == 0.25
    with pytest.raises(ValueError, match="names 4 stages, not 2"):
        per.for_stage(0, 2)
    with pytest.raises(KeyError, match="unknown memory policy 'swap'"):
        parse_policy("swap")
    with pytest.raises(ValueError, match="fraction"):
        parse_policy("cpu_swap:2")


@pytest.mark.parametrize(
    "bad",
    ["recompute:half", "recompute:full:0", "cpu_swap:2", "chunked:big", "none:1", "swap", "auto:x"],
)
def test_bad_policy_is_an_input_error_naming_the_field(bad):
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "dgx1-v100-32gb",
            "models": [{"name": "g", "trace": "gpt2-1b"}],
            "sweep": {"memory_policy": ["none", bad]},
        }
    )
    with pytest.raises(InputError) as e:
        expand(prepare(exp, "experiments/t.yaml"))
    assert e.value.field == "sweep.memory_policy.1"


def test_stage_policies_option():
    data = {
        "name": "t",
        "hardware": "dgx1-v100-32gb",
        "models": [{"name": "g", "trace": "gpt2-1b"}],
        "training": {"global_batch": 8},
        "sweep": {"stages": [2, 4]},
        "options": {"stage_policies": ["recompute:full:2", "cpu_swap", "none", "none"]},
    }
    prep = prepare(parse_experiment(data), "experiments/t.yaml")
    points, skipped = expand(prep)
    assert [(pt.stages, pt.memory_policy) for pt in points] == [
        (4, "recompute:full:2|cpu_swap|none|none")
    ]
    assert "names 4 stages" in skipped[0][1]
    row = point_row(prep, points[0])[0]
    notes = json.loads(row["policy_notes"])
    # stage 0's first two layers are the embedding and one block: only the block is
    # checkpointed (sim.memory.recompute)
    assert notes["s0"]["choice"] == "full:1" and notes["s1"]["choice"].startswith("cpu_swap")
    data["options"]["stage_policies"][1] = "cpu_swap:7"
    with pytest.raises(InputError) as e:
        expand(prepare(parse_experiment(data), "experiments/t.yaml"))
    assert e.value.field == "options.stage_policies.1"
    data["sweep"]["memory_policy"] = "none"
    with pytest.raises(InputError, match="either"):
        expand(prepare(parse_experiment(data), "experiments/t.yaml"))


def test_results_row_has_policy_columns():
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "dgx1-v100-32gb",
            "models": [{"name": "g", "trace": "gpt2-1b"}],
            "training": {"global_batch": 8},
            "sweep": {"stages": 4, "memory_policy": "cpu_swap"},
        }
    )
    prep = prepare(exp, "experiments/t.yaml")
    row = point_row(prep, expand(prep)[0][0])[0]
    h, layers, vocab, seq = 2048, 20, 50257, 1024  # traces/gpt2-1b.yaml
    # blocks 12h^2 + 13h (Narayanan et al. SC'21), token + position embeddings, final
    # LayerNorm (2h) and an untied LM head (Vh)
    params = layers * (12 * h * h + 13 * h) + (vocab + seq) * h + 2 * h + vocab * h
    assert row["memory_policy"] == "cpu_swap" and row["parameters"] == params
    assert row["swap_bytes"] > 0 and row["recompute_s"] == 0
    assert json.loads(row["policy_notes"])["s0"]["target"] == "cpu0"


def test_memory_summary_table_and_plots(tmp_path):
    from sim.report.memory_summary import LARGEST, memory_summary, write_memory_summary

    rows = []
    for model, params in (("small", 1e9), ("big", 2e10)):
        for pol, tput in (("none", 10.0), ("auto", 9.0)):
            fits = not (model == "big" and pol == "none")
            rows.append(
                dict(
                    model=model,
                    parameters=params,
                    memory_policy=pol,
                    fits=fits,
                    throughput_samples_per_s=tput / (1 + (model == "big")),
                )
            )
    df = pd.DataFrame(rows)
    table = memory_summary(df)
    assert list(table.index) == ["small", "big", LARGEST]
    assert table.loc["small", "fastest policy"] == "none"
    assert table.loc["big", "fastest policy"] == "auto"
    assert table.loc[LARGEST, "none"] == "small" and table.loc[LARGEST, "auto"] == "big"
    _, written = write_memory_summary(df, tmp_path)
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)

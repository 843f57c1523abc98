"""The mechanisms that express more measured rows (issue 26): hybrid Mamba-2 patterns, uneven
pipeline stages, latent MoE, published model shapes, distributed-optimizer instances, the
allgather token dispatcher, and the settings run as explicit approximations. One hand-computed
case or closed form each."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.decoder_shape import DecoderShape
from sim.compute.moe import moe_act_bytes, moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.compute.routing import Routing, parse_routing
from sim.memory.dist_opt import DistOptPolicy
from sim.memory.registry import parse_policy
from sim.memory.states import StateBytes
from sim.parallel.expert import expert_plan
from sim.runs.express import Expressed, express, policy
from sim.runs.hybrid_pattern import mamba_sizes, parse_pattern, stage_layout
from sim.runs.megatron_args import read_megatron
from sim.runs.model_shapes import NEMOTRON_VOCAB, shape_assumptions, shape_flags
from sim.runs.pipeline_layout import layout_boundaries

GPT = {
    "num-layers": 12, "hidden-size": 512, "num-attention-heads": 8, "seq-length": 1024,
    "micro-batch-size": 4, "global-batch-size": 32, "bf16": True, "vocab-size": 50257,
    "tensor-model-parallel-size": 1, "pipeline-model-parallel-size": 1,
}  # fmt: skip


def _run(**flags):
    return read_megatron(GPT | flags, name="t", source="<test>", num_gpus=8, gpu="A100-SXM-80GB")


def test_hybrid_pattern_segments_and_mtp_depths():
    p = parse_pattern("M-M*|M-E-/*E/*E")
    assert (p.layers, p.segments, p.mtp) == ("M-M*M-E-", ("M-M*", "M-E-"), ("*E", "*E"))
    assert stage_layout(p) == "Etttt|ttttmmL"  # E + 4 | 4 + two MTP depths + loss
    assert layout_boundaries(stage_layout(p), 8, 2, 2) == (0, 5)
    # Megatron's defaults: heads = 2 h / head_dim = 2 * 1024 / 64
    assert mamba_sizes(1024, None, None, None, None) == (32, 64, 128, 8)
    with pytest.raises(ValueError, match="symbols"):
        parse_pattern("MXM")


def test_hybrid_run_is_a_decoder_with_the_pattern_and_mamba():
    pattern = "M-M-M*-M-|M-M*-M-M-"  # two stages of 9
    run = _run(**{"hybrid-layer-pattern": pattern, "num-layers": 99, "squared-relu": True,
                  "pipeline-model-parallel-size": 2, "spec": "hybrid"})  # fmt: skip
    ex = express(run)
    assert isinstance(ex, Expressed), ex
    shape = ex.shape
    assert isinstance(shape, DecoderShape)
    assert shape.layers == 18 and shape.pattern == pattern.replace("|", "")
    assert shape.mamba is not None and (shape.mamba.heads, shape.mamba.head_dim) == (16, 64)
    assert (shape.mamba.state, shape.mamba.groups, shape.mamba.chunk) == (128, 8, 128)
    assert not shape.gated_mlp and ex.boundaries == (0, 10)  # embedding + 9 | 9 + head
    assert any(a.startswith("approximated: squared-ReLU") for a in ex.approximations)


def test_uneven_first_and_last_stages():
    run = _run(**{"pipeline-model-parallel-size": 4, "decoder-first-pipeline-num-layers": 2,
                  "decoder-last-pipeline-num-layers": 2})  # fmt: skip
    assert run.pipeline_layout == "Ett|tttt|tttt|ttL"
    ex = express(run)
    assert isinstance(ex, Expressed), ex
    assert ex.boundaries == (0, 3, 7, 11)  # embedding + 2, 4, 4, 2 + head
    odd = _run(**{"pipeline-model-parallel-size": 4, "decoder-first-pipeline-num-layers": 1})
    assert not isinstance(express(odd), Expressed)  # 11 layers over 3 stages: not whole


def test_latent_moe_widths_flops_and_dispatch_bytes():
    h, lat, e, k, f = 64, 16, 4, 2, 32
    moe = MoEShape(h, e, k, f, gated=False, latent=lat)
    # experts at the latent width, the projections 2 h l in the dense part
    assert moe.expert_params() == 2 * f * lat and moe.latent_params() == 2 * h * lat
    t = 10
    flops = 2 * t * h * e + 2 * t * k * lat * 2 * f + 4 * t * h * lat
    assert moe.fwd_flops(t) == pytest.approx(flops)
    names = [x.name for x in moe_fwd(moe, t, t, (float(t * k / e),) * e, 2)]
    assert names.index("latent_down") < names.index("permute")
    assert names[-2] == "latent_up"
    plan = expert_plan(moe, Routing(), r=8, ep=2, tp=1, d=2)
    # rank 0 sends rank 1 half of its 8*2 rows at l*d bytes each (+4 B probabilities)
    assert plan.dispatch[0][1] == pytest.approx(8 * 2 / 2 * (lat * 2 + 4))
    plain = replace(moe, latent=0)
    assert moe_act_bytes(moe, 8, 8, (4.0,) * 4, 2) - moe_act_bytes(plain, 8, 8, (4.0,) * 4, 2) == (
        pytest.approx(16 * (lat - h) * 2 + 8 * lat * 2)
    )


def test_published_nemotron_shapes_fill_empty_rows():
    nano = shape_flags("Nemotron_3_Nano")
    assert nano is not None and len(nano["hybrid-layer-pattern"]) == nano["num-layers"] == 52
    sup = shape_flags("Nemotron_3_Super")
    assert sup is not None and len(sup["hybrid-layer-pattern"]) == 88
    assert sup["moe-latent-size"] == 1024 and sup["vocab-size"] == NEMOTRON_VOCAB
    ultra = shape_flags("Nemotron_3_Ultra")  # Megatron-LM's ModelOpt arguments of the model
    assert ultra is not None and len(ultra["hybrid-layer-pattern"]) == ultra["num-layers"] == 108
    assert [ultra["hybrid-layer-pattern"].count(c) for c in "ME*"] == [48, 48, 12]
    assert ultra["moe-latent-size"] == 2048 and ultra["hidden-size"] == 8192
    assert len(shape_assumptions("Nemotron_3_Ultra")) == 1 and not shape_assumptions("Nano")
    run = read_megatron(sup | {"seq-length": 8192, "micro-batch-size": 1,
                               "global-batch-size": 512, "bf16": True,
                               "expert-model-parallel-size": 64,
                               "moe-token-dispatcher-type": "alltoall"},
                        name="s", source="<test>", num_gpus=64, gpu="B200")  # fmt: skip
    ex = express(run)
    assert isinstance(ex, Expressed), ex
    assert ex.shape.moe.latent == 1024 and ex.shape.pattern.count("M") == 40


def test_distributed_optimizer_instances_shard_inside_an_instance():
    run = _run(**{"use-distributed-optimizer": True, "tensor-model-parallel-size": 2,
                  "num-distributed-optimizer-instances": 2})  # fmt: skip
    assert run.optimizer_instances == 2 and policy(run)[0] == "dist_opt:instances=2"
    ex = express(run)
    assert isinstance(ex, Expressed)
    assert any("instances 2" in a for a in ex.approximations)
    pol = parse_policy("dist_opt:instances=2:recompute")
    assert isinstance(pol, DistOptPolicy) and pol.instances == 2 and pol.recompute
    # 4 bytes weights+grads, 12 optimizer, w = 8 over 2 instances: 12 / 4 per rank
    assert pol.min_state_bytes_per_param(StateBytes(2, 2, 12), 8, 1, 2) == pytest.approx(4 + 3)
    assert DistOptPolicy().min_state_bytes_per_param(StateBytes(2, 2, 12), 8, 1, 2) == 4 + 1.5
    with pytest.raises(ValueError, match="positive integer"):
        parse_policy("dist_opt:instances=x")


def test_allgather_dispatcher_sends_every_token_to_every_rank():
    moe = MoEShape(64, 8, 2, 32)
    assert parse_routing("balanced+allgather").dispatcher == "allgather"
    plan = expert_plan(moe, Routing(dispatcher="allgather"), r=10, ep=4, tp=1, d=2)
    a2a = expert_plan(moe, Routing(), r=10, ep=4, tp=1, d=2)
    assert plan.rows == a2a.rows  # the experts compute the same rows
    assert plan.dispatch[0][1] == 10 * (64 * 2 + 8 * 5)  # rows + probabilities + map
    assert plan.combine[2][1] == 10 * 64 * 2 and plan.dispatch[3][3] == 0
    moe_run = _run(**{"num-experts": 8, "expert-model-parallel-size": 8, "moe-router-topk": 2,
                      "moe-token-dispatcher-type": "allgather"})  # fmt: skip
    ex = express(moe_run)
    assert isinstance(ex, Expressed) and ex.point["routing"] == "balanced+allgather"


def test_settings_run_as_approximations_say_what_they_change():
    run = _run(**{"use-packed-sequence": True, "cpu-offloading": True,
                  "cpu-offloading-num-layers": 4, "context-parallel-size": 4,
                  "cp-comm-type": "a2a+p2p", "hierarchical-context-parallel-sizes": "2 2",
                  "swiglu": True})  # fmt: skip
    ex = express(run)
    assert isinstance(ex, Expressed), ex
    text = " ".join(ex.approximations)
    for part in ("packed sequences", "activation offloading", "a2a+p2p"):
        assert part in text
    assert run.layout.cp_comm == "p2p"


def test_param_gather_with_step_alone_is_ignored():
    run = _run(**{"use-distributed-optimizer": True, "overlap-grad-reduce": True,
                  "overlap-param-gather-with-optimizer-step": True})  # fmt: skip
    note = next(a for a in run.args if a.name == "overlap-param-gather-with-optimizer-step")
    assert note.status == "ignored" and "synchronously" in note.reason
    assert isinstance(express(run), Expressed)


def test_bridge_lora_rows_train_rank_16_adapters_on_qkv():
    import pandas as pd

    from sim.runs.measured_csv import row_run

    row = pd.Series({
        "model": "LLAMA3_70B", "family": "dense", "layers": 80, "hidden": 8192,
        "ffn_hidden": 28672, "heads": 64, "kv_heads": 8, "vocab": 128256, "seq_len": 4096,
        "gpu": "GB200", "num_gpus": 8, "tp": 1, "pp": 4, "cp": 1, "gbs": 32, "mbs": 1,
        "precision": "BF16", "task": "lora", "recompute": "none",
        "framework": "Megatron-Bridge/Megatron-Core",
    })  # fmt: skip
    run = row_run(row, source="<test>", recipe={})
    ex = express(run)
    assert isinstance(ex, Expressed), ex
    assert ex.shape.lora is not None and ex.shape.lora.rank == 16
    assert ex.shape.lora.targets == ("q_proj", "k_proj", "v_proj")
    assert any("linear_qkv" in a for a in ex.approximations)


def test_muon_runs_with_momentum_state():
    run = _run(**{"optimizer": "muon", "use-distributed-optimizer": True})
    assert run.optimizer == "sgd_momentum"
    ex = express(run)
    assert isinstance(ex, Expressed) and ex.optimizer == "sgd_momentum"
    assert any("Newton-Schulz" in a for a in ex.approximations)
    from sim.memory.states import state_bytes

    # mixed precision: fp32 master + one momentum = 8 B of optimizer state (Adam: 12)
    assert state_bytes("bf16", "sgd_momentum").optimizer == 8


def test_fsdp_with_fp8_parameters_keeps_a_quantized_shard():
    """Megatron-FSDP over 8 ranks with FP8 parameters (per-tensor FP8 on Blackwell: 1 byte):
    each rank holds 1/8 of the quantized weights, so the weights' peak is positive and below
    the 16-bit shard's (it used to subtract a whole model's worth of bytes)."""
    from sim.runs.predict import Predictor

    flags = {"swiglu": True, "use-megatron-fsdp": True, "fp8-format": "hybrid",
             "fp8-recipe": "tensorwise", "fp8-param-gather": True, "vocab-size": 1024,
             "global-batch-size": 8, "micro-batch-size": 1}  # fmt: skip
    run = read_megatron(GPT | flags, name="f", source="<test>", num_gpus=8, gpu="B200")
    ex = express(run)
    assert isinstance(ex, Expressed), ex
    pred = Predictor().predict(ex)
    assert pred.row is not None and not pred.row.error.startswith("internal"), pred.row.error
    assert pred.row.peak_weights_bytes is not None and pred.row.peak_weights_bytes > 0

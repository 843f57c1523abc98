"""Model FLOPs, TFLOP/s per GPU and MFU (issue 30 item 3), and the trace's origin in every row.

The FLOP counts are Megatron-LM's ``num_floating_point_operations`` (sim.compute.model_flops),
checked against the terms written out by hand for known shapes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import sim.api
from sim.cli import app
from sim.compute.model_flops import model_flops
from sim.trace.origin import trace_origin

ROOT = Path(__file__).resolve().parent.parent


def _llama(**kw):
    shape = {"kind": "decoder", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
             "seq_len": 8192, "vocab": 128256, "ffn_hidden": 28672}  # fmt: skip
    return {**shape, **kw}


def test_llama3_70b_by_hand():
    """6 x (GEMMs per token): qkv h(q + 2kv), scores q s / 2 x 2, out q h, SwiGLU 3 h f, logits."""
    h, layers, s, f, v, q, kv = 8192, 80, 8192, 28672, 128256, 8192, 1024
    per_token = 6 * (layers * (h * (q + 2 * kv) + q * s + q * h + 3 * h * f) + h * v)
    assert model_flops(_llama(), 16) == pytest.approx(per_token * 16 * s, rel=1e-12)


def test_mixtral_counts_top_k_experts_only():
    moe = {"hidden": 4096, "experts": 8, "top_k": 2, "expert_ffn": 14336}
    dense = _llama(layers=32, hidden=4096, heads=32, ffn_hidden=14336, seq_len=4096, vocab=32000)
    mixtral = {**dense, "moe": moe}
    extra = 6 * 32 * 4096 * 3 * 14336 * (2 - 1)  # one more expert per token, per layer
    assert model_flops(mixtral, 1) - model_flops(dense, 1) == pytest.approx(extra * 4096)
    more = {**mixtral, "moe": {**moe, "experts": 64}}
    assert model_flops(more, 1) == model_flops(mixtral, 1)  # routed-to experts only


def test_bert_counts_the_whole_score_matrix():
    shape = {"kind": "gpt", "layers": 24, "hidden": 1024, "heads": 16, "seq_len": 512,
             "vocab": 30522}  # fmt: skip
    diff = model_flops({**shape, "kind": "bert"}, 2) - model_flops(shape, 2)
    assert diff == pytest.approx(6 * 24 * 1024 * 512 * 2 * 512)  # q s per token and layer


def test_deepseek_mla_is_megatrons_branch():
    """The MLA terms of Megatron's multi_latent_attention branch, written out."""
    h, heads, s = 7168, 128, 4096
    mla = {"q_lora": 1536, "kv_lora": 512, "d_nope": 128, "d_rope": 64, "d_v": 128}
    shape = _llama(layers=1, hidden=h, heads=heads, kv_heads=None, seq_len=s, vocab=1,
                   ffn_hidden=18432, mla=mla)  # fmt: skip
    attn = (
        1536 * (h + heads * 192 + 1)
        + 512 * (h + heads * 256 + 1)
        + h * 64
        + heads * 128 * h
        + s * heads * 192 / 2
        + s * heads * 128 / 2
    )
    assert model_flops(shape, 1) == pytest.approx(6 * (attn + 3 * h * 18432 + h) * s)


def test_unknown_shapes_have_none():
    assert model_flops({"kind": "gnmt"}, 4) is None
    assert model_flops({"kind": "gpt", "hidden": 8}, 4) is None


def test_rows_carry_tflops_mfu_and_origin():
    plan = sim.api.plan(ROOT / "experiments" / "dgx1.yaml")
    win = plan.winners["gpt2-1.5b"]
    assert win.trace_origin == "analytic"
    gpus = win.stages * win.dp_width * win.tensor_parallel
    assert win.flops_per_s_per_gpu == pytest.approx(
        win.iteration_flops / win.iteration_time_s / gpus
    )
    assert win.mfu == pytest.approx(win.flops_per_s_per_gpu / 125e12)  # V100 fp16 datasheet
    gnmt = plan.winners["gnmt16"]
    assert gnmt.trace_origin == "measured" and gnmt.mfu is None
    assert all(r.trace_origin for r in plan.rows)


def test_a_roofline_trace_is_named_and_warned_about(tmp_path):
    for f in (ROOT / "traces").glob("gpt-tiny-cpu.*"):
        shutil.copy(f, tmp_path / f.name.replace("gpt-tiny-cpu", "t"))
    meta = yaml.safe_load((tmp_path / "t.yaml").read_text())
    meta["provenance"]["method"] = "FakeTensorMode analysis, no device run"
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(meta))
    exp = yaml.safe_load((ROOT / "experiments" / "cpu-gpt-tiny.yaml").read_text())
    exp["models"][0]["trace"] = str(tmp_path / "t.csv")
    exp["sweep"]["schedule"] = "1f1b"
    exp["models"][0]["microbatch_size"] = 2
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(exp))
    res = CliRunner().invoke(app, ["run", str(tmp_path / "e.yaml"), "--out",
                                   str(tmp_path / "o"), "--no-plots", "-j", "1"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "roofline ESTIMATE" in " ".join(res.output.split())
    rows = (tmp_path / "o" / "results.csv").read_text()
    assert "roofline estimate" in rows
    winner = yaml.safe_load((tmp_path / "o" / "winner.yaml").read_text())
    assert winner["prediction"]["trace_origin"] == "roofline estimate"
    assert trace_origin(sim.api.load(tmp_path / "e.yaml").traces["gpt-tiny-cpu"]) == (
        "roofline estimate"
    )


def test_hybrid_mamba_is_megatrons_hybrid_flops():
    """Megatron-Core's hybrid_flops: per layer kind, times 3 for the backward."""
    h, s, v = 256, 128, 1000
    mamba = {"heads": 8, "head_dim": 64, "state": 16, "groups": 2}
    moe = {"hidden": h, "experts": 4, "top_k": 2, "expert_ffn": 128}
    shape = {"kind": "decoder", "layers": 4, "hidden": h, "heads": 4, "kv_heads": 2, "seq_len": s,
             "vocab": v, "ffn_hidden": 512, "pattern": "M*-E", "mamba": mamba, "moe": moe}  # fmt: skip
    q, kv, d_in = 256, 128, 8 * 64
    attn = 2 * (2 * q * h + 2 * kv * h + q * s)
    mlp = 2 * h * 3 * 512
    moe_flops = 2 * h * 3 * 128 * 2
    mamba_flops = 2 * h * (2 * d_in + 2 * 2 * 16 + 8) + 7 * d_in * 16 + 2 * d_in * h
    fwd = attn + mlp + moe_flops + mamba_flops + 2 * h * v
    assert model_flops(shape, 3) == pytest.approx(3 * fwd * 3 * s)

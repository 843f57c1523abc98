"""Mixture-of-experts layers in the compute model (sim/compute/moe.py, routing.py, mla.py,
decoder.py): routing shares, capacity, expert FLOPs, parameters and activation memory, each
against a closed form or a published count."""

from __future__ import annotations

import math

import pytest

from sim.compute.decoder import (
    DecoderShape,
    layer_act_bytes,
    layer_kernels,
    layer_names,
    layer_params,
)
from sim.compute.mla import MLAShape
from sim.compute.moe import moe_act_bytes, moe_fwd
from sim.compute.moe_shape import INDEX_BYTES, PROB_BYTES, MoEShape
from sim.compute.routing import Routing, capacity, expert_rows

MIXTRAL = DecoderShape(
    32, 4096, 32, 4096, 32000, 14336, kv_heads=8, moe=MoEShape(4096, 8, 2, 14336)
)
"""Mixtral 8x7B (Jiang et al. arXiv:2401.04088 Table 1; HF config.json)."""
DSV3 = DecoderShape(
    61,
    7168,
    128,
    4096,
    129280,
    18432,
    mla=MLAShape(1536, 512, 128, 64, 128),
    moe=MoEShape(7168, 256, 8, 2048, shared_ffn=2048, router_expert_bias=True),  # noaux_tc
    dense_layers=3,
)
"""DeepSeek-V3 (arXiv:2412.19437 §4.2; HF config.json), without the MTP module."""


def total_and_active(m: DecoderShape) -> tuple[float, float]:
    total = active = 0
    for _, kind in layer_names(m):
        dense, expert = layer_params(kind, m)
        total += dense + expert
        active += dense + (m.moe.top_k * m.moe.expert_params() if kind == "moe_block" else 0)
    return total, active


@pytest.mark.parametrize(
    "m,total,active",
    [(MIXTRAL, 46.7e9, 12.9e9), (DSV3, 671e9, 37e9)],
    ids=["mixtral-8x7b", "deepseek-v3"],
)
def test_parameter_counts_match_the_published_ones(m, total, active):
    # Mixtral: "47B parameters, 13B active" (paper §1; 46.7B / 12.9B on the model card);
    # DeepSeek-V3: "671B total parameters with 37B activated for each token" (abstract).
    t, a = total_and_active(m)
    assert t == pytest.approx(total, rel=0.01)
    assert a == pytest.approx(active, rel=0.02)


def test_balanced_imbalanced_and_measured_routing_shares():
    assert Routing().loads(4) == (0.25,) * 4
    hot = Routing("imbalance", imbalance=2.0).loads(8)
    assert hot[0] == 2 / 8 and all(x == pytest.approx(6 / 8 / 7) for x in hot[1:])
    assert Routing("histogram", histogram=(3, 1, 0, 4)).loads(4) == (0.375, 0.125, 0.0, 0.5)
    with pytest.raises(ValueError, match="exceeds"):
        Routing("imbalance", imbalance=9).loads(8)
    with pytest.raises(ValueError, match="4 experts"):
        Routing("histogram", histogram=(1, 2)).loads(4)


def test_capacity_drops_and_pads_as_megatron():
    # Megatron get_capacity: ceil(T*k/E * c); T=1000, k=2, E=8, c=1.25 -> ceil(312.5) = 313
    assert capacity(1000, 8, 2, 1.25) == 313
    loads = Routing("histogram", histogram=(4, 2, 1, 1)).loads(4)  # 0.5, .25, .125, .125
    # 2 sources x 100 tokens, k=1: assigned 50, 25, 12.5, 12.5 per source; cap ceil(25*1) = 25
    assert expert_rows(100, 2, 4, 1, loads) == (100.0, 50.0, 25.0, 25.0)
    assert expert_rows(100, 2, 4, 1, loads, capacity_factor=1.0) == (50.0, 50.0, 25.0, 25.0)
    assert expert_rows(100, 2, 4, 1, loads, 1.0, pad=True) == (50.0,) * 4


def test_expert_flops_are_the_rows_they_receive():
    moe = MoEShape(1024, 8, 2, 2048, shared_ffn=512)
    r = 4096
    rows = expert_rows(r, 1, 8, 2, Routing().loads(8))  # 1024 each
    flops = sum(k.flops for k in moe_fwd(moe, r, r, rows, 2))
    router = 2 * r * 1024 * 8
    routed = 2 * (r * 2) * 1024 * (2 * 2048 + 2048)  # gate+up, down over T*k rows
    shared = 2 * r * 1024 * 3 * 512
    assert flops == router + routed + shared == moe.fwd_flops(r)
    # a rank that receives twice the rows does twice the expert FLOPs
    hot = sum(k.flops for k in moe_fwd(moe, r, r, tuple(2 * x for x in rows), 2))
    assert hot - flops == routed


def test_grouped_gemm_is_one_kernel_per_row_count():
    moe = MoEShape(256, 4, 1, 512)
    kernels = moe_fwd(moe, 64, 64, (16.0, 16.0, 10.2, 0.0), 2)
    ups = [k for k in kernels if k.name.startswith("expert_up")]
    assert [(k.m, k.batch) for k in ups] == [(11, 1), (16, 2)]  # rows rounded up; empty skipped


def test_moe_activation_bytes_closed_form():
    moe = MoEShape(1024, 8, 2, 2048, shared_ffn=512)
    r, d, rows = 4096, 2, (1024.0,) * 8
    n = 8192  # rows on the rank
    want = (
        2 * r * 1024 * d  # norm and router inputs
        + PROB_BYTES * r * 8  # fp32 probabilities
        + (PROB_BYTES + INDEX_BYTES) * r * 2  # top-k probabilities and indices
        + n * d * (1024 + 2 * 2048 + 2048)  # expert input, gate+up output, activation
        + PROB_BYTES * n  # the rows' probabilities, kept by the weighted SwiGLU (no r*k*h*d)
        + r * d * (2 * 512 + 512)  # shared experts
    )
    assert moe_act_bytes(moe, r, r, rows, d) == want


def test_dense_decoder_block_activations_reduce_to_korthikanti():
    # Korthikanti et al. Table 2 less dropout and with flash attention: attention 10sbh + LN
    # 2sbh, a non-gated MLP 18sbh + LN 2sbh; here gated (f = 4h): + up 2x -> see module doc
    m = DecoderShape(1, 1024, 16, 2048, 1000, 4096)
    sbh = 2048 * 1024
    want_attn = 12 * sbh + 4 * 2048 * 16  # + fp32 log-sum-exp
    want_mlp = 2 * 2 * sbh + 2 * 3 * 4 * sbh  # norm + up inputs, gate/up out (2f) + act out (f)
    assert layer_act_bytes("block", m, 1, 2) == want_attn + want_mlp


def test_mla_attention_flops():
    # DeepSeek-V3 MLA: QK dim 192, V dim 128: core FLOPs 2*s^2*a*(192 + 128), halved causal
    m = DSV3
    fwd, _, _ = layer_kernels("block", m, 1, 2)
    core = next(k for k in fwd if k.name == "flash_attn_fwd")
    s, a = m.seq_len, m.heads
    assert core.flops == 2.0 * s * s * a * (192 + 128) * 0.5


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_context_parallel_rank_does_one_cp_th_of_the_causal_attention(cp):
    m = DecoderShape(1, 4096, 32, 131072, 1000, 14336, kv_heads=8)
    full = next(k for k in layer_kernels("block", m, 1, 2)[0] if k.kind == "attn")
    rank = next(k for k in layer_kernels("block", m, 1, 2, cp=cp)[0] if k.kind == "attn")
    assert rank.flops == pytest.approx(full.flops / cp)
    gemm = next(k for k in layer_kernels("block", m, 1, 2, cp=cp)[0] if k.name == "qkv")
    assert gemm.m == 131072 // cp  # every token-wise kernel sees s/cp tokens
    act = layer_act_bytes("block", m, 1, 2, cp=cp)
    assert act == pytest.approx(layer_act_bytes("block", m, 1, 2) / cp)


def test_gqa_shrinks_the_qkv_projection():
    m = DecoderShape(1, 4096, 32, 128, 1000, 14336, kv_heads=8)
    qkv = next(k for k in layer_kernels("block", m, 1, 2)[0] if k.name == "qkv")
    assert qkv.n == 4096 + 2 * 8 * 128  # q: h, k and v: kv_heads * head_dim each
    assert math.isclose(
        layer_params("block", m)[0], 4096 * 6144 + 4096**2 + 3 * 4096 * 14336 + 2 * 4096
    )


def test_hf_configs_read_as_the_published_shapes(tmp_path):
    from pathlib import Path

    from sim.errors import InputError
    from sim.trace.hf_config import read_config

    hf = Path(__file__).resolve().parents[1] / "examples" / "hf"
    assert read_config(hf / "mixtral-8x7b-config.json", 4096) == MIXTRAL
    assert read_config(hf / "deepseek-v3-config.json", 4096) == DSV3
    qwen = read_config(hf / "qwen1.5-moe-a2.7b-config.json", 4096)
    assert qwen.moe == MoEShape(2048, 60, 4, 1408, shared_ffn=5632)
    bad = tmp_path / "c.json"
    bad.write_text('{"model_type": "gpt_neox", "hidden_size": 8}')
    with pytest.raises(InputError) as exc:
        read_config(bad, 128)
    assert exc.value.field == "model_type" and "gpt_neox" in str(exc.value)
    bad.write_text('{"model_type": "mixtral", "hidden_size": 8}')
    with pytest.raises(InputError, match="missing field"):
        read_config(bad, 128)


def test_profile_for_gpu_of_a_moe_config_is_the_analytic_trace(tmp_path):
    pytest.importorskip("torch")
    from pathlib import Path

    from typer.testing import CliRunner

    from sim.cli import app
    from sim.trace.loader import load_trace

    cfg = Path(__file__).resolve().parents[1] / "examples/hf/tiny-mixtral-config.json"
    out = tmp_path / "tm"
    args = ["profile", "--model", str(cfg), "--seq-len", "32", "-b", "2", "--for-gpu", "H100"]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "ESTIMATE, not measured: the kernel model of sim.compute" in " ".join(res.output.split())
    trace = load_trace(str(out) + ".csv")
    assert trace.provenance["source"].startswith("analytic: sim.trace.decoder")
    assert [x.name for x in trace.layers] == ["embedding", "moe_block.0", "moe_block.1", "head"]


def test_fused_grouped_mlp_runs_no_activation_kernels_and_batched_gemms():
    """Transformer Engine's fused grouped MLP (sim.compute.moe, "Fused grouped MLP"): 4 experts
    of 256 rows, h 64, f_e 32, gated: the forward is norm, router, permute, the two grouped
    GEMMs and unpermute with no activation kernels (2*256*32*2 + 3*256*32*2 bytes each
    unfused); the backward has no activation gradients; each grouped GEMM is a plain batched
    GEMM of 4 (no measured grouped-GEMM pass), with the same FLOPs as unfused."""
    from dataclasses import replace as _replace

    from sim.compute.moe import moe_bwd, moe_fwd
    from sim.compute.moe_shape import MoEShape

    shape = MoEShape(hidden=64, experts=4, top_k=1, expert_ffn=32)
    fused = _replace(shape, fused_grouped_mlp=True)
    rows = (256.0,) * 4
    plain_f, fused_f = moe_fwd(shape, 1024, 1024, rows, 2), moe_fwd(fused, 1024, 1024, rows, 2)
    names = [k.name for k in fused_f]
    assert not any(n.startswith(("expert_act", "expert_gate_mul")) for n in names)
    dropped = {k.name for k in plain_f} - set(names)
    assert dropped == {"expert_act[256]", "expert_gate_mul[256]"}
    acts = [k.bytes for k in plain_f if k.name in dropped]
    assert sorted(acts) == [2 * 256 * 32 * 2 * 4, 3 * 256 * 32 * 2 * 4]
    up = next(k for k in fused_f if k.name == "expert_up[256]")
    assert (up.m, up.n, up.k, up.batch, up.grouped) == (256, 64, 64, 4, "")
    assert up.flops == next(k for k in plain_f if k.name == "expert_up[256]").flops
    dx, dw = moe_bwd(fused, 1024, 1024, rows, 2)
    assert not any("act_bwd" in k.name or "gate_mul_bwd" in k.name for k in dx)
    assert all(not k.grouped for k in dx + dw if k.kind == "gemm")


def test_unfused_weighting_keeps_the_activation_output():
    # TEGroupedMLP without a fused weighted activation: act(x) * probs keeps act(x) (n*f*d);
    # gated, act(gate) * up keeps act(gate) too (Megatron-LM@d98e8a64 moe/experts.py 943-1016)
    r, d, rows, n = 64, 2, (32.0,) * 4, 128
    for gated, extra in ((False, n * 256 * d), (True, 2 * n * 256 * d)):
        fused = MoEShape(128, 4, 2, 256, gated=gated)
        unfused = MoEShape(128, 4, 2, 256, gated=gated, fused_weighting=False)
        assert moe_act_bytes(unfused, r, r, rows, d) - moe_act_bytes(fused, r, r, rows, d) == extra


def test_biased_experts_add_the_down_bias_as_an_fp32_chain():
    """GPT-OSS's experts (Megatron-LM@d98e8a64 moe/experts.py ``_apply_bias``): 4 experts of
    256 rows, h 64, bf16: the forward adds a mul and an add per expert, a cat and a cast after
    the down GEMMs (2*4 + 2 = 10 kernels) moving
    4*256*64 * (4 + (2+4+4) + (4+4) + (4+2)) = 1024*64*28 = 1835008 bytes; the backward
    6*4 + 3 = 27 kernels, 1024*64*(32 + 4*2) + 1024*8 = 2629632 bytes (sim.compute.expert_bias);
    the fused grouped MLP adds none."""
    from dataclasses import replace as _replace

    from sim.compute.moe import moe_bwd

    shape = MoEShape(hidden=64, experts=4, top_k=1, expert_ffn=32, bias=True)
    rows = (256.0,) * 4
    fwd = [k for k in moe_fwd(shape, 1024, 1024, rows, 2) if k.name.startswith("expert_bias")]
    assert (len(fwd), sum(k.bytes for k in fwd)) == (10, 1835008)
    dx, _ = moe_bwd(shape, 1024, 1024, rows, 2)
    bwd = [k for k in dx if k.name.startswith("expert_bias")]
    assert (len(bwd), sum(k.bytes for k in bwd)) == (27, 2629632)
    unbiased = {k.name for k in moe_fwd(_replace(shape, bias=False), 1024, 1024, rows, 2)}
    assert {k.name for k in moe_fwd(shape, 1024, 1024, rows, 2)} - unbiased == {k.name for k in fwd}
    fused = _replace(shape, fused_grouped_mlp=True)
    assert not any("bias" in k.name for k in moe_fwd(fused, 1024, 1024, rows, 2))


def test_alltoall_dispatcher_sorts_received_rows_by_local_expert():
    """Megatron-Core's alltoall dispatcher sorts a rank's received rows by local expert and
    back (sim.compute.moe_sort; Megatron-LM@d98e8a64 token_dispatcher.py 753-823): 2 local
    experts of 96 rows, h 64, bf16: the sort reads and writes 192 rows and their fp32
    probabilities, 2 * 192 * (64 * 2 + 4) = 50688 bytes; the unsort the rows only,
    2 * 192 * 128 = 49152; the backward the same bytes in reverse order; one local expert (or
    a flex dispatcher) sorts nothing."""
    from dataclasses import replace as _replace

    from sim.compute.moe import moe_bwd

    shape = _replace(MoEShape(hidden=64, experts=8, top_k=2, expert_ffn=32), sort_by_expert=True)
    rows = (96.0, 96.0)
    fwd = {k.name: k.bytes for k in moe_fwd(shape, 96, 96, rows, 2)}
    assert (fwd["sort_by_expert"], fwd["unsort_by_expert"]) == (50688.0, 49152.0)
    dx, _ = moe_bwd(shape, 96, 96, rows, 2)
    sorts = [(k.name, k.bytes) for k in dx if "sort_by_expert" in k.name]
    assert sorts == [("unsort_by_expert_bwd", 49152.0), ("sort_by_expert_bwd", 50688.0)]
    for other, local in ((shape, (192.0,)), (_replace(shape, sort_by_expert=False), rows)):
        assert not any("sort" in k.name for k in moe_fwd(other, 96, 96, local, 2))

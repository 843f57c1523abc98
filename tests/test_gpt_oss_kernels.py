"""GPT-OSS's kernels as Megatron-Core and cuDNN run them, each against a hand-computed case:
the clamped GLU's eager clamp (sim/compute/glu_clamp.py), windowed attention at cuDNN's
measured rate (sim/compute/swa_speed.py), FP8 attention, YaRN's unfused RoPE
(sim/compute/rope_unfused.py), the host ops of the eager pieces (sim/compute/gptoss_host.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.moe import moe_act_bytes, moe_bwd, moe_fwd
from sim.compute.moe_shape import MoEShape


def test_clamped_glu_adds_two_clamps_and_a_cat_each_way():
    """``weighted_bias_quick_geglu_impl`` (Megatron-LM@d98e8a64 fused_bias_geglu.py 424-432):
    4 experts of 256 rows, expert width 32, bf16: a half is 1024*32 elements of 2 bytes =
    65536 bytes; forward clamp, clamp, cat move 2, 2 and 4 halves (131072, 131072, 262144),
    backward 15 halves in 7 kernels (the cat 4); the clamped copy keeps 2*65536 more bytes;
    the fused grouped MLP clamps inside its op and adds nothing."""
    shape = MoEShape(hidden=64, experts=4, top_k=1, expert_ffn=32, clamp=True)
    rows = (256.0,) * 4
    fwd = {k.name: k.bytes for k in moe_fwd(shape, 1024, 1024, rows, 2)}
    assert fwd["expert_act_clamp_glu[256]"] == 131072
    assert fwd["expert_act_clamp_linear[256]"] == 131072
    assert fwd["expert_act_clamp_cat[256]"] == 262144
    dx = {k.name: k.bytes for k in moe_bwd(shape, 1024, 1024, rows, 2)[0]}
    clamp_bwd = {k: v for k, v in dx.items() if k.startswith("expert_act_clamp")}
    assert len(clamp_bwd) == 7 and sum(clamp_bwd.values()) == 15 * 65536
    assert dx["expert_act_clamp_cat_bwd[256]"] == 262144
    plain = replace(shape, clamp=False)
    assert moe_act_bytes(shape, 1024, 1024, rows, 2) - moe_act_bytes(
        plain, 1024, 1024, rows, 2
    ) == (2 * 65536)
    fused = replace(shape, fused_grouped_mlp=True)
    assert not any("clamp" in k.name for k in moe_fwd(fused, 1024, 1024, rows, 2))
    assert moe_act_bytes(fused, 1024, 1024, rows, 2) == moe_act_bytes(
        replace(fused, clamp=False), 1024, 1024, rows, 2
    )


def test_windowed_attention_runs_at_cudnn_measured_rate():
    """cudnn-frontend@3929da2 gpt_oss results (window 128, head dim 64): a 4096-token forward
    runs at 161 TFLOPS on GB200, its backward 182; 6144 tokens lie halfway in log2 between
    4096 and 8192 at log2(1.5) = 0.585 of the way (161 + 0.585*4 TFLOPS forward); MXFP8
    attention's backward at 4096 runs at 41; a full-causal kernel and another window keep
    the causal table."""
    import math

    from sim.compute.attention import attention_bwd, attention_fwd
    from sim.compute.kernels import kernel_time_s
    from sim.compute.swa_speed import windowed_rate_flops
    from sim.hardware.loader import load_hardware

    gb200 = load_hardware("gb200-nvl72").gpus[0].compute
    assert gb200 is not None
    fwd = attention_fwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False, window=128)
    bwd = attention_bwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False, window=128)
    assert windowed_rate_flops(fwd[0], gb200, "bf16") == pytest.approx(161e12)
    assert windowed_rate_flops(bwd[0], gb200, "bf16") == pytest.approx(182e12)
    t = kernel_time_s(fwd[0], gb200, "bf16")
    assert t == pytest.approx(gb200.kernel_overhead_s + fwd[0].flops / 161e12)
    mid = attention_fwd("flash", 4, 6144, 64 * 64, 64, 2, causal=True, dropout=False, window=128)
    assert windowed_rate_flops(mid[0], gb200, "bf16") == pytest.approx(
        (161 + 4 * math.log2(1.5)) * 1e12
    )
    assert windowed_rate_flops(replace(bwd[0], precision="mxfp8"), gb200, "bf16") == 41e12
    full = attention_fwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False)
    other = attention_fwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False, window=512)
    assert full[0].window == 0 and windowed_rate_flops(full[0], gb200, "bf16") is None
    assert windowed_rate_flops(other[0], gb200, "bf16") is None


def test_fp8_attention_runs_the_core_in_the_recipes_attention_format():
    """Megatron's --fp8-dot-product-attention (the GPT-OSS MXFP8 recipes): with MXFP8 linear
    layers TE runs MXFP8 attention (TE@4220403 dot_product_attention.py 100-170), so a windowed
    4096-token layer's backward core runs at cuDNN's measured MXFP8 41 TFLOPS on GB200, 4.4x its
    BF16 time; without the rule the core stays 16-bit; the flag maps to the option."""
    from sim.compute.attention import attention_bwd
    from sim.compute.kernels import kernel_time_s
    from sim.compute.precision import TE, get_recipe
    from sim.compute.precision_rules import LayerRules
    from sim.compute.quantize import quantize_layer
    from sim.hardware.loader import load_hardware
    from sim.runs.megatron_reading import Reading
    from sim.runs.precision_flags import precision_flags

    gb200 = load_hardware("gb200-nvl72").gpus[0].compute
    mx = get_recipe("mxfp8", TE)
    assert gb200 is not None and mx is not None
    core = attention_bwd("flash", 4, 4096, 64 * 64, 64, 2, causal=True, dropout=False, window=128)
    layer = ([], core, [])
    on = quantize_layer(layer, mx, gb200.low_rate("mxfp8"), LayerRules(attention=True))[1][0]
    off = quantize_layer(layer, mx, gb200.low_rate("mxfp8"), LayerRules())[1][0]
    assert (on.precision, off.precision) == ("mxfp8", "")
    t_on, t_off = (kernel_time_s(k, gb200, "bf16") - gb200.kernel_overhead_s for k in (on, off))
    assert t_on == pytest.approx(core[0].flops / 41e12)
    assert t_on / t_off == pytest.approx(182 / 41)
    flags = precision_flags(Reading({"fp8-dot-product-attention": True}, True), "mxfp8")
    assert flags == {"fp8_attention": True}


def test_yarn_scaled_rope_runs_unfused():
    """Megatron-Core falls back to unfused RoPE when YaRN's concentration factor is not 1
    (rope_utils.py 340-370): GPT-OSS's factor 32 gives 0.1 ln 32 + 1 = 1.3466. A block of 2
    tokens, 4 query heads and 2 key heads of width 8 in bf16: Q has 64 elements, K 32;
    forward 12 elements moved per element in 6 kernels (12*64*2 = 1536 bytes for Q), backward
    14 in 7, where the fused kernel moves 2 each way."""
    import math

    from sim.compute.rope_unfused import yarn_concentration
    from sim.compute.transformer import BlockShape, block_bwd, block_fwd

    assert yarn_concentration(32) == pytest.approx(0.1 * math.log(32) + 1)
    assert yarn_concentration(1) == 1.0
    shape = BlockShape(32, 4, 2, 64, rotary=True, attention="flash", kv_heads=2, head_dim=8)
    unfused = replace(shape, rope_unfused=True)
    fwd = {k.name: k.bytes for k in block_fwd(unfused, 1, 2) if k.name.startswith("rotary")}
    assert len(fwd) == 12 and sum(v for k, v in fwd.items() if "_q_" in k) == 1536
    assert sum(v for k, v in fwd.items() if "_k_" in k) == 12 * 32 * 2
    bwd = [k for k in block_bwd(unfused, 1, 2)[0] if k.name.startswith("rotary_q")]
    assert len(bwd) == 7 and sum(k.bytes for k in bwd) == 14 * 64 * 2
    fused = {k.name: k.bytes for k in block_fwd(shape, 1, 2) if k.name.startswith("rotary")}
    assert fused == {"rotary_q": 2 * 64 * 2, "rotary_k": 2 * 32 * 2}


def test_cudnn_frontend_124_slows_the_biased_fused_dglu_kernel():
    """NVIDIA/cudnn-frontend#256 and #322 (sim/compute/dglu_regression.py): the dGLU kernel
    with a bias gradient took 1362.768 us before the fix and 155.632 us after, 8.7564x.
    Megatron-Bridge 26.06.01 ships cuDNN frontend 1.24.0 (v0.5.1's uv.lock), 26.06 1.23.0;
    1.24 and 1.25 are slow, 1.23 and 1.26 not. A fused grouped MLP with biases under it runs
    its ``d_expert_down_in`` kernel 8.7564x its modelled time beyond the launch overhead;
    without biases, unfused, or on another frontend, nothing changes."""
    from sim.compute.dglu_regression import SLOWDOWN, regressed
    from sim.compute.kernels import gemm, kernel_time_s
    from sim.hardware.loader import load_hardware
    from sim.runs.bridge_recipes import release_of
    from sim.runs.bridge_software import FLAG, cudnn_frontend, dglu_feature
    from sim.runs.megatron_reading import Reading

    assert SLOWDOWN == pytest.approx(1362.768 / 155.632) == pytest.approx(8.7564, abs=1e-4)
    assert [regressed(v) for v in ("1.23.0", "1.24.0", "1.25.1", "1.26.0")] == [
        False, True, True, False]  # fmt: skip
    table = "26.06.01 / Pre-Training Performance / Model: GPT OSS 120B"
    assert cudnn_frontend(release_of({"table": table})) == "1.24.0"
    assert cudnn_frontend("26.06") == "1.23.0" and cudnn_frontend("25.11") is None

    spec = load_hardware("dgx-h100").gpus[0].compute
    k = gemm("g", 4096, 4096, 4096, 2)
    base = kernel_time_s(k, spec, "bf16")
    slow = kernel_time_s(replace(k, slowdown=SLOWDOWN), spec, "bf16")
    o = spec.kernel_overhead_s
    assert slow == pytest.approx(o + 8.7564 * (base - o), rel=1e-5)

    shape = MoEShape(hidden=64, experts=4, top_k=1, expert_ffn=32, bias=True,
                     fused_grouped_mlp=True, dglu_regressed=True)  # fmt: skip
    rows = (256.0,) * 4
    dx = {k.name: k.slowdown for k in moe_bwd(shape, 1024, 1024, rows, 2)[0]}
    assert dx.pop("d_expert_down_in[256]") == SLOWDOWN
    assert set(dx.values()) == {1.0}
    for other in (replace(shape, bias=False), replace(shape, fused_grouped_mlp=False),
                  replace(shape, dglu_regressed=False)):  # fmt: skip
        assert {k.slowdown for k in moe_bwd(other, 1024, 1024, rows, 2)[0]} == {1.0}

    def feature(version: str, fused: bool, bias: bool) -> list[str]:
        return dglu_feature(Reading({FLAG: version}, strict=True), fused, bias)

    assert feature("1.24.0", True, True) == ["moe_dglu=regressed"]
    assert feature("1.23.0", True, True) == feature("1.24.0", True, False) == []


def test_gpt_oss_eager_pieces_add_their_counted_host_ops():
    """scripts/count_gptoss_ops.py (sim/compute/gptoss_host.py): an attention layer adds the
    unfused RoPE of Q and K (2 x 15 forward, 2 x 11 backward ops) and the projection's bias
    (1, 2); a rank of 16 clamped, biased local experts adds the clamp (4, 11) and the bias
    chain (6 + 2*16, 5 + 8*16), on top of Transformer Engine's GroupedLinear work; the fused
    grouped MLP none; a model without these pieces nothing."""
    from sim.compute.decoder import DecoderShape
    from sim.compute.mcore_ops import moe_layer_ops
    from sim.compute.te_grouped_host import grouped_expert_ops
    from sim.parallel.layer_host import grouped_host_ops
    from sim.parallel.layout import ParallelLayout
    from sim.trace.decoder import layer_host_ops
    from sim.trace.schema import LayerProfile

    moe = MoEShape(hidden=64, experts=128, top_k=4, expert_ffn=64, bias=True, clamp=True)
    m = DecoderShape(layers=2, hidden=64, heads=4, seq_len=32, vocab=128, ffn_hidden=64,
                     moe=moe, attn_bias=True, rope_unfused=True)  # fmt: skip
    base = moe_layer_ops("moe_block", 1)
    ops = layer_host_ops("moe_block", m)
    assert (ops[0] - base[0], ops[1] - base[1]) == (31.0, 24.0)
    bare = replace(moe, bias=False, clamp=False)
    plain = replace(m, attn_bias=False, rope_unfused=False, moe=bare)
    assert layer_host_ops("moe_block", plain) == base
    layer = LayerProfile("moe_block.0", 1.0, 1.0, 0.0, 0.0, 0.0, fwd_ops=100.0, bwd_ops=100.0)
    par = ParallelLayout(dp_replicate=8, ep=8)
    te = grouped_expert_ops(16, None)
    fwd, bwd = grouped_host_ops(layer, "moe_block", m, par)
    assert (fwd - te[0], bwd - te[1]) == (4 + 6 + 2 * 16, 11 + 5 + 8 * 16)
    fused = replace(m, moe=replace(moe, fused_grouped_mlp=True))
    assert grouped_host_ops(layer, "moe_block", fused, par) == (0.0, 0.0)


def test_projection_bias_is_added_by_an_unfused_kernel():
    """GPT-OSS's bridge sets bias_dropout_fusion False (Megatron-Bridge v0.5.0
    gpt_oss_bridge.py:74): a block of 4 tokens, hidden 32, bf16 adds the output projection's
    bias in one kernel reading and writing 4*32*2 = 256 bytes each (512), and its backward
    sums the gradient over the tokens (256); without biases neither."""
    from sim.compute.transformer import BlockShape, block_bwd, block_fwd

    shape = BlockShape(32, 4, 4, 64, rotary=True, attention="flash", bias=True)
    fwd = {k.name: k.bytes for k in block_fwd(shape, 1, 2)}
    assert fwd["attn_proj_bias"] == 512
    assert {k.name: k.bytes for k in block_bwd(shape, 1, 2)[0]}["attn_proj_bias_bwd"] == 256
    plain = replace(shape, bias=False)
    assert not any(
        "proj_bias" in k.name for k in block_fwd(plain, 1, 2) + block_bwd(plain, 1, 2)[0]
    )

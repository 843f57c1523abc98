"""GPT-OSS's kernels as Megatron-Core and cuDNN run them, each against a hand-computed case:
the clamped GLU's eager clamp (sim/compute/glu_clamp.py)."""

from __future__ import annotations

from dataclasses import replace

from sim.compute.moe import MoEShape, moe_act_bytes, moe_bwd, moe_fwd


def test_clamped_glu_adds_two_clamps_and_a_cat_each_way():
    """``weighted_bias_quick_geglu_impl`` (Megatron-LM@d98e8a64 fused_bias_geglu.py 424-432):
    4 experts of 256 rows, expert width 32, bf16: a half is 1024*32 elements of 2 bytes =
    65536 bytes; forward clamp, clamp, cat move 2, 2 and 4 halves (131072, 131072, 262144),
    backward 3, 3 and 4 halves; the clamped copy keeps 2*65536 more bytes; the fused grouped
    MLP clamps inside its op and adds nothing."""
    shape = MoEShape(hidden=64, experts=4, top_k=1, expert_ffn=32, clamp=True)
    rows = (256.0,) * 4
    fwd = {k.name: k.bytes for k in moe_fwd(shape, 1024, 1024, rows, 2)}
    assert fwd["expert_act_clamp_glu[256]"] == 131072
    assert fwd["expert_act_clamp_linear[256]"] == 131072
    assert fwd["expert_act_clamp_cat[256]"] == 262144
    dx = {k.name: k.bytes for k in moe_bwd(shape, 1024, 1024, rows, 2)[0]}
    assert dx["expert_act_clamp_glu_bwd[256]"] == 196608
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

"""Module-level selective recompute (Megatron-Core's recompute_modules) and torchtitan's per-op
SAC (issue 26 item 5; sim.compute.recompute_modules, sim.memory.recompute): the bytes each
choice drops, hand-computed for Llama-3-8B's block (b = 1, s = 8192, bf16, one rank:
t = r = 8192 tokens, h = 4096, 32 query heads and 8 KV heads of 128, FFN 14336, gated)."""

from __future__ import annotations

import pytest

from sim.compute.decoder import layer_act_bytes
from sim.compute.recompute_modules import module_parts
from sim.memory.registry import parse_policy
from sim.memory.stash import stash
from sim.trace.hf_config import read_config
from sim.trace.schema import LayerProfile

T, H, Q, KV, F, A, D = 8192, 4096, 4096, 1024, 14336, 32, 2


@pytest.fixture(scope="module")
def llama():
    return read_config("examples/hf/llama3-8b-config.json", 8192)


def test_module_bytes_of_a_llama_block(llama):
    # layernorm: none (both norms fused into linear_qkv and linear_fc1, IdentityOps); mlp: gate
    # and up outputs and the gated activation t (2f + f) d; core_attn with flash: the
    # log-sum-exp 4 t a.
    parts = {n: b for n, b, _ in module_parts("block", llama, 1, D)}
    assert "layernorm" not in parts
    assert parts["mlp"] == T * 3 * F * D
    assert parts["core_attn"] == 4 * T * A


def test_torchtitan_sac_drops_all_but_the_odd_matmuls_and_attention(llama):
    # Stash of the block: 2rhd + t(2q + 2kv)d + 4ta (attention half) + 2rhd + t(2f + f)d
    # (MLP) = 1,141,899,264 B. SAC keeps the block input (rhd), wq's output (tqd), wv's
    # (t kv d), the attention output (tqd) and its log-sum-exp (4ta), w1's (tfd) and w2's
    # (thd): 521,142,272 B; wk, wo and w3 (the 2nd, 4th and 6th matmul), norms, RoPE and
    # SwiGLU are recomputed.
    act = 2 * T * H * D + T * (2 * Q + 2 * KV) * D + 4 * T * A + 2 * T * H * D + T * 3 * F * D
    assert layer_act_bytes("block", llama, 1, D) == act == 1_141_899_264
    kept = T * H * D + T * Q * D + T * KV * D + T * Q * D + 4 * T * A + T * F * D + T * H * D
    sac = dict((n, (b, k)) for n, b, k in module_parts("block", llama, 1, D))["sac"]
    assert sac[0] == act - kept == 620_756_992
    assert [k.name for k in sac[1] if k.kind == "gemm"] == ["k", "proj", "up"]


def _layer(parts) -> LayerProfile:
    return LayerProfile("block.0", 1.0, 2.0, 1.0, 1000.0, 10.0, recompute_parts=parts)


def test_module_sets_add_up_and_moe_includes_moe_act():
    # A layer of 1000 B whose modules drop layernorm 100, mlp 300, moe_act 50, moe 400 (with
    # 0.1 / 0.2 / 0.05 / 0.3 s): layernorm + mlp drop 400 B and re-run 0.3 s; moe + moe_act
    # counts moe once.
    parts = (
        ("layernorm", 100.0, 0.1),
        ("mlp", 300.0, 0.2),
        ("moe_act", 50.0, 0.05),
        ("moe", 400.0, 0.3),
    )

    class Ctx:
        layers = (_layer(parts),)
        layer_inputs = (10.0,)
        act_bytes = 1000.0

    st = stash(Ctx(), modules=frozenset({"layernorm", "mlp"}))
    assert (st.kept_bytes, st.recompute_s) == (600.0, pytest.approx(0.3))
    st = stash(Ctx(), modules=frozenset({"moe", "moe_act"}))
    assert (st.kept_bytes, st.recompute_s) == (600.0, pytest.approx(0.3))
    assert st.label == "selective:moe,moe_act"


def test_grammar_and_the_distributed_optimizer():
    policy = parse_policy("recompute:selective:core_attn,mlp")
    assert (policy.mode, sorted(policy.modules)) == ("selective", ["core_attn", "mlp"])
    assert parse_policy("recompute:sac").modules == frozenset({"sac"})
    combined = parse_policy("dist_opt:recompute:selective:mlp")
    assert combined.choice is not None and combined.choice.modules == frozenset({"mlp"})
    with pytest.raises(ValueError, match="unknown recompute modules"):
        parse_policy("recompute:selective:attention")


def test_layernorm_recomputes_only_the_norms_that_are_modules_of_their_own():
    """Megatron-LM@d98e8a64 transformer_layer.py 475-477, 521-527 (a norm that is not an
    IdentityOp) and gpt_layer_specs.py 245-345 (TE spec): GQA attention's norm and a dense
    MLP's are fused into their first linear, so no recompute, in 16 bits or FP8 alike; MLA's
    input norm and a MoE layer's pre-MLP norm are TENorms: their 16-bit outputs, r h d each.
    h = 64, s = 8, b = 2, one rank: 16 x 64 x 2 B = 2,048 B a norm; 2 x 2,048 in an MTP depth
    of an MLA MoE model (its block is a MoE block)."""
    from sim.compute.decoder_shape import DecoderShape
    from sim.compute.mla import MLAShape
    from sim.compute.moe_shape import MoEShape

    moe = MoEShape(64, 4, 2, 32)
    gqa = DecoderShape(2, 64, 4, 8, 128, 256, kv_heads=2, moe=moe)
    mla = DecoderShape(2, 64, 4, 8, 128, 256, mla=MLAShape(32, 16, 16, 8, 16), moe=moe,
                       mtp_layers=1)  # fmt: skip
    rows = (8.0,) * 4

    def layernorm(kind, m):
        parts = {
            n: (b, {k.name for k in ks}) for n, b, ks in module_parts(kind, m, 2, 2, rows=rows)
        }
        return parts.get("layernorm", (0.0, set()))

    assert layernorm("block", gqa) == (0.0, set())
    assert layernorm("moe_block", gqa) == (2048.0, {"norm2"})
    assert layernorm("block", mla) == (2048.0, {"norm1"})
    assert layernorm("moe_block", mla) == (4096.0, {"norm1", "norm2"})
    assert layernorm("mtp", mla)[0] == 4096.0

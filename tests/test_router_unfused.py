"""Megatron-Core's unfused router per configuration (sim.compute.router_unfused, counted by
scripts/count_router_ops.py) and the readers that choose it."""

from __future__ import annotations

import pytest

from sim.compute.router_unfused import NEMOTRON_H, RouterConfig, counted, router_bwd, router_fwd
from sim.runs.bridge_recipes import recipe_flags
from sim.runs.decoder_express import decoder_shape
from sim.runs.megatron_args import read_megatron


def test_aux_loss_adds_the_ops_the_code_shows():
    """A softmax top-k router in fp32, with and without ``aux_loss``. The loss adds, by the
    "inputs + outputs" rule (r tokens, E experts, k; NVIDIA/Megatron-LM@d98e8a64 moe_utils.py
    ``compute_routing_scores_for_aux_loss`` lines 996-1008, ``switch_load_balancing_loss_func``
    lines 146-150, the token count line 278): softmax 8 rE; topk 4 rE + 12 rk; zeros_like 8 rE
    (its input counted); .int() 8 rE; scatter 8 rE + 8 rk; .bool() 5 rE; the bool map's sum 1 rE
    + 8 E; the scores' sum 4 rE + 4 E; the product 16 E; its sum 4 E + 4; the scalar product 8:
    11 kernels, 46 rE + 20 rk bytes, plus 32 E + 12 that the fit over r = 512 puts in rE."""
    plain, aux = (RouterConfig("softmax", False, loss, False, True) for loss in ("none", "aux"))
    (n0, a0, b0), (n1, a1, b1) = counted(plain)[0], counted(aux)[0]
    assert n1 - n0 == 11
    assert b1 - b0 == 20.0
    assert a1 - a0 == pytest.approx(46 + 32 / 512, abs=0.06)


def test_router_fwd_splits_the_bias_count_off():
    """Forward bytes a r E + b r k over n kernels; with the expert bias its count is the last
    kernel, r E + 8 E bytes. r 2, E 4, k 1 (Nemotron-H: 144.2 * 8 + 76 * 2 = 1305.6)."""
    ks = router_fwd(2, 4, 1, NEMOTRON_H)
    assert sum(k.bytes for k in ks) == pytest.approx(1305.6)
    assert ks[-1].bytes == 2 * 4 + 8 * 4
    plain = RouterConfig("softmax", False, "none", False, True)
    ks = router_fwd(2, 4, 1, plain)  # 49 * 8 + 40 * 2, all named router_topk
    assert sum(k.bytes for k in ks) == pytest.approx(472.0)
    assert {k.name for k in ks} == {"router_topk"}
    assert len(router_bwd(2, 4, 1, plain)) == counted(plain)[1][0]
    with pytest.raises(ValueError, match="not counted"):
        router_fwd(2, 4, 1, RouterConfig("sqrtsoftplus", False, "none", False, True))


MOE = {"num-layers": 2, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
       "micro-batch-size": 1, "global-batch-size": 8, "bf16": True, "vocab-size": 1000,
       "num-experts": 8, "moe-router-topk": 2, "moe-ffn-hidden-size": 32,
       "moe-grouped-gemm": True}  # fmt: skip


def _moe(framework: str = "megatron-lm", **flags):
    run = read_megatron(MOE | flags, name="t", source="<test>", num_gpus=8, gpu="B200",
                        framework=framework)  # fmt: skip
    assert not [n for n in run.args if n.status == "unmapped"]
    return decoder_shape(run.shape, 128, "flash").moe


def test_megatron_lm_runs_the_unfused_router_by_default():
    """Megatron-Core's moe_router_fusion defaults to False (transformer_config.py line 944): a
    Megatron-LM run without --moe-router-fusion is unfused, its score and dtype read; sinkhorn
    routing and a Megatron-Bridge run that does not state it keep the one-kernel model."""
    m = _moe(**{"moe-aux-loss-coeff": "1e-2", "moe-router-dtype": "fp32"})
    assert not m.router_fused
    assert (m.router_score, m.aux_loss, m.router_fp32) == ("softmax", True, True)
    assert _moe(**{"moe-router-score-function": "sigmoid"}).router_score == "sigmoid"
    assert _moe(**{"moe-router-fusion": True}).router_fused
    assert _moe(**{"moe-router-load-balancing-type": "sinkhorn"}).router_fused
    assert _moe("megatron-bridge").router_fused


def test_nemotron_h_recipe_states_its_router():
    """A Nemotron-H recipe with moe_router_fusion off reads as the provider's router
    (Megatron-Bridge v0.4.1 nemotron_h_provider.py lines 48-52): sigmoid, fp32,
    seq_aux_loss 1e-4."""
    f = recipe_flags({"model": "Nemotron_3_Nano", "moe_router_fusion": "False"})
    assert f["moe-router-score-function"] == "sigmoid"
    assert (f["moe-router-dtype"], f["moe-router-load-balancing-type"]) == ("fp32", "seq_aux_loss")
    assert "moe-router-score-function" not in recipe_flags({"model": "Qwen3_30B_a3B",
                                                            "moe_router_fusion": "True"})  # fmt: skip


def test_nemotron_3_ultra_fused_recipe_states_its_providers_loss():
    """Nemotron 3 Ultra's rows keep the fused router (moe_router_fusion True) but its provider
    (Megatron-Bridge@067f987 nemotron_h_bridge.py lines 310-314) sets seq_aux_loss at 1e-4: the
    flags that turn on the fused aux-loss kernels (sim.compute.router_fused), fusion kept."""
    f = recipe_flags({"model": "Nemotron_3_Ultra", "moe_router_fusion": "True"})
    loss = (f["moe-router-load-balancing-type"], f["moe-aux-loss-coeff"])
    assert loss == ("seq_aux_loss", "1e-4")
    assert f["moe-router-fusion"] is True and "no-moe-router-fusion" not in f


def _delta(cfg: RouterConfig, r: int, e: int, k: int) -> list[tuple[int, float]]:
    """Kernels and bytes ``cfg``'s options add, forward and backward."""
    base = cfg._replace(scale=False, groups="", deterministic=False)
    return [(len(f(r, e, k, cfg)) - len(f(r, e, k, base)),
             sum(x.bytes for x in f(r, e, k, cfg)) - sum(x.bytes for x in f(r, e, k, base)))
            for f in (router_fwd, router_bwd)]  # fmt: skip


def test_router_options_add_the_ops_the_code_shows():
    """By the "inputs + outputs" rule, fp32 (NVIDIA/Megatron-LM@d98e8a64 moe_utils.py):
    the scaling factor (lines 933-934) one multiply of the r x k probabilities each way, 8 rk;
    --deterministic-mode (lines 941-951) in place of the two scatters (45 rE + 20 rk, 6 kernels)
    zeros_like 8 rE, arange 8 r, index_put_ 8 rE + 8 r + 12 rk, zeros_like 8 rE, ones_like 8 rk,
    index_put_ 8 rE + 8 r + 12 rk, .bool() 5 rE (7 kernels: 37 rE + 32 rk + 24 r), and in the
    backward the values' index reads the rows, 8 r; group-limited top-k 8/4 with an expert bias
    (lines 706-727; G = 8, g = 4): topk of k/4 per group 4 rE + 24 rk, sum 8 rk + 32 r, topk of
    the groups 32 + 48 r, zeros_like 64 r, scatter_ 96 r, the expanded mask's copy 8 rE, .bool()
    5 rE, ~ 2 rE, masked_fill 9 rE: 9 kernels, 28 rE + 32 rk + 272 r, none backward (only the
    indices are used). r 2, E 16, k 4."""
    plain = RouterConfig("sigmoid", True, "aux", False, True)
    assert _delta(plain._replace(scale=True), 2, 16, 4) == [(1, pytest.approx(64))] * 2
    det = _delta(plain._replace(deterministic=True), 2, 16, 4)
    assert det == [(1, pytest.approx(-8 * 32 + 12 * 8 + 24 * 2)), (0, pytest.approx(8 * 2))]
    grouped = _delta(plain._replace(groups="8/4"), 2, 16, 4)
    assert grouped == [(9, pytest.approx(28 * 32 + 32 * 8 + 272 * 2)), (0, pytest.approx(0))]
    with pytest.raises(ValueError, match="not counted"):
        router_fwd(2, 16, 4, plain._replace(groups="16/4"))


def test_megatron_lm_reads_the_router_options():
    """--moe-router-topk-scaling-factor, --moe-router-num-groups / --moe-router-group-topk and
    --deterministic-mode reach the MoE shape; a group pair not counted keeps the plain top-k."""
    m = _moe(**{"moe-router-topk-scaling-factor": "2.5", "moe-router-num-groups": 4,
                "moe-router-group-topk": 2, "deterministic-mode": True})  # fmt: skip
    assert (m.router_scaled, m.router_groups, m.router_deterministic) == (True, "4/2", True)
    m = _moe(**{"moe-router-num-groups": 2, "moe-router-group-topk": 1})
    assert (m.router_scaled, m.router_groups, m.router_deterministic) == (False, "", False)

"""Megatron-LM's ``--deterministic-mode``: PyTorch fills every tensor allocated through
``empty`` (sim.framework.deterministic). Counts hand-computed from the module's sources."""

from __future__ import annotations

import pytest

from sim.engine.stage_cost import StageCost
from sim.framework.deterministic import layer_fills
from sim.framework.registry import get_framework
from sim.runs.megatron_host_flags import read_host_options


def test_a_te_layer_fills_what_its_modules_allocate():
    # forward: qkv LayerNormLinear (mu, rsigma, ln_out, GEMM out) 4, proj GEMM 1, fc1 4, fc2 1,
    # unfused core 5 (scores, softmax, dropout out + mask, contiguous context) -> 15.
    # backward: qkv dgrad + bias grad + layernorm_bwd (dx, dgamma, dbeta, workspace) 6, proj 1,
    # fc1 dgrad + layernorm_bwd 5, fc2 1, dropout backward 1 -> 14; four wgrad outputs without
    # gradient-accumulation fusion -> 18.
    assert layer_fills("block", "unfused", wgrad_fusion=False) == (15, 18)
    assert layer_fills("block", "unfused", wgrad_fusion=True) == (15, 14)
    # fused core: O, rng_state, workspace, statistics; backward dQKV and workspace
    assert layer_fills("block", "auto") == layer_fills("block", "flash") == (14, 15)
    assert layer_fills("block", "local") == (14, 14)
    # an attention-only half; MoE experts and the embedding are not counted
    assert layer_fills("attention", "unfused", False) == (10, 10)
    assert layer_fills("moe_block", "unfused", False) == (10, 10)
    assert layer_fills("embedding") == layer_fills("mamba") == (0, 0)
    with pytest.raises(ValueError, match="attention_backend"):
        layer_fills("block", "sdpa")


def test_the_megatron_profile_charges_fills_only_in_deterministic_te_layers():
    cost = StageCost(1.0, 2.0, 0.0, 0.0, fwd_ops=160.0, bwd_ops=200.0,
                     fwd_layers=((0.1, 20.0, 0.0, 0.0, 0.0), (0.9, 140.0, 11.0, 8.0, 0.0)),
                     bwd_layers=((0.2, 10.0, 0.0), (1.8, 190.0, 8.0)))  # fmt: skip
    kinds = ["embedding", "block"]
    spec = "megatron-lm[{}attention_backend=unfused,gradient_accumulation_fusion=false]"
    plain = get_framework(spec.format("")).host_captured(cost, kinds)
    det = get_framework(spec.format("deterministic_mode,")).host_captured(cost, kinds)
    assert [b[1] - a[1] for a, b in zip(plain.fwd_layers, det.fwd_layers, strict=True)] == [
        0.0,
        15.0,
    ]
    assert [b[1] - a[1] for a, b in zip(plain.bwd_layers, det.bwd_layers, strict=True)] == [
        0.0,
        18.0,
    ]
    assert (det.fwd_ops - plain.fwd_ops, det.bwd_ops - plain.bwd_ops) == (15.0, 18.0)
    local = "megatron-lm[deterministic_mode,transformer_impl=local]"
    base = get_framework("megatron-lm[transformer_impl=local]").host_captured(cost, kinds)
    assert get_framework(local).host_captured(cost, kinds) == base


def test_the_functional_tests_flags_become_fill_options():
    flags = {"deterministic-mode": True, "attention-backend": "unfused",
             "no-gradient-accumulation-fusion": True}  # fmt: skip
    options, notes = read_host_options(flags)
    assert options == {"deterministic_mode": "true", "attention_backend": "unfused",
                       "gradient_accumulation_fusion": "false"}  # fmt: skip
    assert [n[0] for n in notes] == ["deterministic-mode"]
    # without determinism the two flags add no option (nothing is filled)
    assert read_host_options({"attention-backend": "unfused"})[0] == {}

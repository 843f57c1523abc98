"""HybridEP's own work around its dispatch (sim.compute.hybridep; DeepEP@94a9f8f6 hybrid-ep
``hybrid_ep.cu``, ``executor.cu``; Megatron-LM@d98e8a64 ``token_dispatcher.py``
``_HybridEPManager``): no Transformer Engine permutation, a preprocessing kernel, its own permute
and unpermute over the rows the rank receives, and the routing map all-gathered."""

from __future__ import annotations

import math

import pytest


def test_hybridep_layer_kernels_hand_computed():
    """4 experts, top-2, 2 ranks (2 local experts each), 3 tokens per rank, width 8 in bf16,
    balanced: each rank receives 2 * 3 * (1 - C(2, 2) / C(4, 2)) = 5 rows and computes 3 * 2 = 6
    routed rows (3 per local expert). Forward permute 5*16 + 6*(16 + 8) = 224 bytes, unpermute
    6*16 + 5*16 = 176; preprocessing 3*4*2 (gathered map) + 2*3*2*5 (metadata) = 84; the
    backward runs them the other way round; no TE permute / unpermute anywhere."""
    from sim.compute.moe import moe_bwd, moe_fwd
    from sim.compute.moe_shape import MoEShape

    moe = MoEShape(8, 4, 2, 16, hybridep=True)
    rows = (3.0, 3.0)
    fwd = {k.name: k.bytes for k in moe_fwd(moe, 3, 3, rows, 2)}
    assert fwd["hybridep_permute"] == pytest.approx(224.0)
    assert fwd["hybridep_unpermute"] == pytest.approx(176.0)
    assert fwd["hybridep_preprocess"] == pytest.approx(84.0)
    names = [k.name for k in moe_fwd(moe, 3, 3, rows, 2)]
    assert names.index("hybridep_preprocess") < names.index("token_count_sync")
    assert names.index("token_count_sync") < names.index("hybridep_permute")
    dx, _ = moe_bwd(moe, 3, 3, rows, 2)
    bwd = {k.name: k.bytes for k in dx}
    assert bwd["hybridep_unpermute_bwd"] == pytest.approx(176.0)
    assert bwd["hybridep_permute_bwd"] == pytest.approx(224.0)
    every = set(fwd) | set(bwd)
    assert not every & {"permute", "unpermute", "permute_bwd", "unpermute_bwd"}


def test_hybridep_gathers_the_routing_map_not_the_counts():
    """The forward's all-gather before the dispatch: the bool routing map [r, E] of each of the
    ep sources (r * E * ep bytes) instead of the alltoall dispatcher's int64 counts."""
    from dataclasses import replace

    from sim.compute.decoder import DecoderShape
    from sim.compute.moe_shape import MoEShape
    from sim.compute.routing import Routing
    from sim.parallel.decoder_comm import COUNT_BYTES, group_ops
    from sim.parallel.expert import expert_plan
    from sim.parallel.layout import ParallelLayout

    moe = MoEShape(512, 8, 2, 256)
    m = DecoderShape(2, 512, 8, 256, 1000, 1024, moe=moe)
    par = ParallelLayout(dp_replicate=2, ep=2)
    plan = expert_plan(moe, Routing(), 64, 2, 1, 2)
    gathers = [op.nbytes for op in group_ops("moe_block", m, 1, 2, par, (0.0, 0.0), plan)[0]
               if op.kind == "all_gather"]  # fmt: skip
    assert gathers == [COUNT_BYTES * 8 * 2]
    m = replace(m, moe=replace(moe, hybridep=True))
    gathers = [op.nbytes for op in group_ops("moe_block", m, 1, 2, par, (0.0, 0.0), plan)[0]
               if op.kind == "all_gather"]  # fmt: skip
    assert gathers == [256 * 8 * 2]  # seq_len 256 tokens per rank


def test_hit_share_matches_the_dispatch_model():
    """compute's copy of the closed form agrees with sim.comm.ep_dispatch's."""
    from sim.comm.ep_dispatch import hit_share as comm_hit
    from sim.compute.hybridep import hit_share

    for e, k, m in ((512, 22, 8), (128, 8, 16), (256, 8, 32)):
        assert hit_share(e, k, m) == pytest.approx(comm_hit(e, k, m))
        assert hit_share(e, k, m) == pytest.approx(1 - math.comb(e - m, k) / math.comb(e, k))


def test_unfused_router_replaces_the_one_kernel_topk():
    """Megatron-Core's eager router (moe_router_fusion off; sim.compute.router_unfused, counted
    by scripts/count_router_ops.py): the Nemotron-H router's 31 forward kernels of 144.2 r E +
    76 r k bytes and 24 backward ones of 112.1 r E + 88 r k in place of one router_topk each
    way. Hand-computed: r 2, E 4, k 1: 1305.6 and 1072.8 bytes."""
    from sim.compute.moe import moe_bwd, moe_fwd
    from sim.compute.moe_shape import MoEShape

    moe = MoEShape(8, 4, 1, 16, router_fused=False, router_score="sigmoid", aux_loss=True,
                   random_logits=True, router_expert_bias=True, router_fp32=True)  # fmt: skip
    fwd = [k for k in moe_fwd(moe, 2, 2, (0.5,) * 4, 2) if k.name.startswith("router_topk")]
    dx, _ = moe_bwd(moe, 2, 2, (0.5,) * 4, 2)
    bwd = [k for k in dx if k.name == "router_topk_bwd"]
    assert (len(fwd), len(bwd)) == (31, 24)
    assert sum(k.bytes for k in fwd) == pytest.approx(144.2 * 8 + 76.0 * 2)
    assert sum(k.bytes for k in bwd) == pytest.approx(112.1 * 8 + 88.0 * 2)
    fused = [k for k in moe_fwd(MoEShape(8, 4, 1, 16), 2, 2, (0.5,) * 4, 2)]
    assert [k.name for k in fused].count("router_topk") == 1


def test_bridge_recipe_states_its_router_and_dispatcher():
    """A recipe row with moe_router_fusion False and HybridEP reads as the eager router and
    HybridEP's own permutation (MoEShape.router_fused, MoEShape.hybridep)."""
    from sim.runs.bridge_recipes import recipe_flags

    flags = recipe_flags({"moe_router_fusion": "False (default)",
                          "moe_token_dispatcher_type": "flex",
                          "moe_flex_dispatcher_backend": "hybridep"})  # fmt: skip
    assert flags["no-moe-router-fusion"] is True
    assert flags["moe-flex-dispatcher-backend"] == "hybridep"
    assert "no-moe-router-fusion" not in recipe_flags({"moe_router_fusion": "True"})

"""DeepEP / Hybrid-EP send a token once per destination rank and once per remote server
(sim.comm.ep_dispatch, "Each token once per destination"): hand-computed shares."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sim.comm.alltoall import alltoall_time_s
from sim.comm.ep_dispatch import dedup_scales, dispatch_cost, hit_share
from sim.compute.moe_shape import PROB_BYTES, MoEShape
from sim.compute.routing import Routing
from sim.hardware.loader import load_hardware
from sim.parallel.expert import expert_plan


def test_hit_share_is_one_less_the_chance_of_missing_every_held_expert():
    """8 experts, top-2, 2 held: 1 - C(6,2)/C(8,2) = 1 - 15/28; all held: 1; k = 1: m/E."""
    assert hit_share(8, 2, 2) == pytest.approx(13 / 28)
    assert hit_share(8, 2, 8) == pytest.approx(1.0)
    assert hit_share(8, 1, 3) == pytest.approx(3 / 8)


def test_dispatcher_moves_each_token_once_per_rank_and_per_server():
    """DeepSeek-V3 (256 experts, top-8) over EP 8 inside one DGX B200: a rank's 32 experts
    are chosen by 1 - C(224,8)/C(256,8) of the tokens where the copies count 8*32/256 = 1 row
    per token, so the NVLink bytes (and the bandwidth-bound time) scale by that share. Over
    EP 16 on two servers a remote server's 128 experts: 1 - C(128,8)/C(256,8) against 4 rows."""
    moe = MoEShape(hidden=7168, experts=256, top_k=8, expert_ffn=2048)
    one = load_hardware("dgx-b200")
    plan = expert_plan(moe, Routing(), 4096, 8, 1, 2)
    assert plan.routed == (256, 8)
    gpus = tuple(f"gpu{i}" for i in range(8))
    rank = 1 - math.comb(224, 8) / math.comb(256, 8)
    assert dedup_scales(one, gpus, plan.routed)[0] == pytest.approx(rank / 1.0)
    copies = alltoall_time_s(one, gpus, plan.dispatch, dispatch_cost("deepep", 20))
    once = alltoall_time_s(one, gpus, plan.dispatch, dispatch_cost("deepep", 20, plan.routed))
    latency = max(sum(lk.latency_s for lk in one.route(a, b)) for a in gpus for b in gpus if a != b)
    assert once - latency == pytest.approx((copies - latency) * rank, rel=1e-6)
    two = load_hardware("2x-dgx-b200")
    gpus16 = tuple(f"gpu{i}" for i in range(16))
    inside, per_member = dedup_scales(two, gpus16, (256, 8))
    server = (1 - math.comb(128, 8) / math.comb(256, 8)) / 4
    assert inside == pytest.approx((1 - math.comb(240, 8) / math.comb(256, 8)) / 0.5)
    assert per_member == pytest.approx([server] * 16)
    assert expert_plan(moe, Routing("imbalance", imbalance=2.0), 4096, 8, 1, 2).routed is None


def test_a_capacity_that_drops_nothing_keeps_the_routed_copies():
    """Balanced top-8 over 256 experts, 4096 tokens a source: each expert's share is
    4096*8/256 = 128 rows; capacity factor 1.1 gives ceil(140.8) = 141 >= 128, so nothing is
    dropped and HybridEP still sends each token once per rank (it dispatches by the routing
    map and pads only the permuted rows, Megatron-LM@d98e8a64 token_dispatcher.py 1113-1127):
    a pair carries 32 experts x 128 rows, while padding makes every expert compute 8 x 141
    rows. Without HybridEP the padded rows are sent (32 x 141 a pair) and are not the routed
    copies. A factor 0.5 (cap 64 < 128) drops copies: the pairs are no longer the routed ones."""
    pad = MoEShape(hidden=7168, experts=256, top_k=8, expert_ffn=2048, capacity_factor=1.1,
                   pad_to_capacity=True, hybridep=True)  # fmt: skip
    plan = expert_plan(pad, Routing(), 4096, 8, 1, 2)
    assert plan.routed == (256, 8)
    assert plan.rows[0] == (8 * 141.0,) * 32
    assert plan.dispatch[0][1] == 32 * 128 * (7168 * 2 + PROB_BYTES)
    plain = expert_plan(replace(pad, hybridep=False), Routing(), 4096, 8, 1, 2)
    assert plain.routed is None
    assert plain.dispatch[0][1] == 32 * 141 * (7168 * 2 + PROB_BYTES)
    drop = MoEShape(hidden=7168, experts=256, top_k=8, expert_ffn=2048, capacity_factor=0.5)
    assert expert_plan(drop, Routing(), 4096, 8, 1, 2).routed is None

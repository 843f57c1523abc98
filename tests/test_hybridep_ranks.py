"""Hybrid-EP's NVLink bandwidth by the ranks of its NVLink domain (sim/comm/hybridep_ranks.py):
the GB200 table's kernel-only BF16 means, hand-computed."""

from __future__ import annotations

import pytest

from sim.comm.alltoall import alltoall_time_s
from sim.comm.ep_dispatch import dispatch_cost
from sim.comm.hybridep_ranks import rank_factor
from sim.compute.moe_shape import MoEShape
from sim.compute.routing import Routing
from sim.hardware.loader import load_hardware
from sim.parallel.expert import expert_plan


def test_rank_factor_is_the_measured_mean_over_the_8_rank_mean():
    """32 SMs: 36 ranks (632.31 + 596.99) / (764.03 + 737.13); 20 ranks halfway between 16 and
    24; 16 SMs at 16 ranks (661.93 + 600.75) / (750.15 + 684.27); 24 SMs halfway between the
    two SM counts; up to 8 ranks and beyond 36 clamped."""
    at36 = (632.31 + 596.99) / (764.03 + 737.13)
    assert rank_factor(36, 32) == pytest.approx(at36)
    assert rank_factor(64, 32) == pytest.approx(at36)
    assert rank_factor(4, 32) == pytest.approx(1.0)
    r16, r24 = (706.95 + 666.26) / 1501.16, (665.97 + 639.80) / 1501.16
    assert rank_factor(20, 32) == pytest.approx((r16 + r24) / 2)
    s16 = (661.93 + 600.75) / (750.15 + 684.27)
    assert rank_factor(16, 16) == pytest.approx(s16)
    assert rank_factor(16, 24) == pytest.approx((s16 + r16) / 2)


def _bandwidth_part(topo, ep: int) -> float:
    """Hybrid-EP dispatch time of a GPT-OSS-like layer (128 experts, top-4, 16384 tokens of
    2880) over the first ``ep`` GPUs, less the routes' latency."""
    moe = MoEShape(hidden=2880, experts=128, top_k=4, expert_ffn=2880)
    plan = expert_plan(moe, Routing(), 16384, ep, 1, 2)
    gpus = tuple(f"gpu{i}" for i in range(ep))
    lat = max(sum(lk.latency_s for lk in topo.route(a, b)) for a in gpus for b in gpus if a != b)
    cost = dispatch_cost("hybridep", 32, plan.routed)
    return alltoall_time_s(topo, gpus, plan.dispatch, cost) - lat


def test_nvlink_bytes_move_at_the_rank_factor_of_the_domain_members(monkeypatch):
    """EP 32 inside one GB200 NVL72 rack (32 members in its NVLink domain): the NVLink-bound
    time is the unscaled one over rank_factor(32, 32); EP 64 on eight DGX B200 servers has 8
    members per server: factor 1, unchanged."""
    rack, b200 = load_hardware("gb200-nvl72"), load_hardware("8x-dgx-b200")
    scaled, scaled_b200 = _bandwidth_part(rack, 32), _bandwidth_part(b200, 64)
    monkeypatch.setattr("sim.comm.ep_dispatch.rank_factor", lambda ranks, sms: 1.0)
    plain, plain_b200 = _bandwidth_part(rack, 32), _bandwidth_part(b200, 64)
    assert plain > 0 and scaled == pytest.approx(plain / rank_factor(32, 32), rel=1e-9)
    assert scaled_b200 == pytest.approx(plain_b200, rel=1e-9)

"""Megatron's combined 1F1B step holds its forward's and its backward's stashes layer by layer
(:mod:`sim.memory.overlapped`): by hand, and the rank model and the engine's ledger on one MoE
point."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.moe_shape import MoEShape
from sim.memory.overlapped import overlapped_stash_peak
from sim.point.memory import point_memory
from sim.point.simulate import evaluate, resolve
from tests.test_memory_frameworks import SHAPE, _point, _prepared


def test_a_combined_step_holds_one_stash_and_a_layer():
    """Embedding 1, two blocks 4, head 2 (stash 11) for both micro-batches. Megatron's order:
    t = 0 forward [1] with the backward's whole 11 (its head's backward runs): 12; t = 1 the
    forward's block 0 with the backward's block 1, the head released: 5 + 9 = 14; t = 2:
    9 + 5; t = 3: 11 + 1. Peak 14, where a forward before the backward holds 22."""
    stash = [1.0, 4.0, 4.0, 2.0]
    assert overlapped_stash_peak(stash, stash) == 14.0
    assert overlapped_stash_peak([3.0], [5.0]) == 8.0  # one layer each: both alive
    assert overlapped_stash_peak([1.0, 1.0], []) == 2.0  # no backward: the forward's


def test_sim_memory_and_the_engine_hold_a_combined_step_layer_by_layer():
    """A 4-block MoE decoder, Megatron with overlap_moe_expert_parallel_comm, ep 4, p 1: the
    combined step's peak is the stash S times the largest step of the layers' shares, not 2 S;
    the rank model and the engine's ledger agree."""
    moe = MoEShape(hidden=1024, experts=8, top_k=2, expert_ffn=2048)
    shape = replace(SHAPE, layers=4, hidden=1024, heads=8, kv_heads=8, ffn_hidden=4096,
                    seq_len=4096, moe=moe)  # fmt: skip
    fw = "megatron-lm[overlap_moe_expert_parallel_comm]"
    prep = _prepared(fw, shape=shape)
    point = _point(fw, w=4, m=4, expert_parallel=4, policy="none")
    res = resolve(prep.exp, point, prep.topology, prep.traces["tiny"], shared=prep)
    plan = res.sim_input.plans[0][0]
    shares = plan.layer_shares
    assert len(shares) == 6 and sum(shares) == pytest.approx(1.0)  # embedding, 4 blocks, head
    kept = plan.resident_act_bytes
    emb, block, head = shares[0], shares[1], shares[5]
    # t = 1: the forward's embedding and block 0 with the backward's embedding and 4 blocks
    # less the head (t = 0: emb + 1; later steps are smaller)
    want = kept * (emb + block + 1.0 - head)
    assert want == pytest.approx(kept * overlapped_stash_peak(shares, shares))
    pm = point_memory(prep, point)
    assert pm.ranks[0].by_category["activations"] == pytest.approx(want)
    assert pm.ranks[0].peak_at == "0F+0B"
    metrics, _ = evaluate(res)
    assert pm.ranks[0].device_bytes == pytest.approx(metrics.peak_memory_bytes, rel=0.005)

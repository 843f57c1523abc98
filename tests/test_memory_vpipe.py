"""vPipe (per-layer keep / swap / recompute with repartitioned layers) and GPipe's whole-partition
checkpointing (``recompute:partition``): parsing, hand-checked plans, the repartition's moves."""

from __future__ import annotations

import pytest

from sim.memory.recompute import RecomputePolicy
from sim.memory.registry import parse_policy
from sim.memory.vpipe import VPipePolicy, moves
from tests.helpers import chain_topology
from tests.policy_helpers import run, tiny_gpt

GiB = 2.0**30


def test_partition_mode_parses_and_takes_no_count():
    assert RecomputePolicy.from_args(["partition"]).mode == "partition"
    with pytest.raises(ValueError, match="takes no further parameter"):
        RecomputePolicy.from_args(["partition", "2"])
    assert RecomputePolicy("partition").bound_recompute_mode() == "full"


def test_partition_recomputes_every_layer_of_the_stage_full_only_the_blocks():
    """``full`` recomputes the blocks' forward; ``partition`` the whole stage's (the embedding
    and head too): its recompute seconds per micro-batch are the sum of those layers' forward."""
    trace = tiny_gpt(layers=4)
    topo = chain_topology(2, memory_bytes=64 * GiB)
    m = 4
    for policy, blocks_only in (("recompute", True), ("recompute:partition", False)):
        res, _, _ = run(trace, topo, policy, m=m)
        b = res.boundaries
        for s, plan in enumerate(res.sim_input.plans[0]):
            end = b[s + 1] if s + 1 < len(b) else len(trace.layers)
            layers = list(trace.layers[b[s] : end])
            if blocks_only:
                layers = [x for x in layers if x.name.startswith("block")]
            assert plan.recompute_s == pytest.approx(sum(x.fwd_s for x in layers)), policy


def test_moves_keep_stages_non_empty():
    assert moves((0, 1), 2) == []
    assert moves((0, 1, 2), 4) == [(0, 1, 3)]
    for b in moves((0, 3, 5, 9), 12):
        edges = [*b, 12]
        assert all(x < y for x, y in zip(edges, edges[1:], strict=False))


def test_vpipe_is_registered_and_repartitions():
    policy = parse_policy("vpipe")
    assert isinstance(policy, VPipePolicy) and policy.repartitions


def test_vpipe_never_leaves_a_slower_bottleneck_than_it_started_from():
    """The local search only takes moves that lower the bottleneck (module doc): the notes'
    bottleneck after is at most the one before; every stage keeps a layer."""
    trace = tiny_gpt(layers=8)
    topo = chain_topology(4, memory_bytes=64 * GiB)
    res, _, _ = run(trace, topo, "vpipe", p=4, m=8)
    note = next(n for n in res.compute_notes if "repartitioned" in n)
    before = float(note.split("bottleneck_ms_before ")[1].split(",")[0])
    after = float(note.split("bottleneck_ms_after ")[1].split(",")[0])
    assert after <= before
    assert len(res.boundaries) == 4

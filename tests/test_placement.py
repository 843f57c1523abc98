"""Stage-to-GPU placement follows the topology."""

from __future__ import annotations

from itertools import permutations

import pytest

from sim.hardware.loader import load_hardware
from sim.parallel.placement import _exhaustive, _pair_scores, _ring_score, place


def _pipeline_bandwidths(topo, rows):
    return [
        topo.route_bandwidth_Bps(f"gpu{r[i]}", f"gpu{r[i + 1]}")
        for r in rows
        for i in range(len(r) - 1)
    ]


def test_dgx1_eight_stages_ride_double_nvlinks():
    topo = load_hardware("dgx1-v100-16gb")
    rows = place(topo, 8, 1)
    assert sorted(rows[0]) == list(range(8))
    nv2 = topo.direct_link("gpu0", "gpu3").bandwidth_Bps
    assert all(bw == nv2 for bw in _pipeline_bandwidths(topo, rows))
    # the identity order would cross pairs without NVLink (e.g. gpu3 -> gpu4)
    assert topo.direct_link("gpu3", "gpu4") is None


@pytest.mark.parametrize("p,w", [(2, 4), (4, 2), (2, 2), (4, 1)])
def test_dgx1_replicas_use_distinct_gpus_and_nvlink_neighbours(p, w):
    topo = load_hardware("dgx1-v100-16gb")
    rows = place(topo, p, w)
    flat = [g for r in rows for g in r]
    assert len(flat) == len(set(flat)) == p * w
    for r in rows:
        for a, b in zip(r, r[1:], strict=False):
            assert topo.direct_link(f"gpu{a}", f"gpu{b}") is not None


def test_too_many_gpus_is_an_error():
    with pytest.raises(ValueError, match="need 16 GPUs"):
        place(load_hardware("dgx1-v100-16gb"), 8, 2)


def test_uniform_fabric_keeps_identity_order():
    topo = load_hardware("dgx-a100-40gb")
    assert place(topo, 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("p,w", [(4, 2), (2, 2), (3, 2)])
def test_dgx1_data_parallel_peers_share_nvlink(p, w):
    """The replicas of every stage are NVLink neighbours (their all-reduce would otherwise go
    through host memory at 12.5 GB/s), and pipeline neighbours still are."""
    topo = load_hardware("dgx1-v100-16gb")
    rows = place(topo, p, w)
    for s in range(p):
        a, b = rows[0][s], rows[1][s]
        assert topo.direct_link(f"gpu{a}", f"gpu{b}") is not None
    for r in rows:
        for a, b in zip(r, r[1:], strict=False):
            assert topo.direct_link(f"gpu{a}", f"gpu{b}") is not None


def test_dgx1_four_replicas_ring_over_nvlink():
    """p=2, w=4: each stage's 4 replicas have a ring whose every hop is one NVLink."""
    topo = load_hardware("dgx1-v100-16gb")
    rows = place(topo, 2, 4)
    for s in range(2):
        gpus = tuple(f"gpu{row[s]}" for row in rows)
        order = topo.ring(gpus)
        for a, b in zip(order, order[1:] + order[:1], strict=True):
            assert topo.direct_link(a, b) is not None


@pytest.mark.parametrize("p,w", [(2, 2), (2, 3), (3, 2), (4, 2)])
def test_exhaustive_search_is_the_first_best_of_every_assignment(p, w):
    """The depth-first search returns what scoring every permutation in order returns (the
    definition in sim.parallel.placement's docstring), ties broken the same way."""
    topo = load_hardware("dgx1-v100-16gb")
    bw = _pair_scores(topo)
    best, choice = -1.0, None
    for perm in permutations(range(topo.num_gpus), p * w):
        rows = [perm[r * p : (r + 1) * p] for r in range(w)]
        if any(rows[r][0] > rows[r + 1][0] for r in range(w - 1)):
            continue
        score = sum(
            bw[row[s]][row[s + 1]] + bw[row[s + 1]][row[s]] for row in rows for s in range(p - 1)
        )
        score += sum(_ring_score(topo, tuple(sorted(row[s] for row in rows))) for s in range(p))
        if score > best * (1 + 1e-12):
            best, choice = score, perm
    assert _exhaustive(topo, bw, p, w) == choice


def test_across_servers_ranks_follow_megatron_order():
    """Across servers (2 x DGX A100, 16 GPUs): replica ``r`` of stage ``s`` is GPU ``r + w s``
    (Megatron ``tp-cp-ep-dp-pp``, DeepSpeed ``pipe, data, model``; here ``t = 1``): with
    ``p = 4, w = 4`` stage 0's data-parallel group is GPUs 0-3 (one server) and the pipeline
    crosses to the second server between stages 1 and 2; within one server the search
    decides (an NVSwitch box: the identity order, replicas consecutive)."""
    grid = place(load_hardware("2x-dgx-a100-40gb"), 4, 4)
    assert [row[0] for row in grid] == [0, 1, 2, 3]
    assert grid[0] == [0, 4, 8, 12]
    assert place(load_hardware("dgx-a100-40gb"), 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]

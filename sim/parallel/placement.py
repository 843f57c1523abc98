"""Mapping of (replica, stage) to GPUs so that pipeline neighbours and data-parallel peers share
fast links.

The score of a GPU pair is its route's bandwidth / hops² (a route through host memory or a
switch ranks below a direct link of the same bandwidth); routes are the ones the traffic takes
(:meth:`~sim.hardware.topology.Topology.route`: a pipeline send uses only its two GPUs, a
data-parallel ring only its replicas). A placement scores, per replica, both directions of every
pipeline neighbour pair (activations go one way, gradients the other), plus, per stage, every
hop of the ring its ``w`` replicas all-reduce over (:meth:`~sim.hardware.topology.Topology.ring`).

Search: with one replica, the best GPU ordering is a max-weight path (Held-Karp dynamic
programming over subsets, exact for up to 10 GPUs); with several, every assignment of
``p*w`` GPUs is scored (replicas in order of their first GPU, the others are the same placement)
when there are at most 50 000 of them, e.g. any p x w on an 8-GPU server; beyond that the
pipelines alone are optimised (Held-Karp) and the data-parallel term is not. Placement is
skipped (identity order) when nothing differs: one stage and every GPU used, or a uniform fabric
(all pairs score the same, e.g. NVSwitch boxes). On DGX-1 this finds the NV2 (50 GB/s) path of
the hybrid cube-mesh, and keeps data-parallel peers on NVLink instead of across the sockets.

Across servers (a cluster, ``Nx-PRESET``) nothing is searched: the ranks follow the frameworks'
rank order, as tensor-parallel groups do (:func:`sim.parallel.groups.tensor_groups` with
``t = 1``): Megatron-LM's ``tp-cp-ep-dp-pp`` and DeepSpeed's ``PipeModelDataParallelTopology``
(axes ``pipe, data, model``) put the data-parallel ranks of a stage next to each other and the
pipeline outermost, so replica ``r`` of stage ``s`` is GPU ``r + w s``: a stage's data-parallel
group fills as few servers as it can, and pipeline neighbours are ``w`` GPUs apart (across
servers once ``w`` fills one). Before, the identity order made replicas consecutive (stage
innermost), which put every stage's data-parallel group across all the servers and kept the
pipeline inside them: no framework pipesim models runs that way.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations

from sim.hardware.topology import Topology
from sim.parallel.groups import tensor_groups

MAX_ASSIGNMENTS = 50_000
"""Largest number of (p x w) assignments scored exhaustively (about a second in Python)."""


def place(topology: Topology, stages: int, dp_width: int) -> list[list[int]]:
    """GPU index for every ``[replica][stage]``.

    Raises:
        ValueError: ``stages * dp_width`` exceeds the number of GPUs.
    """
    k = stages * dp_width
    n = topology.num_gpus
    if k > n:
        raise ValueError(
            f"{stages} stages x {dp_width} replicas need {k} GPUs; {topology.name} has {n}"
        )
    if len(topology.servers) > 1:  # a cluster: the frameworks' rank order (module doc)
        return [[g[0] for g in row] for row in tensor_groups(topology, stages, dp_width, 1)]
    order = _best_order(topology, stages, dp_width)
    return [list(order[r * stages : (r + 1) * stages]) for r in range(dp_width)]


def _pair_scores(topology: Topology) -> tuple[tuple[float, ...], ...]:
    """Score of each GPU pair as a p2p pair: route bandwidth / hops²."""
    n = topology.num_gpus

    def score(i: int, j: int) -> float:
        route = topology.route(f"gpu{i}", f"gpu{j}")
        return min(lk.bandwidth_Bps for lk in route) / len(route) ** 2

    return tuple(tuple(0.0 if i == j else score(i, j) for j in range(n)) for i in range(n))


def _ring_score(topology: Topology, gpus: tuple[int, ...]) -> float:
    """Sum over the hops of the ring NCCL would use over ``gpus`` of bandwidth / hops²."""
    names = tuple(f"gpu{g}" for g in gpus)
    comm = frozenset(names)
    order = topology.ring(names)
    total = 0.0
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        route = topology.route(a, b, within=comm)
        total += min(lk.bandwidth_Bps for lk in route) / len(route) ** 2
    return total


@lru_cache(maxsize=64)
def _best_order(topology: Topology, stages: int, dp_width: int) -> tuple[int, ...]:
    n, k = topology.num_gpus, stages * dp_width
    if (stages == 1 and k == n) or n > 10:  # nothing to choose, or too many to search
        return tuple(range(k))
    bw = _pair_scores(topology)
    if len({bw[i][j] for i in range(n) for j in range(n) if i != j}) <= 1:
        return tuple(range(k))
    if dp_width == 1:
        return _held_karp(bw, stages, k)
    if stages == 1:
        return _best_ring_subset(topology, k)
    if math.perm(n, k) // math.factorial(dp_width) > MAX_ASSIGNMENTS:
        return _held_karp(bw, stages, k)
    return _exhaustive(topology, bw, stages, dp_width)


def _best_ring_subset(topology: Topology, k: int) -> tuple[int, ...]:
    """One stage, ``k`` replicas: the ``k`` GPUs whose ring scores best (first in order)."""
    best, choice = -1.0, tuple(range(k))
    for subset in combinations(range(topology.num_gpus), k):
        score = _ring_score(topology, subset)
        if score > best * (1 + 1e-12):
            best, choice = score, subset
    return choice


def _exhaustive(topology: Topology, bw, stages: int, dp_width: int) -> tuple[int, ...]:
    """Every assignment (replica rows in order of their first GPU), the best first found.

    The assignments are the ``k``-permutations of the GPUs in :func:`itertools.permutations`'
    (lexicographic) order, less those whose replica rows are out of order, generated depth
    first: a row started out of order is skipped whole, and the pipeline term (row by row)
    and the ring term (column by column, each column's GPUs as a bit mask) are summed once
    per prefix, in the same order as over whole assignments (so the same floating-point sums).
    """
    n, k = topology.num_gpus, stages * dp_width
    last_row = k - stages
    ring: dict[int, float] = {}  # GPU bit mask of a stage's replicas -> its ring's score

    def column(mask: int) -> float:
        got = ring.get(mask)
        if got is None:
            gpus = tuple(g for g in range(n) if mask >> g & 1)
            got = ring[mask] = _ring_score(topology, gpus)
        return got

    best, choice = -1.0, tuple(range(k))
    perm = [0] * k
    used = [False] * n
    masks = [0] * stages  # GPUs of each stage's replicas placed so far

    def extend(i: int, pipe: float, cols: float) -> None:
        nonlocal best, choice
        if i == k:
            score = pipe + cols
            if score > best * (1 + 1e-12):
                best, choice = score, tuple(perm)
            return
        s = i % stages
        lowest = perm[i - stages] + 1 if s == 0 and i else 0  # rows in order of first GPU
        for g in range(lowest, n):
            if used[g]:
                continue
            perm[i], used[g] = g, True
            masks[s] ^= 1 << g
            prev = perm[i - 1]
            extend(
                i + 1,
                pipe if s == 0 else pipe + (bw[prev][g] + bw[g][prev]),
                cols + column(masks[s]) if i >= last_row else cols,
            )
            masks[s] ^= 1 << g
            used[g] = False

    extend(0, 0, 0)
    return choice


@lru_cache(maxsize=64)
def _held_karp(bw: tuple[tuple[float, ...], ...], stages: int, k: int) -> tuple[int, ...]:
    """Max-weight path over ``k`` of the GPUs; edges at replica boundaries weigh nothing."""
    n = len(bw)
    best: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {
        (1 << i, i): (0.0, (i,)) for i in range(n)
    }
    for size in range(1, k):
        layer = {key: val for key, val in best.items() if bin(key[0]).count("1") == size}
        for (mask, last), (score, path) in sorted(layer.items()):
            for j in range(n):
                if mask & (1 << j):
                    continue
                gain = 0.0 if size % stages == 0 else bw[last][j]
                key = (mask | (1 << j), j)
                cand = (score + gain, path + (j,))
                if key not in best or cand[0] > best[key][0] + 1e-9:
                    best[key] = cand
    full = [(score, path) for (mask, _), (score, path) in best.items() if bin(mask).count("1") == k]
    top = max(score for score, _ in full)
    return min(path for score, path in full if score >= top - 1e-9)

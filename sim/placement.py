"""Mapping of (replica, stage) to GPUs so that neighbouring stages share fast links.

Pipeline replica ``r`` of depth ``p`` takes positions ``r*p .. r*p+p-1`` of a GPU ordering; the
ordering is the path through ``p*w`` GPUs that maximises the summed score (route bandwidth /
hops²) between consecutive stages of each replica (Held-Karp dynamic programming over subsets, exact for up to
10 GPUs; identity order beyond that or when all pairs are equal, e.g. NVSwitch boxes). On DGX-1
this finds the NV2 (50 GB/s) Hamiltonian path of the hybrid cube-mesh.
"""

from __future__ import annotations

from functools import lru_cache

from sim.hardware.topology import Topology


def place(topology: Topology, stages: int, dp_width: int) -> list[list[int]]:
    """GPU index for every ``[replica][stage]``.

    Raises:
        ValueError: ``stages * dp_width`` exceeds the number of GPUs.
    """
    k = stages * dp_width
    n = topology.num_gpus
    if k > n:
        raise ValueError(f"{stages} stages x {dp_width} replicas need {k} GPUs; "
                         f"{topology.name} has {n}")
    order = _best_order(topology, stages, dp_width)
    return [list(order[r * stages:(r + 1) * stages]) for r in range(dp_width)]


def _bandwidth_matrix(topology: Topology) -> tuple[tuple[float, ...], ...]:
    """Score of each GPU pair: route bandwidth / hops², so a relayed route (which also loads
    the relay GPU's links) ranks below a direct link of the same bandwidth."""
    n = topology.num_gpus

    def score(i: int, j: int) -> float:
        a, b = f"gpu{i}", f"gpu{j}"
        return topology.route_bandwidth_Bps(a, b) / len(topology.route(a, b)) ** 2

    return tuple(tuple(0.0 if i == j else score(i, j) for j in range(n)) for i in range(n))


def _best_order(topology: Topology, stages: int, dp_width: int) -> tuple[int, ...]:
    k = stages * dp_width
    if stages == 1 or topology.num_gpus > 10:  # no pipeline neighbours, or too many to search
        return tuple(range(k))
    bw = _bandwidth_matrix(topology)
    n = len(bw)
    off = {bw[i][j] for i in range(n) for j in range(n) if i != j}
    if len(off) <= 1:
        return tuple(range(k))
    return _held_karp(bw, stages, k)


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
    full = [(score, path) for (mask, _), (score, path) in best.items()
            if bin(mask).count("1") == k]
    top = max(score for score, _ in full)
    return min(path for score, path in full if score >= top - 1e-9)

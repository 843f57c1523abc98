"""All-to-all on the topology: every pair's bytes on its route, every link's load counted.

``torch.distributed.all_to_all_single`` on NCCL (``ProcessGroupNCCL::alltoall_base`` ->
``torch/csrc/cuda/nccl.cpp`` ``all2all_single_equal_split`` / ``all2all_single_unequal_split``)
is one NCCL group of a ``ncclSend`` and a ``ncclRecv`` per peer: all pairs move at once. Pair
``(i, j)`` carries ``B_ij`` bytes over the route ``i -> j`` (:meth:`~sim.hardware.topology.
Topology.route`), so link ``l`` carries ``L_l = sum of B_ij over the pairs whose route crosses
l``. The all-to-all ends when the most loaded link has drained (each link moves its load at
NCCL's rate, :meth:`~sim.hardware.parts.Link.rate_Bps`):

    ``t = max over links of L_l / rate_l  +  max over pairs of their route's latency``

This is the per-link load model, not an average: an imbalanced routing or a cross-server pair
that funnels through one NIC shows up on the link it loads. It assumes the flows sharing a
link split it without loss and that nothing else limits a pair. Where every member runs NCCL
(a GPU with a compute capability), each pair is an NCCL send (:func:`nccl_time_s`, the default
then): its protocol by size (LL up to ``NCCL_P2P_LL_THRESHOLD`` = 16 KiB, moving at a third of
the rate, Simple above; NCCL ``src/enqueue.cc``) and its latency NCCL's
(:func:`sim.comm.nccl.p2p_time_s`), in place of the links' latencies. The cost is a plug-in
(:data:`AllToAllCost`): :func:`alltoall_time_s` takes any function with the same signature.

Bus bandwidth as nccl-tests reports it for a balanced all-to-all of ``B`` bytes per rank
(``doc/PERFORMANCE.md``): ``busbw = algbw * (n-1)/n`` with ``algbw = B / t``; on one NVSwitch
with per-GPU link rate ``R`` the model gives ``busbw = R`` for large ``B``.

Where the hardware carries a measured all-to-all of the members' number over their servers
(``collectives:`` of kind ``alltoall``, :mod:`sim.hardware.comm_tables`), the default cost is
that table at nccl-tests' size ``B``: the most any member sends or receives, times
``n / (n - 1)`` (nccl-tests' send buffer holds one chunk for the rank itself)
(:func:`table_time_s`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from sim.comm import nccl
from sim.comm.rings import PEER_KINDS
from sim.hardware.comm_tables import find_table
from sim.hardware.parts import Link
from sim.hardware.topology import Topology

Matrix = Sequence[Sequence[float]]
AllToAllCost = Callable[[Topology, Sequence[str], Matrix], float]
"""``(topology, member GPU names, bytes[i][j]) -> seconds``."""


def routed_pairs(
    topology: Topology, gpus: Sequence[str], pairs: Matrix
) -> Iterator[tuple[int, int, float, tuple[Link, ...]]]:
    """``(i, j, bytes, route)`` for every pair of an all-to-all among ``gpus`` that moves bytes
    (``pairs[i][j] > 0`` off the diagonal), rows first, with ``topology.route(gpus[i], gpus[j])``.

    Raises:
        ValueError: ``pairs`` is not ``len(gpus)`` x ``len(gpus)``.
    """
    n = len(gpus)
    if len(pairs) != n or any(len(row) != n for row in pairs):
        raise ValueError(f"an all-to-all among {n} GPUs needs a {n} x {n} byte matrix")
    for i, src in enumerate(gpus):
        for j, dst in enumerate(gpus):
            nb = pairs[i][j]
            if i != j and nb > 0:
                yield i, j, nb, topology.route(src, dst)


def link_loads(topology: Topology, gpus: Sequence[str], pairs: Matrix) -> dict[str, float]:
    """Bytes every link carries in an all-to-all among ``gpus`` (``pairs[i][j]`` from
    ``gpus[i]`` to ``gpus[j]``; the diagonal stays local).

    Raises:
        ValueError: ``pairs`` is not ``len(gpus)`` x ``len(gpus)``.
    """
    loads: dict[str, float] = {}
    for _, _, nb, route in routed_pairs(topology, gpus, pairs):
        for lk in route:
            loads[lk.name] = loads.get(lk.name, 0.0) + nb
    return loads


def links_used(topology: Topology, gpus: Sequence[str], pairs: Matrix) -> tuple[Link, ...]:
    """The links an all-to-all among ``gpus`` crosses (those with a load), in name order."""
    names = set(link_loads(topology, gpus, pairs))
    return tuple(sorted((lk for lk in topology.links if lk.name in names), key=lambda x: x.name))


def link_load_time_s(topology: Topology, gpus: Sequence[str], pairs: Matrix) -> float:
    """Seconds of the all-to-all by the per-link load model (module doc); 0 if nothing moves.

    Raises:
        ValueError: as :func:`link_loads`.
    """
    loads = link_loads(topology, gpus, pairs)
    if not loads:
        return 0.0
    by_name = {lk.name: lk for lk in topology.links}
    drain = max(load / by_name[name].rate_Bps(nccl=True) for name, load in loads.items())
    latency = max(
        sum(lk.latency_s for lk in route) for *_, route in routed_pairs(topology, gpus, pairs)
    )
    return drain + latency


def _runs_nccl(topology: Topology, gpus: Sequence[str]) -> bool:
    return all(
        g.startswith("gpu") and topology.gpu(int(g[3:])).compute_capability is not None
        for g in gpus
    )


def nccl_time_s(topology: Topology, gpus: Sequence[str], pairs: Matrix) -> float:
    """Seconds of the all-to-all as a group of NCCL sends (module doc): every link drains its
    pairs' bytes at its NCCL rate (a third of it for the LL pairs), plus the largest pair's
    NCCL protocol latency. 0 if nothing moves.

    Raises:
        ValueError: as :func:`link_loads`.
    """
    drain: dict[str, float] = {}
    latency = 0.0
    for _, _, nb, route in routed_pairs(topology, gpus, pairs):
        kinds = {lk.kind for lk in route}
        hw = nccl.NET if "network" in kinds else nccl.NVLINK if kinds <= PEER_KINDS else nccl.PCI
        slow = 3.0 if nb <= nccl.P2P_LL_THRESHOLD else 1.0
        latency = max(latency, nccl.p2p_time_s(hw, math.inf, nb))  # its protocol latency
        for lk in route:
            drain[lk.name] = drain.get(lk.name, 0.0) + slow * nb / lk.rate_Bps(nccl=True)
    return max(drain.values(), default=0.0) + (latency if drain else 0.0)


def table_time_s(topology: Topology, gpus: Sequence[str], pairs: Matrix) -> float | None:
    """Seconds of the all-to-all from the hardware's measured all-to-all table (module doc), or
    None when it has none for ``len(gpus)`` members over their servers."""
    n = len(gpus)
    servers = len({topology.server_of(int(g[3:])) for g in gpus if g.startswith("gpu")})
    table = find_table(topology.collectives, "alltoall", n, servers)
    if table is None or n < 2:
        return None
    sent = max(sum(row) - row[i] for i, row in enumerate(pairs))
    got = max(sum(pairs[i][j] for i in range(n)) - pairs[j][j] for j in range(n))
    most = max(sent, got)
    return table.time_s(most * n / (n - 1)) if most > 0 else 0.0


def alltoall_time_s(
    topology: Topology, gpus: Sequence[str], pairs: Matrix, cost: AllToAllCost | None = None
) -> float:
    """Seconds of an all-to-all among ``gpus`` with ``pairs[i][j]`` bytes from ``i`` to ``j``:
    ``cost``'s; default the hardware's measured table (:func:`table_time_s`), else
    :func:`nccl_time_s` where every member runs NCCL, else :func:`link_load_time_s`."""
    if cost is None:
        measured = table_time_s(topology, gpus, pairs)
        if measured is not None:
            return measured
        cost = nccl_time_s if _runs_nccl(topology, gpus) else link_load_time_s
    return cost(topology, gpus, pairs)


def even_pairs(n: int, nbytes: float) -> tuple[tuple[float, ...], ...]:
    """The matrix of a balanced all-to-all: every rank sends ``nbytes`` split evenly over the
    ``n - 1`` others."""
    each = nbytes / (n - 1) if n > 1 else 0.0
    return tuple(tuple(0.0 if i == j else each for j in range(n)) for i in range(n))

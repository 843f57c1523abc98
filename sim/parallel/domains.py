"""Groups that must share an NVLink domain: a server, or a GB200 / GB300 NVL72 rack.

The GPUs of one NVLink domain (a DGX server's 8, an NVL72 rack's 72: the topology's
:attr:`~sim.hardware.topology.Topology.servers`) reach each other over NVLink; between domains
traffic crosses the network (NICs, leaf and spine switches). Launchers place a job so that its
communication-heavy groups stay inside a domain: Megatron-LM's rank order puts tensor
parallelism innermost (Narayanan et al. SC'21 §3.3), and on NVL72 racks a job whose expert
parallelism spans 64 GPUs takes 64 GPUs of each rack (16 of its 18 compute trays; NVIDIA's
GB200 NVL72 Megatron-Bridge recipes run DeepSeek-V3 with EP 64 on 256 GPUs,
``scripts/performance/configs/deepseek/deepseek_workload_base_configs.py``), leaving the others
idle, rather than letting the all-to-alls cross racks.

:func:`unit_replicas` is the smallest run of consecutive replicas (the engine's ``dp x cp``
ranks, context rank innermost) that holds whole context-parallel, expert-parallel and FSDP
shard groups of a stage (the folded expert mesh's included, :mod:`sim.parallel.folding`);
:func:`domain_groups` gives every ``[replica][stage][tensor rank]`` a GPU so that each unit of
each stage sits in one domain when it fits one (first fit, domains in order), takes whole
domains when it is a multiple of one, and otherwise (a unit that cannot avoid straddling) the
next free GPUs. When every unit divides the domain it is the consecutive assignment of
:func:`sim.parallel.groups.tensor_groups` (stage-major, replica, tensor rank innermost).
"""

from __future__ import annotations

import itertools
import math

from sim.hardware.topology import Topology
from sim.parallel.layout import ParallelLayout

Groups = tuple[tuple[tuple[int, ...], ...], ...]
"""GPU index per ``[replica][stage][tensor rank]``."""


def unit_replicas(lay: ParallelLayout) -> int:
    """Consecutive replicas of one stage that must share a domain (module doc): ``lcm(cp,
    ep, dp_shard x cp)`` without folding; with folding the stage ranks ``lcm(t x cp, ep x etp)``
    over ``t``.

    >>> unit_replicas(ParallelLayout(dp_replicate=64, ep=64)), unit_replicas(ParallelLayout(cp=2))
    (64, 2)
    >>> unit_replicas(ParallelLayout(dp_replicate=32, tp=2, ep=64, etp=1))
    32
    """
    groups = [lay.cp, lay.shard_size]
    if lay.etp is None:
        groups.append(lay.ep)
    else:
        groups.append(max(1, math.lcm(lay.tp * lay.cp, lay.ep * lay.expert_tp) // lay.tp))
    return min(math.lcm(*groups), lay.replicas)


def _take(free: list[list[int]], size: int, n: int, first: int = 0) -> list[int]:
    """The next ``n`` GPUs for one unit from the domains' free GPUs ``free`` (domains of
    ``size`` GPUs), taken out of ``free`` (module doc); the search for a domain (or a run of
    whole domains) that holds the unit starts at domain ``first`` (:func:`_first`).

    Raises:
        ValueError: not enough free GPUs.
    """
    if n <= size:
        for dom in itertools.islice(free, first, None):
            if len(dom) >= n:
                out, dom[:] = dom[:n], dom[n:]
                return out
    elif n % size == 0:
        k = n // size
        for i in range(first, len(free) - k + 1):
            if all(len(d) == size for d in free[i : i + k]):
                out = [g for d in free[i : i + k] for g in d]
                for d in free[i : i + k]:
                    d.clear()
                return out
    flat = [g for d in free for g in d]
    if len(flat) < n:
        raise ValueError(f"no {n} free GPUs left")
    out, taken = flat[:n], set(flat[:n])
    for d in free:
        d[:] = [g for g in d if g not in taken]
    return out


def _first(free: list[list[int]], size: int, n: int, first: int) -> int:
    """The first domain from ``first`` on that can still hold a unit of ``n`` GPUs by itself
    (``n <= size``: ``n`` free GPUs) or begin a run of whole domains (``n > size``: all free).
    Domains only lose GPUs, so one that cannot now never can: each search of :func:`_take`
    for units of one size starts there instead of at the first domain (the same GPUs; the
    searches are linear in the domains instead of quadratic)."""
    need = n if n <= size else size
    while first < len(free) and len(free[first]) < need:
        first += 1
    return first


def domain_groups(topology: Topology, stages: int, replicas: int, t: int, unit: int) -> Groups:
    """GPU per ``[replica][stage][tensor rank]``, each ``unit`` consecutive replicas of a stage
    (``unit x t`` GPUs) inside one NVLink domain where they fit one (module doc).

    Raises:
        ValueError: the domains cannot hold ``stages x replicas`` groups of ``t`` GPUs so.
    """
    servers = topology.servers
    size = max(len(s) for s in servers)
    free = [list(s) for s in servers]
    out: list[list[tuple[int, ...]]] = [[() for _ in range(stages)] for _ in range(replicas)]
    first = 0
    for s in range(stages):
        for u in range(0, replicas, unit):
            first = _first(free, size, unit * t, first)
            try:
                gpus = _take(free, size, unit * t, first)
            except ValueError:
                raise ValueError(
                    f"{stages} stages x {replicas} replicas of {t} GPUs, {unit} replicas per "
                    f"NVLink domain, do not fit the domains of {topology.name} "
                    f"({len(servers)} x {size} GPUs)"
                ) from None
            for j in range(unit):
                out[u + j][s] = tuple(gpus[j * t : (j + 1) * t])
    return tuple(tuple(row) for row in out)

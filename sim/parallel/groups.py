"""Where the tensor-parallel groups go: ``t`` GPUs of one server (or ``t / G`` whole servers)
per stage replica.

Megatron-LM orders ranks tensor-parallel first, then data-parallel, then pipeline
(``--rank-order`` default ``tp-cp-ep-dp-pp``; Narayanan et al., arXiv:2104.04473, §3.3: tensor
parallelism inside a server, where NVLink carries its per-layer all-reduces; pipeline
parallelism across servers). Here every server's GPUs are cut into blocks of ``t`` consecutive
GPUs (so a block never spans servers), and block ``r + w*s`` serves replica ``r`` of stage
``s``: the replicas of a stage are neighbours, and the pipeline crosses servers last. A ``t``
larger than a server's ``G`` GPUs (a multiple of it) takes ``t / G`` consecutive whole servers,
as Megatron's rank order does (the measured runs of the Megatron-LM paper's Figure 13 use
``t = 16`` on 8-GPU DGX A100 servers; its collectives then cross the network,
:mod:`sim.comm.hierarchical`). Every framework profile pipesim has orders ranks this way
(Megatron-LM ``tp-cp-ep-dp-pp``; DeepSpeed ``PipeModelDataParallelTopology`` axes
``pipe, data, model``, model fastest; torchtitan's device mesh ``pp, dp, cp, tp``, tp
innermost), so there is one placement.
"""

from __future__ import annotations

from sim.hardware.topology import Topology


def tensor_blocks(topology: Topology, t: int) -> list[tuple[int, ...]]:
    """Blocks of ``t`` consecutive GPUs of one server, servers in order (a server whose GPU
    count ``t`` does not divide leaves its last GPUs out); with ``t`` a multiple of the
    (identical) servers' size, blocks of ``t / G`` consecutive whole servers."""
    out = []
    servers = topology.servers
    g = len(servers[0])
    if t > g and t % g == 0 and all(len(s) == g for s in servers):
        k = t // g
        for i in range(0, len(servers) - k + 1, k):
            out.append(tuple(x for s in servers[i : i + k] for x in s))
        return out
    for server in servers:
        out += [tuple(server[i : i + t]) for i in range(0, len(server) - t + 1, t)]
    return out


def tensor_groups(
    topology: Topology, stages: int, dp_width: int, t: int
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """GPU indices per ``[replica][stage][tensor rank]`` (module doc).

    Raises:
        ValueError: fewer than ``stages * dp_width`` blocks of ``t`` GPUs inside servers.
    """
    blocks = tensor_blocks(topology, t)
    if stages * dp_width > len(blocks):
        raise ValueError(
            f"{stages} stages x {dp_width} replicas need {stages * dp_width} groups of {t} GPUs "
            f"inside one server; {topology.name} has {len(blocks)}"
        )
    return tuple(tuple(blocks[r + dp_width * s] for s in range(stages)) for r in range(dp_width))

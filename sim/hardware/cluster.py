"""Identical servers joined by a rail-optimised fat tree: ``servers: N``.

A hardware description with ``servers: N > 1`` and a ``network`` section describes ``N`` copies
of its server joined by the network of :mod:`sim.hardware.fabric`. :func:`build_cluster` makes
the :class:`~sim.hardware.topology.Topology` from the one server's topology (built and checked
once) by renaming, so it costs ``O(N x links per server)`` and no search:

* GPU ``i`` of server ``n`` is ``gpu<n*G + i>`` (``G`` GPUs per server); the hosts of server
  ``n`` are ``cpu<n*H + j>`` (``H`` sockets per server, hosts named ``cpu<j>``; others
  ``n<n>.<name>``); its switches are ``n<n>.<name>`` (server 0 keeps the single-server names,
  so its part of the topology is the preset's own);
* the fabric's NIC, leaf and spine links (kind ``network``), one per GPU and switch port.

Routes inside a server are the server's own; between servers they follow the fabric
(:meth:`~sim.hardware.fabric.RailFatTree.route_names`). Collectives across servers are
NCCL's (:mod:`sim.comm.hierarchical`, :mod:`sim.comm.nccl`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from sim.hardware.fabric import NETWORK, RailFatTree
from sim.hardware.parts import Link
from sim.hardware.topology import Topology


def server_renamer(server: Topology, n: int):
    """The function giving the node name in server ``n`` of a cluster of ``server`` s of each
    node name of ``server`` (module doc)."""
    names = _renaming(server, n)

    def rename(node: str) -> str:
        return names[node]

    return rename


def _template(server: Topology) -> dict[str, tuple]:
    """How each node name of ``server`` is renamed (module doc), decided once per server:
    ``("gpu", i)``, ``("cpu", j)`` (a host named ``cpu<j>``: its index among the sockets) or
    ``("other", name)``."""
    out: dict[str, tuple] = {}
    for j, x in enumerate(server.hosts):
        out[x.name] = ("cpu", j) if re.fullmatch(r"cpu\d+", x.name) else ("other", x.name)
    for node in server.nodes:
        if node in out:
            continue
        m = re.fullmatch(r"gpu(\d+)", node)
        out[node] = ("gpu", int(m.group(1))) if m else ("other", node)
    return out


def _renaming(server: Topology, n: int, template: dict[str, tuple] | None = None) -> dict:
    """Every node name of ``server`` -> its name in server ``n`` (module doc)."""
    g, h = server.num_gpus, len(server.hosts)
    out = {}
    for node, (kind, x) in (template or _template(server)).items():
        if n == 0:
            out[node] = node
        elif kind == "gpu":
            out[node] = f"gpu{n * g + x}"
        elif kind == "cpu":
            out[node] = f"cpu{n * h + x}"
        else:
            out[node] = f"n{n}.{x}"
    return out


def build_cluster(server: Topology, fabric: RailFatTree, name: str) -> Topology:
    """``fabric.servers`` copies of ``server`` joined by ``fabric`` (module doc).

    Args:
        server: one server, already built and checked (every GPU reaches every GPU and its
            host).
        fabric: the network; its ``gpus_per_server`` must be ``server.num_gpus``.
        name: the cluster's name (e.g. ``"384x-dgx-a100-80gb"``).

    Returns:
        The cluster topology, with ``fabric`` and ``server`` set.

    Raises:
        ValueError: the fabric's GPUs per server differ from the server's.
    """
    if fabric.gpus_per_server != server.num_gpus:
        raise ValueError(
            f"the fabric has {fabric.gpus_per_server} GPUs per server, {server.name} has "
            f"{server.num_gpus}"
        )
    gpus, hosts, switches, links = [], [], [], []
    template = _template(server)
    for n in range(fabric.servers):
        name_of = _renaming(server, n, template)
        gpus += [replace(x, name=name_of[x.name], host=name_of[x.host]) for x in server.gpus]
        hosts += [replace(x, name=name_of[x.name]) for x in server.hosts]
        switches += [name_of[s] for s in server.switches]
        for lk in server.links:
            a, b = name_of[lk.src], name_of[lk.dst]
            links.append(
                Link(
                    f"{a}->{b}",
                    a,
                    b,
                    lk.bandwidth_Bps,
                    lk.latency_s,
                    lk.kind,
                    lk.nccl_bandwidth_Bps,
                )
            )
    switches += fabric.switches()
    nccl = fabric.nccl_nic_Bps
    links += [
        Link(f"{a}->{b}", a, b, fabric.nic_Bps, fabric.latency_s, NETWORK, nccl)
        for a, b in fabric.link_ends()
    ]
    return Topology(
        name,
        tuple(gpus),
        tuple(hosts),
        tuple(links),
        tuple(switches),
        server.description,
        server.collectives,
        fabric=fabric,
        server=server,
        notes=server.notes,
    )

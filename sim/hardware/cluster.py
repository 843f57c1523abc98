"""A few identical servers joined by a rail-optimised InfiniBand network: ``servers: N``.

A hardware description with ``servers: N > 1`` and a ``network`` section describes ``N`` copies
of its server. :func:`expand_servers` turns it into one flat description that
:func:`~sim.hardware.build.topology_from_spec` builds like any other:

* GPU ``i`` of server ``n`` is ``gpu<n*G + i>`` (``G`` GPUs per server); the hosts of server
  ``n`` are ``cpu<n*H + j>`` (``H`` sockets per server); its switches are ``n<n>.<name>``
  (server 0 keeps the single-server names, so its part of the topology is the preset's own);
* **rails** (NVIDIA DGX SuperPOD reference architecture: "rail-optimized", the NIC of GPU ``i``
  of every server goes to leaf switch ``i``): one NIC per GPU, modelled as a link
  ``gpu<n*G+i> <-> rail<i>`` of ``network.nic_bandwidth`` per direction (kind ``network``);
  the rail switches join at a ``spine`` switch through links of ``N x nic_bandwidth``
  (non-blocking), so a GPU reaches a GPU of another rail in 4 hops. Traffic between servers goes
  GPU -> NIC directly (GPUDirect RDMA); the NIC's PCIe hop is not a separate link.

Collectives across servers are hierarchical (:mod:`sim.engine.hierarchical`). The servers of a
topology are recovered by :attr:`~sim.hardware.topology.Topology.servers` (GPUs connected
without ``network`` links).
"""

from __future__ import annotations

import re

from sim.hardware.spec import HardwareSpec

RAIL = "rail{}"
SPINE = "spine"


def _server_name(name: str, n: int, hosts: dict[str, str]) -> str:
    if name.startswith("gpu"):
        return name
    if name in hosts:
        return hosts[name]
    return name if n == 0 else f"n{n}.{name}"


def _host_map(host_names: list[str], n: int) -> dict[str, str]:
    """Server ``n``'s host names: ``cpu<n*H + j>`` for hosts named ``cpu<j>``, else
    ``n<n>.<name>`` (the first server keeps its names)."""
    h = len(host_names)
    out = {}
    for j, name in enumerate(host_names):
        if n == 0:
            out[name] = name
        elif re.fullmatch(r"cpu\d+", name):
            out[name] = f"cpu{n * h + j}"
        else:
            out[name] = f"n{n}.{name}"
    return out


def expand_servers(spec: HardwareSpec) -> HardwareSpec:
    """The flat description of ``spec.servers`` copies of ``spec`` joined by rails.

    Args:
        spec: a validated description with ``servers`` > 1 and ``network``.

    Returns:
        A description with ``num_gpus = N*G``, every host, switch and link of each server
        renamed (module doc), the rail and spine switches and their links, and ``servers: 1``
        (the same spec when ``servers`` is 1).
    """
    if spec.servers == 1 or spec.network is None:
        return spec
    raw = spec.model_dump()
    n_servers, g = int(raw["servers"]), int(raw["num_gpus"])
    net = raw["network"]
    host_names = [h["name"] for h in raw["hosts"]]
    gpu_hosts = raw.get("gpu_hosts") or [host_names[0]] * g
    hosts, gpu_host_out, switches, links = [], [], [], []
    for n in range(n_servers):
        hmap = _host_map(host_names, n)
        hosts += [{**h, "name": hmap[h["name"]]} for h in raw["hosts"]]
        gpu_host_out += [hmap[x] for x in gpu_hosts]
        switches += [_server_name(s, n, hmap) for s in raw.get("switches", [])]
        for lk in raw.get("links", []):
            a, b = (_renumber(_server_name(lk[e], n, hmap), n, g) for e in ("a", "b"))
            links.append({**lk, "a": a, "b": b})
    switches += [RAIL.format(i) for i in range(g)] + [SPINE]
    for i in range(g):
        for n in range(n_servers):
            links.append(_net_link(f"gpu{n * g + i}", RAIL.format(i), net["nic_bandwidth"], net))
        links.append(_net_link(RAIL.format(i), SPINE, net["nic_bandwidth"] * n_servers, net))
    return HardwareSpec.model_validate(
        {
            **raw,
            "num_gpus": n_servers * g,
            "hosts": hosts,
            "gpu_hosts": gpu_host_out,
            "switches": switches,
            "links": links,
            "servers": 1,
        }
    )


def _renumber(node: str, n: int, g: int) -> str:
    m = re.fullmatch(r"gpu(\d+)", node)
    return f"gpu{n * g + int(m.group(1))}" if m else node


def _net_link(a: str, b: str, bandwidth: float, net: dict) -> dict:
    return {"a": a, "b": b, "bandwidth": bandwidth, "latency": net["latency"], "kind": "network"}

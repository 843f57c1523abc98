"""Where each figure ``sim hardware show`` prints comes from: :func:`figure_sources`.

A hardware description carries its sources as prose: the ``description`` (datasheet peaks, HBM,
links, DRAM, CPU Adam rate, each cited there), ``host_overhead.source`` (the host's time per
op), each measured collective's ``source``, and, for the network, ``network.source``
(:attr:`sim.hardware.fabric.RailFatTree.source`). A figure the tool computes from
others (a route's bandwidth) says so. A description without a source text has its figures
labelled as assumptions.
"""

from __future__ import annotations

from sim.hardware.capacity import cuda_total_bytes
from sim.hardware.host_ops import NO_HOST
from sim.hardware.topology import Topology

NO_SOURCE = "assumption: the hardware description gives no source (empty `description`)"
"""The label of the figures of a description with no ``description`` text."""

DESCRIPTION = "the hardware description's `description`, printed below"
"""The source of the figures a description's ``description`` text cites."""

NO_NETWORK_SOURCE = "assumption: the hardware description gives no `network.source`"
"""The label of the network's figures when its description cites none."""

ROUTE = "derived: the slowest link of the route (links table; Topology.route_bandwidth_Bps)"
"""The source of a route's bandwidth, computed from the links."""


def _or_assumption(text: str, source: str) -> str:
    """``source`` when ``text`` (the prose that should cite it) is not empty, else the
    assumption label :data:`NO_SOURCE`."""
    return source if text.strip() else NO_SOURCE


def memory_source(topo: Topology) -> str:
    """Where the first GPU's memory (``GPU.memory_bytes``, the CUDA-reported total) comes from:
    :data:`sim.hardware.capacity.CUDA_TOTAL_MIB`'s source for its model when the figure is that
    entry's, else the description's ``cuda_memory``/``memory`` (:data:`DESCRIPTION`, or
    :data:`NO_SOURCE` without a description)."""
    gpu = topo.gpus[0]
    total_bytes, source = cuda_total_bytes(gpu.model, -1.0)
    if total_bytes == gpu.memory_bytes:
        return f"sim.hardware.capacity.CUDA_TOTAL_MIB: {source}"
    return _or_assumption(topo.description, DESCRIPTION)


def figure_sources(topo: Topology) -> list[tuple[str, str]]:
    """The figures of ``sim hardware show`` and where each comes from.

    Args:
        topo: a loaded hardware description (one server or a cluster with a fabric).

    Returns:
        ``(figures, source)`` rows, one per group of figures the tables print: the figures
        name the table and its columns, the source is a citation pointer or a label starting
        ``"assumption"`` or ``"derived"``. Host time per op appears only when the hosts model
        it; the network only for a cluster; measured collectives one row each.
    """
    server = topo.server if topo.server is not None else topo
    desc = server.description
    rows = [
        ("GPUs: memory GiB (as CUDA reports it)", memory_source(server)),
        ("GPUs: peak TFLOPS, HBM GB/s", _or_assumption(desc, DESCRIPTION)),
        ("GPUs: to / from host GB/s; GPU-to-GPU route GB/s", ROUTE),
        ("hosts: DRAM GB, Adam params/s", _or_assumption(desc, DESCRIPTION)),
        ("links: GB/s, latency us", _or_assumption(desc, DESCRIPTION)),
    ]
    over = server.hosts[0].overhead
    if over != NO_HOST:
        rows.append(("hosts: op / bwd op / ckpt us", over.source.strip() or NO_SOURCE))
    for t in server.collectives:
        name = f"measured {t.kind}, {t.ranks} ranks"
        rows.append((name, t.source.strip() or NO_SOURCE))
    if topo.fabric is not None:
        source = topo.fabric.source.strip() or NO_NETWORK_SOURCE
        rows.append(("network: NIC GB/s, oversubscription, latency", source))
        rows.append(
            ("network: servers, GPUs, rails, leaves, spines", "derived: the fabric's counts")
        )
    return rows

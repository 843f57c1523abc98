"""Where each figure ``sim hardware show`` prints comes from: :func:`figure_sources`.

A hardware description carries its sources as prose: the ``description`` (datasheet peaks, HBM,
links, DRAM, CPU Adam rate, each cited there), ``host_overhead.source`` (the host's time per
op), each measured collective's ``source``, and, for the network, ``network.source``
(:attr:`sim.hardware.fabric.RailFatTree.source`). A figure the tool computes from
others (a route's bandwidth) says so. A description without a source text has its figures
labelled as assumptions.
"""

from __future__ import annotations

from sim.hardware.capacity import (
    CUDA_CONTEXT_BYTES,
    MIB,
    NCCL_BUFFSIZE_BYTES,
    NCCL_CHANNELS,
    RuntimeReserve,
    cuda_total_bytes,
)
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
        ("GPUs: 16-bit dense TFLOPS, HBM GB/s", _or_assumption(desc, DESCRIPTION)),
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


def reserve_source(rv: RuntimeReserve) -> str:
    """Where a rank's ``reserve_bytes`` (CUDA context + NCCL buffers,
    :func:`sim.memory.reserve.runtime_reserve_bytes`) comes from, for ``memory.csv``'s
    ``reserve_source`` column.

    The default CUDA context (:data:`~sim.hardware.capacity.CUDA_CONTEXT_BYTES`, 400 MiB) is an
    unverified estimate (memory.md §1) and says "assumption"; the NCCL buffer size is NCCL's
    documented ``NCCL_BUFFSIZE`` default; the default 4 channels per communicator are an
    assumption (:data:`~sim.hardware.capacity.NCCL_CHANNELS`). Figures that differ from the
    defaults were set by the hardware description (its ``reserve`` keys or ``sim calibrate``).

    Args:
        rv: the rank's GPU's :class:`~sim.hardware.capacity.RuntimeReserve`.

    Returns:
        One line; ``"none: ..."`` when the GPU charges no runtime reserve (a CPU rank).
    """
    if rv.cuda_context_bytes == 0 and rv.nccl_bytes(1) == 0:
        return "none: this GPU's description charges no runtime reserve (CPU rank or bare model)"
    mib = rv.cuda_context_bytes / MIB
    if rv.cuda_context_bytes == CUDA_CONTEXT_BYTES:
        context = (
            f"CUDA context {mib:g} MiB: assumption (~300-500 MB on V100/A100 with CUDA 11/12, "
            "memory.md §1, an unverified estimate)"
        )
    else:
        context = f"CUDA context {mib:g} MiB: set by the hardware description"
    buff = rv.nccl_buffer_bytes / MIB
    if rv.nccl_buffer_bytes == NCCL_BUFFSIZE_BYTES:
        size = f"{buff:g} MiB (NCCL_BUFFSIZE default, NCCL docs, Environment Variables)"
    else:
        size = f"{buff:g} MiB (set by the hardware description)"
    if rv.nccl_channels == NCCL_CHANNELS:
        channels = f"{rv.nccl_channels} channels (assumption, unverified)"
    else:
        channels = f"{rv.nccl_channels} channels (set by the hardware description)"
    return f"{context}; NCCL buffers {size} x {channels} x the rank's peers"

"""Show a :class:`Topology` to a person (rich tables) or to a program (a plain dict).

:func:`describe_topology` is what ``sim hardware show NAME`` prints. :func:`topology_to_dict`
is the form stored next to results; it is a valid hardware description, so
``load_hardware(topology_to_dict(t)) == t``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sim.hardware.describe_large import MATRIX_GPUS, add_rows, route_relays, route_summary
from sim.hardware.fabric import RailFatTree
from sim.hardware.host_ops import NO_HOST
from sim.hardware.parts import Link
from sim.hardware.provenance import figure_sources
from sim.hardware.topology import Topology

_GB = 1e9
_GIB = 2.0**30


def _pairs(topo: Topology) -> list[tuple[Link, Link | None]]:
    """Links in order, each with its reverse when that is the next link and equal but for the
    direction (the expansion of an undirected link); so the pairing round-trips exactly."""
    out: list[tuple[Link, Link | None]] = []
    links = topo.links
    i = 0
    while i < len(links):
        lk = links[i]
        rev = links[i + 1] if i + 1 < len(links) else None
        fields = (lk.bandwidth_Bps, lk.latency_s, lk.kind, lk.nccl_bandwidth_Bps)
        if (
            rev is not None
            and (rev.src, rev.dst) == (lk.dst, lk.src)
            and (
                rev.bandwidth_Bps,
                rev.latency_s,
                rev.kind,
                rev.nccl_bandwidth_Bps,
            )
            == fields
        ):
            out.append((lk, rev))
            i += 2
        else:
            out.append((lk, None))
            i += 1
    return out


def gpu_table(topo: Topology) -> Table:
    """One row per GPU: model, memory (GiB), dense fp16/bf16 tensor peak TFLOPS, HBM GB/s, host,
    host route GB/s."""
    table = Table(title=f"{topo.name}: GPUs")
    for col in ("GPU", "model", "memory GiB", "16-bit dense TFLOPS", "HBM GB/s", "host"):
        table.add_column(col, justify="left" if col in ("GPU", "model", "host") else "right")
    table.add_column("to host GB/s", justify="right")
    table.add_column("from host GB/s", justify="right")
    rows = [
        [
            g.name,
            g.model,
            f"{g.memory_bytes / _GIB:.1f}",
            f"{g.peak_flops / 1e12:.1f}",
            f"{g.hbm_bandwidth_Bps / _GB:.0f}",
            g.host,
            f"{topo.route_bandwidth_Bps(g.name, g.host) / _GB:.1f}",
            f"{topo.route_bandwidth_Bps(g.host, g.name) / _GB:.1f}",
        ]
        for g in topo.gpus
    ]
    add_rows(table, topo, rows, varying=(0, 5))
    return table


def host_table(topo: Topology) -> Table:
    """One row per CPU socket: usable DRAM (MemTotal, GB and GiB), CPU Adam parameters/s, and
    the host time per op of eager PyTorch (forward / backward op, checkpoint region, us;
    sim.hardware.host_ops)."""
    table = Table(title=f"{topo.name}: hosts (usable DRAM {topo.host_dram_bytes / _GB:.0f} GB)")
    table.add_column("host")
    for col in ("DRAM GB", "DRAM GiB", "Adam params/s", "op / bwd op / ckpt us"):
        table.add_column(col, justify="right")
    rows: list[list[str]] = []
    for h in topo.hosts:
        o = h.overhead
        per_op = (
            "-"
            if o == NO_HOST
            else f"{o.op_s * 1e6:.3g} / {o.backward_op_s * 1e6:.3g} / {o.checkpoint_s * 1e6:.3g}"
            + ("" if o.eager else f" ({o.mode}: 0)")
        )
        rows.append(
            [
                h.name,
                f"{h.dram_bytes / _GB:.0f}",
                f"{h.dram_bytes / _GIB:.0f}",
                f"{h.adam_params_per_s:.3g}",
                per_op,
            ]
        )
    add_rows(table, topo, rows, varying=(0,))
    return table


def link_table(topo: Topology) -> Table:
    """One row per connection (``<->`` when both directions are equal): GB/s, us, kind."""
    table = Table(title=f"{topo.name}: links (bandwidth per direction)")
    for col in ("link", "kind", "GB/s", "latency us"):
        table.add_column(col, justify="right" if col in ("GB/s", "latency us") else "left")
    rows = [
        [
            f"{lk.src} <-> {lk.dst}" if rev else f"{lk.src} -> {lk.dst}",
            lk.kind,
            f"{lk.bandwidth_Bps / _GB:.2f}",
            f"{lk.latency_s * 1e6:.1f}",
        ]
        for lk, rev in _pairs(topo)
    ]
    add_rows(table, topo, rows, varying=(0,))
    return table


def route_table(topo: Topology) -> Table:
    """GPU x GPU matrix of route bottleneck bandwidth in GB/s (row = source).

    A cell names the GPUs and hosts a route relays through, e.g. ``24.0 (gpu4)``; switches
    are not named.
    """
    if topo.num_gpus > MATRIX_GPUS:
        return route_summary(topo)
    table = Table(title=f"{topo.name}: GPU-to-GPU route bandwidth, GB/s (relays in brackets)")
    table.add_column("from \\ to")
    for g in topo.gpus:
        table.add_column(g.name, justify="right")
    for src in topo.gpus:
        cells = []
        for dst in topo.gpus:
            if src is dst:
                cells.append("-")
                continue
            route = topo.route(src.name, dst.name)
            relays = route_relays(topo, route)
            bw = f"{topo.route_bandwidth_Bps(src.name, dst.name) / _GB:.1f}"
            cells.append(f"{bw} ({', '.join(relays)})" if relays else bw)
        table.add_row(src.name, *cells)
    return table


def describe_topology(topo: Topology) -> Group:
    """All tables of a topology, printable with ``rich.console.Console().print``.

    Returns:
        A :class:`rich.console.Group` of :func:`gpu_table`, :func:`host_table`,
        :func:`link_table`, :func:`route_table` (and :func:`fabric_table` for a cluster), then
        :func:`sources_table` and the description's text, which cites the figures
        (``.renderables`` gives them).
    """
    if topo.server is not None and topo.fabric is not None:
        server = describe_topology(topo.server).renderables[:4]
        return Group(*server, fabric_table(topo), *_sources(topo))
    tables = (gpu_table(topo), host_table(topo), link_table(topo), route_table(topo))
    return Group(*tables, *_sources(topo))


def sources_table(topo: Topology) -> Table:
    """Where each group of the figures above comes from (:func:`sim.hardware.provenance.
    figure_sources`): a citation pointer, or a label starting "assumption" or "derived"."""
    table = Table(title=f"{topo.name}: sources of the figures above")
    table.add_column("figures")
    table.add_column("source")
    for figures, source in figure_sources(topo):
        table.add_row(figures, source)
    return table


def _sources(topo: Topology) -> tuple[Table, Text]:
    """:func:`sources_table` and the description it points to (the sources' text)."""
    server = topo.server if topo.server is not None else topo
    text = server.description.strip() or "(no description)"
    return sources_table(topo), Text(f"description: {text}")


def fabric_table(topo: Topology) -> Table:
    """The network of a cluster (:mod:`sim.hardware.fabric`): servers, rails, leaves, spines,
    NIC bandwidth and oversubscription."""
    f = topo.fabric
    assert f is not None
    table = Table(title=f"{topo.name}: network between servers ({f.technology or 'network'})")
    for col in ("servers", "GPUs", "rails", "leaves", "spines", "NIC GB/s", "oversub."):
        table.add_column(col, justify="right")
    table.add_row(
        str(f.servers),
        str(f.num_gpus),
        str(f.gpus_per_server),
        str(f.units * f.gpus_per_server),
        str(f.uplinks),
        f"{f.nic_Bps / _GB:.1f}",
        f"{f.oversubscription:g}",
    )
    return table


def reserve_fields(gpu) -> dict:
    """The memory fields of a hardware description's ``gpu`` mapping for ``gpu``
    (:class:`~sim.hardware.parts.GPU`): CUDA-reported capacity and runtime reserve."""
    rv = gpu.reserve
    return {
        "cuda_memory": gpu.memory_bytes,
        "cuda_context": rv.cuda_context_bytes,
        "cublas_workspace": rv.cublas_workspace_bytes,
        "nccl_buffer": rv.nccl_buffer_bytes,
        "nccl_channels": rv.nccl_channels,
        "allocator_margin": rv.allocator_margin,
    }


def topology_to_dict(topo: Topology) -> dict[str, Any]:
    """A topology as a plain, JSON-ready hardware description in base units.

    Quantities are numbers in bytes, bytes/s, seconds and FLOP/s. Links equal in both directions
    become one undirected entry; others are ``directed: true``. The result is valid input of
    :func:`~sim.hardware.loader.load_hardware` and loads back to an equal topology.

    Raises:
        ValueError: the GPUs are not all of one type, or not named ``gpu0 .. gpu<n-1>`` in
            order (a hardware description cannot express that).
    """
    if topo.server is not None and topo.fabric is not None:
        one = topology_to_dict(topo.server)
        network = _network_fields(topo.fabric)
        return {**one, "name": topo.name, "servers": topo.fabric.servers, "network": network}
    g0 = topo.gpus[0]
    kinds = {(g.model, g.memory_bytes, g.peak_flops, g.hbm_bandwidth_Bps) for g in topo.gpus}
    if len(kinds) != 1:
        raise ValueError(f"topology {topo.name} mixes GPU types; a description has one `gpu`")
    if [g.name for g in topo.gpus] != [f"gpu{i}" for i in range(topo.num_gpus)]:
        raise ValueError(f"topology {topo.name}: GPUs must be named gpu0..gpu{topo.num_gpus - 1}")
    return {
        "name": topo.name,
        "description": topo.description,
        "gpu": {
            "model": g0.model,
            "memory": g0.memory_bytes,
            "peak_flops": g0.peak_flops,
            "hbm_bandwidth": g0.hbm_bandwidth_Bps,
            **_compute_fields(g0.compute),
            **reserve_fields(g0),
            **_nccl_fields(g0),
        },
        "num_gpus": topo.num_gpus,
        "hosts": [
            {
                "name": h.name,
                "dram": h.dram_bytes,
                "usable_dram": h.dram_bytes,
                "adam_params_per_s": h.adam_params_per_s,
            }
            for h in topo.hosts
        ],
        "gpu_hosts": [g.host for g in topo.gpus],
        "switches": list(topo.switches),
        "links": _link_entries(topo),
        "collectives": [
            {
                "kind": t.kind,
                "ranks": t.ranks,
                "sizes": list(t.sizes_bytes),
                "times": list(t.times_s),
                "source": t.source,
                "servers": t.servers,
            }
            for t in topo.collectives
        ],
        **_host_overhead_fields(topo),
    }


def _network_fields(f: RailFatTree) -> dict[str, Any]:
    """The ``network`` mapping of a multi-server description: NIC B/s per GPU (and NCCL's, when
    it differs), latency s, servers per leaf switch, oversubscription, technology, source."""
    network = {
        "nic_bandwidth": f.nic_Bps,
        "latency": f.latency_s,
        "servers_per_leaf": f.servers_per_leaf,
        "oversubscription": f.oversubscription,
        "technology": f.technology,
        "source": f.source,
    }
    if f.nccl_nic_Bps is not None:
        network["nccl_nic_bandwidth"] = f.nccl_nic_Bps
    return network


def _link_entries(topo: Topology) -> list[dict[str, Any]]:
    """The ``links`` of a description: one undirected entry for a link equal both ways, else
    ``directed: true``; bandwidth (and NCCL's) in B/s, latency in s."""
    links = []
    for lk, rev in _pairs(topo):
        entry: dict[str, Any] = {"a": lk.src, "b": lk.dst, "bandwidth": lk.bandwidth_Bps}
        entry.update(latency=lk.latency_s, kind=lk.kind)
        if lk.nccl_bandwidth_Bps is not None:
            entry["nccl_bandwidth"] = lk.nccl_bandwidth_Bps
        if rev is None:
            entry["directed"] = True
        links.append(entry)
    return links


def _nccl_fields(gpu: Any) -> dict[str, Any]:
    """``compute_capability``, ``nvls``, ``tp_module_overhead`` and (when measured)
    ``action_overhead`` and ``optimizer_step`` of a ``gpu`` mapping."""
    fwd, bwd = gpu.tp_module_overhead_s
    out: dict[str, Any] = {"tp_module_overhead": {"forward": fwd, "backward": bwd}}
    if any(gpu.action_overhead_s):
        fwd_s, bwd_s = gpu.action_overhead_s
        out["action_overhead"] = {"forward": fwd_s, "backward": bwd_s}
    if gpu.step_costs:
        out["optimizer_step"] = {
            opt: {"per_tensor": per_tensor_s, "bandwidth": bw}
            for opt, per_tensor_s, bw in gpu.step_costs
        }
    if gpu.compute_capability is not None:
        out["compute_capability"] = gpu.compute_capability
    if gpu.nvls:
        out["nvls"] = True
    return out


def _host_overhead_fields(topo: Topology) -> dict[str, Any]:
    """``{"host_overhead": ...}`` when the hosts model it (all alike), else empty.

    Raises:
        ValueError: the hosts differ (a description has one ``host_overhead``).
    """
    over = topo.hosts[0].overhead
    if any(h.overhead != over for h in topo.hosts):
        raise ValueError(f"topology {topo.name}: hosts differ in overhead; a description has one")
    if over == NO_HOST:
        return {}
    fields = {"op": over.op_s, "backward_op": over.backward_op_s, "checkpoint": over.checkpoint_s}
    if over.nograd_op_s is not None:
        fields["nograd_op"] = over.nograd_op_s
    if over.read_s > 0:
        fields["read"] = over.read_s
    if over.launch_s is not None:
        fields["launch"] = over.launch_s
    for key in ("module", "function", "function_backward", "te_module"):
        if getattr(over, f"{key}_s") > 0:
            fields[key] = getattr(over, f"{key}_s")
    return {"host_overhead": {**fields, "mode": over.mode, "cpu": over.cpu, "source": over.source}}


def _compute_fields(spec: Any) -> dict[str, Any]:
    """The compute-model keys of a ``gpu`` mapping (sim.hardware.gpu_compute), empty without one."""
    if spec is None:
        return {}
    out = {
        "fp32_flops": spec.fp32_flops,
        "sm_count": spec.sm_count,
        "matmul_efficiency": spec.matmul_efficiency,
        "attention_efficiency": spec.attention_efficiency,
        "hbm_efficiency": spec.hbm_efficiency,
        "kernel_overhead": spec.kernel_overhead_s,
    }
    if spec.low_precision:  # as resolved (a power cap's slow-down included)
        out["low_precision"] = {
            r.format: {
                "peak_flops": r.peak_flops,
                "matmul_efficiency": r.efficiency,
                "non_tn": r.non_tn,
            }
            for r in spec.low_precision
        }
    return out

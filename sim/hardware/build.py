"""Build a :class:`~sim.hardware.topology.Topology` from a validated
:class:`~sim.hardware.spec.HardwareSpec`: cross-references checked, servers expanded
(:mod:`sim.hardware.cluster`), GPU memory and runtime reserve resolved, links made directed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.errors import InputError
from sim.hardware.capacity import RuntimeReserve, cuda_total_bytes, default_reserve
from sim.hardware.cluster import build_cluster
from sim.hardware.gpu_spec import GPUSpec, compute_capability
from sim.hardware.host_memory import os_usable_bytes
from sim.hardware.host_ops import NO_HOST
from sim.hardware.interconnect_spec import LinkSpec
from sim.hardware.parts import GPU, Host, Link
from sim.hardware.spec import HardwareSpec
from sim.hardware.topology import Topology


def gpu_memory(g: GPUSpec) -> tuple[float, RuntimeReserve]:
    """``(usable_bytes, reserve)`` of a GPU type: the CUDA-reported total and the runtime
    reserve, from the spec's fields where given, else the sourced defaults of
    :mod:`sim.hardware.capacity`: the CUDA total of ``model``, unless ``memory`` is below 90 % of
    it (a datasheet figure is within 10 % of the CUDA total: 16 GiB vs 16,160 MiB, 141 GB vs
    139.8 GiB; a smaller ``memory`` is a deliberate override and is kept)."""
    cuda_total = cuda_total_bytes(g.model, g.memory)[0]
    if g.cuda_memory is not None:
        usable = g.cuda_memory
    else:
        usable = cuda_total if g.memory >= 0.9 * cuda_total else g.memory
    base = default_reserve(g.model)
    given: dict[str, Any] = {
        "cuda_context_bytes": g.cuda_context,
        "cublas_workspace_bytes": g.cublas_workspace,
        "nccl_buffer_bytes": g.nccl_buffer,
        "nccl_channels": g.nccl_channels,
        "allocator_margin": g.allocator_margin,
    }
    return usable, replace(base, **{k: v for k, v in given.items() if v is not None})


def memory_note(g: GPUSpec) -> str | None:
    """A sentence when :func:`gpu_memory` does not use the ``memory`` the description gives:
    a figure from 90 % of the CUDA total up to it is read as a datasheet figure and replaced by
    the CUDA total (``memory: 75 GiB`` on an H100 still plans with 79.65 GiB), so the user is
    told to set ``cuda_memory`` to cap it; None when ``memory`` is used or ``cuda_memory`` set."""
    cuda_total = cuda_total_bytes(g.model, g.memory)[0]
    if g.cuda_memory is not None or not 0.9 * cuda_total <= g.memory < cuda_total:
        return None
    gib = 2.0**30
    return (
        f"gpu.memory {g.memory / gib:.2f} GiB is within 10 % of {g.model}'s CUDA total, so it "
        f"is read as a datasheet figure and the CUDA total {cuda_total / gib:.2f} GiB is used; "
        f"to plan with less, set gpu.cuda_memory: {g.memory / gib:.2f} GiB instead"
    )


def nccl_bandwidth_Bps(link: LinkSpec, gpu: GPUSpec) -> float | None:
    """Bytes/s NCCL achieves over ``link``: its ``nccl_bandwidth``, else ``count`` NVLinks at
    ``gpu.nccl_nvlink_bandwidth`` for an ``nvlink``/``nvswitch`` link (NCCL's own model of an
    NVLink path, ``src/graph/topo.h``), else None (NCCL at the raw ``bandwidth``)."""
    if link.nccl_bandwidth is not None:
        return link.nccl_bandwidth
    if link.kind in ("nvlink", "nvswitch") and gpu.nccl_nvlink_bandwidth is not None:
        return link.count * gpu.nccl_nvlink_bandwidth
    return None


def gpu_names(spec: HardwareSpec) -> list[str]:
    """``['gpu0', ..., 'gpu<n-1>']`` for ``spec.num_gpus`` GPUs."""
    return [f"gpu{i}" for i in range(spec.num_gpus)]


def reference_problems(spec: HardwareSpec) -> list[tuple[str, str]]:
    """Cross-references a schema cannot check, as ``(dotted field, message)`` pairs.

    Checks: node names unique and not of the form ``gpu<i>`` for hosts and switches;
    ``gpu_hosts`` has one known host per GPU; every link joins two distinct known nodes; no
    directed link appears twice. Empty when everything is consistent.
    """
    problems: list[tuple[str, str]] = []
    gpus = gpu_names(spec)
    known = set(gpus)
    named = [(f"hosts.{i}.name", h.name) for i, h in enumerate(spec.hosts)]
    named += [(f"switches.{i}", s) for i, s in enumerate(spec.switches)]
    for where, name in named:
        if name in known:
            problems.append(
                (where, f"node name '{name}' is used twice (GPUs are gpu0..gpu{spec.num_gpus - 1})")
            )
        known.add(name)
    hosts = [h.name for h in spec.hosts]
    host_set = set(hosts)
    if spec.gpu_hosts is not None:
        if len(spec.gpu_hosts) != spec.num_gpus:
            problems.append(
                (
                    "gpu_hosts",
                    f"needs one host per GPU ({spec.num_gpus}), got {len(spec.gpu_hosts)}",
                )
            )
        for i, host in enumerate(spec.gpu_hosts):
            if host not in host_set:
                problems.append((f"gpu_hosts.{i}", f"unknown host '{host}'; hosts are {hosts}"))
    seen: dict[tuple[str, str], int] = {}
    for i, link in enumerate(spec.links):
        for end in ("a", "b"):
            node = getattr(link, end)
            if node not in known:
                problems.append(
                    (f"links.{i}.{end}", f"unknown node '{node}'; nodes are {sorted(known)}")
                )
        if link.a == link.b:
            problems.append(
                (f"links.{i}", f"a link must join two different nodes, got {link.a} twice")
            )
        pairs = [(link.a, link.b)] if link.directed else [(link.a, link.b), (link.b, link.a)]
        for pair in pairs:
            if pair in seen:
                problems.append(
                    (f"links.{i}", f"{pair[0]}->{pair[1]} is already given by links.{seen[pair]}")
                )
            seen.setdefault(pair, i)
    return problems


def topology_from_spec(
    spec: HardwareSpec,
    *,
    file: str | None = None,
    field: str | None = None,
    note_memory: bool = True,
) -> Topology:
    """Build the :class:`Topology` a :class:`HardwareSpec` describes.

    Args:
        spec: a validated hardware description (quantities already in bytes, bytes/s, s, FLOP/s).
        file: the file the description came from, for error messages.
        field: dotted path of the description inside that file (e.g. ``"hardware"``), prefixed
            to the field named in errors.
        note_memory: put :func:`memory_note` in the topology's ``notes`` (False when
            ``gpu.memory`` is a bundled preset's datasheet figure, replaced on purpose).

    Returns:
        The topology, links in spec order (``a->b`` then ``b->a`` for undirected links).

    Raises:
        InputError: a cross-reference is wrong (see :func:`reference_problems`), or some GPU
            cannot reach another GPU or its host (field ``links``).
    """

    def where(name: str) -> str:
        return f"{field}.{name}" if field else name

    if spec.servers > 1:
        if spec.network is None:
            raise InputError(
                f"{spec.servers} servers need a 'network' section (the NIC bandwidth per GPU)",
                file=file,
                field=where("servers"),
            )
        one = spec.model_copy(update={"servers": 1})
        server = topology_from_spec(one, file=file, field=field, note_memory=note_memory)
        fabric = spec.network.fabric(spec.servers, spec.num_gpus)
        return build_cluster(server, fabric, spec.name)
    problems = reference_problems(spec)
    if problems:
        name, message = problems[0]
        raise InputError(message, file=file, field=where(name))
    hosts, gpus, links = _hosts(spec), _gpus(spec), _links(spec)
    tables = []
    for i, t in enumerate(spec.collectives):
        try:
            tables.append(t.table())
        except ValueError as exc:
            raise InputError(str(exc), file=file, field=where(f"collectives.{i}")) from None
    topo = Topology(
        spec.name,
        gpus,
        hosts,
        links,
        tuple(spec.switches),
        spec.description,
        tuple(tables),
        notes=tuple(n for n in (memory_note(spec.gpu),) if n is not None and note_memory),
    )
    _check_reachable(topo, file, where("links"))
    return topo


def _hosts(spec: HardwareSpec) -> tuple[Host, ...]:
    """The hosts of ``spec``: usable DRAM in bytes (the OS's share of ``dram`` unless
    ``usable_dram`` is given), CPU Adam params/s and the host overhead every host shares."""
    over = spec.host_overhead.overhead() if spec.host_overhead else NO_HOST
    return tuple(
        Host(
            h.name,
            os_usable_bytes(h.dram) if h.usable_dram is None else h.usable_dram,
            h.adam_params_per_s,
            overhead=over,
        )
        for h in spec.hosts
    )


def _gpus(spec: HardwareSpec) -> tuple[GPU, ...]:
    """The GPUs of ``spec``, all of its one GPU model, each on its host (``gpu_hosts``, else the
    first host): usable and reserved memory in bytes, peak FLOP/s, HBM B/s, the compute model
    and the measured overheads (s) and optimizer step costs."""
    gpu_hosts = spec.gpu_hosts or [spec.hosts[0].name] * spec.num_gpus
    g = spec.gpu
    usable, reserve = gpu_memory(g)
    cc = compute_capability(g)
    return tuple(
        GPU(
            name,
            g.model,
            usable,
            g.peak_flops,
            g.hbm_bandwidth,
            host,
            g.compute_spec(),
            reserve,
            compute_capability=cc,
            nvls=g.nvls,
            tp_module_overhead_s=(g.tp_module_overhead.forward, g.tp_module_overhead.backward),
            action_overhead_s=(g.action_overhead.forward, g.action_overhead.backward),
            step_costs=tuple(
                (opt, c.per_tensor, c.bandwidth) for opt, c in sorted(g.optimizer_step.items())
            ),
        )
        for name, host in zip(gpu_names(spec), gpu_hosts, strict=True)
    )


def _links(spec: HardwareSpec) -> tuple[Link, ...]:
    """The directed links of ``spec`` in its order (``a->b`` then ``b->a`` for an undirected
    one): bandwidth B/s, latency s, and the bandwidth NCCL reaches over it (B/s)."""
    links: list[Link] = []
    for lk in spec.links:
        ends = [(lk.a, lk.b)] if lk.directed else [(lk.a, lk.b), (lk.b, lk.a)]
        nccl = nccl_bandwidth_Bps(lk, spec.gpu)
        for src, dst in ends:
            links.append(Link(f"{src}->{dst}", src, dst, lk.bandwidth, lk.latency, lk.kind, nccl))
    return tuple(links)


def _check_reachable(topo: Topology, file: str | None, field: str) -> None:
    """Raise unless every GPU reaches every other GPU and its host, and its host reaches it.

    A route relays through hosts and switches, never through a third GPU
    (:meth:`Topology.route`). With the hosts and switches cut into strongly connected
    components, every such route exists when one component is entered from and left to by
    every GPU (a cluster's network, a server's NVSwitch or PCIe tree) and each GPU has links
    to and from its host's component: checked in ``O(links)``, so a cluster of thousands of
    GPUs loads in seconds. Otherwise every pair is routed (``O(GPUs x links)``) to name one
    that fails.

    Raises:
        InputError: some GPU cannot reach another GPU or its host (field ``links``).
    """
    if _hubs_connect(topo):
        return
    ends = [(a.name, b.name) for a in topo.gpus for b in topo.gpus if a is not b]
    ends += [(gpu.name, gpu.host) for gpu in topo.gpus] + [
        (gpu.host, gpu.name) for gpu in topo.gpus
    ]
    for src, dst in ends:
        try:
            topo.route(src, dst)
        except ValueError:
            raise InputError(
                f"no path of links from {src} to {dst}", file=file, field=field
            ) from None


def _hubs_connect(topo: Topology) -> bool:
    """The sufficient condition of :func:`_check_reachable` (its doc)."""
    gpus = {g.name for g in topo.gpus}
    hubs = sorted(topo.nodes - gpus)
    fwd: dict[str, list[str]] = {h: [] for h in hubs}
    back: dict[str, list[str]] = {h: [] for h in hubs}
    out_hubs: dict[str, set[str]] = {g: set() for g in gpus}
    in_hubs: dict[str, set[str]] = {g: set() for g in gpus}
    for lk in topo.links:
        if lk.src in gpus and lk.dst not in gpus:
            out_hubs[lk.src].add(lk.dst)
        elif lk.dst in gpus and lk.src not in gpus:
            in_hubs[lk.dst].add(lk.src)
        elif lk.src not in gpus:
            fwd[lk.src].append(lk.dst)
            back[lk.dst].append(lk.src)
    comp = _components(hubs, fwd, back)
    common: set[int] | None = None
    for gpu in topo.gpus:
        outs = {comp[h] for h in out_hubs[gpu.name]}
        ins = {comp[h] for h in in_hubs[gpu.name]}
        if gpu.host not in comp or comp[gpu.host] not in outs & ins:
            return False
        common = outs & ins if common is None else common & outs & ins
    return bool(common)


def _components(
    nodes: list[str], fwd: dict[str, list[str]], back: dict[str, list[str]]
) -> dict[str, int]:
    """Strongly connected component index of each node (Kosaraju, iterative)."""
    order: list[str] = []
    seen: set[str] = set()
    for root in nodes:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(fwd[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next((n for n in it if n not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(fwd[nxt])))
    comp: dict[str, int] = {}
    label = 0
    for root in reversed(order):
        if root in comp:
            continue
        label += 1
        comp[root], todo = label, [root]
        while todo:
            for prev in back[todo.pop()]:
                if prev not in comp:
                    comp[prev] = label
                    todo.append(prev)
    return comp

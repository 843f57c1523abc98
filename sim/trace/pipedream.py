"""Reader for PipeDream profiles (``graph.txt``) and the fold of their DAG into a chain.

Source format (msr-fiddle/pipedream, ``profiler/*/profiles/<model>/graph.txt``, MIT): one node
per line, then the edges, each on a line starting with a tab::

    nodeN -- <module repr> -- forward_compute_time=F, backward_compute_time=B, activation_size=A, parameter_size=P
    \tnodeX -- nodeY

Times are milliseconds for one minibatch *as profiled*; sizes are bytes; ``activation_size`` is
a list ``[a; b; c]`` for a node with several outputs (its sum is used). The profiling batch
size and GPU are not in the file: :data:`PROFILED_MICROBATCH` lists the batch sizes read off the
tensor sizes of the files shipped in ``data/pipedream``, and the device is recorded as
"as profiled".

**Clean-up, as PipeDream's own optimizer does** (``optimizer/optimizer_graph_hierarchical.py``,
``main``): source nodes whose description starts with ``Input`` get zero time, activation and
parameter bytes (their times are the host-to-device copy / data loading, not layer compute; the
dropped times are recorded in the provenance), and ``__getitem__`` sinks (unused outputs of
multi-output modules) are removed.

**The fold into a chain.** Nodes are put in a deterministic topological order (Kahn's algorithm,
ties broken by the smallest node number). Each node becomes one layer at its position ``i`` with
``fwd_s``/``bwd_s`` = its times / 1000, ``param_bytes`` = ``parameter_size`` and ``act_bytes``
= its activation size. ``out_bytes`` of position ``i`` is the sum of the activation sizes of all
nodes at positions ``<= i`` that have an edge to a node at a position ``> i``: exactly the
tensors that cross a stage boundary placed after ``i`` (skip connections and parallel branches
included, so a cut inside an Inception block pays for every open branch).

**Merging zero-cost nodes** (default ``merge_zero_cost=True``): a node with zero forward time,
zero backward time and no parameters (``Input``, ``__getitem__``, ``Add``, ``Concat`` ... as
profiled) is merged into the next layer of the chain (trailing ones into the previous layer).
A merged layer sums times, parameter and activation bytes of its nodes and takes the
``out_bytes`` of its last position; it is named after its non-zero-cost node. Totals of time and
parameter bytes are unchanged; cuts right after such nodes are no longer offered. Activation
bytes are summed as PipeDream's optimizer sums ``activation_size`` over a stage's nodes, which
counts views (``__getitem__``) again.
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.errors import InputError
from sim.textio import read_text
from sim.trace.pipedream_graph import Node, parse_graph, topological_order
from sim.trace.schema import LayerProfile, Trace, dtype_bytes

PIPEDREAM_REPO = "github.com/msr-fiddle/pipedream"
PIPEDREAM_COMMIT = "7db6a1c3e64996d5b319faec6ca38cb31bfea1c4"
DEVICE_AS_PROFILED = "as profiled (V100-class, per the PipeDream paper; not recorded in the file)"

_IMG = "input tensor {n:,} B = {b} x 3 x {r} x {r} x 4 B (fp32)"
#: Profiling batch size per model directory, with the evidence read off the file's tensor sizes.
PROFILED_MICROBATCH: dict[str, tuple[int, str]] = {
    "gnmt_large": (64, "activations 13,107,200 B = 64 x 50 x 1024 x 4 B (batch 64, seq 50, fp32)"),
    "vgg16": (
        128,
        "conv output 411,041,792 B = 128 x 256 x 56 x 56 x 4 B; "
        + _IMG.format(n=77070336, b=128, r=224),
    ),
    "inception_v3": (128, _IMG.format(n=137319936, b=128, r=299)),
    "resnet50": (128, _IMG.format(n=77070336, b=128, r=224)),
    "resnext50": (128, _IMG.format(n=77070336, b=128, r=224)),
    "nasnetamobile": (128, _IMG.format(n=77070336, b=128, r=224)),
    "densenet121": (64, _IMG.format(n=38535168, b=64, r=224)),
    "resnet101": (64, _IMG.format(n=38535168, b=64, r=224)),
    "resnext101": (64, _IMG.format(n=38535168, b=64, r=224)),
    "alexnet": (256, _IMG.format(n=154140672, b=256, r=224)),
    "resnet18": (256, _IMG.format(n=154140672, b=256, r=224)),
    "squeezenet1_0": (256, _IMG.format(n=154140672, b=256, r=224)),
}

#: Model directories of the PipeDream commit above (``source`` in provenance names them).
PIPEDREAM_MODELS = frozenset(PROFILED_MICROBATCH) | {"gnmt", "nasnetalarge"}


def _clean(nodes: dict[str, Node], succ: dict[str, set[str]]) -> float:
    """PipeDream's optimizer clean-up (see module doc); returns dropped Input time in ms."""
    has_pred = {b for outs in succ.values() for b in outs}
    dropped_ms = 0.0
    for i, node in nodes.items():
        if i not in has_pred and node.desc.startswith("Input"):
            dropped_ms += node.fwd_ms + node.bwd_ms
            node.fwd_ms = node.bwd_ms = node.act_bytes = node.param_bytes = 0.0
    for i in [
        i for i, node in nodes.items() if not succ[i] and node.desc.startswith("__getitem__")
    ]:
        del nodes[i], succ[i]
        for outs in succ.values():
            outs.discard(i)
    return dropped_ms


def _ms_to_s(ms: float) -> float:
    """Milliseconds to seconds, rounded to 1e-12 s so ``0.14 ms`` is written ``0.00014``."""
    return round(ms / 1000.0, 12)


def fold_to_chain(
    nodes: dict[str, Node],
    succ: dict[str, set[str]],
    order: list[str],
    merge_zero_cost: bool = True,
) -> list[LayerProfile]:
    """Fold a DAG in topological ``order`` into a chain of layers (see module doc)."""
    pos = {i: k for k, i in enumerate(order)}
    diff = [0.0] * (len(order) + 1)
    for i in order:
        if succ[i]:
            last = max(pos[b] for b in succ[i])
            diff[pos[i]] += nodes[i].act_bytes
            diff[last] -= nodes[i].act_bytes
    out, running = [], 0.0
    for k in range(len(order)):
        running += diff[k]
        out.append(running)
    groups: list[list[int]] = []
    pending: list[int] = []
    for k, i in enumerate(order):
        pending.append(k)
        if not (merge_zero_cost and nodes[i].zero_cost):
            groups.append(pending)
            pending = []
    if pending and groups:
        groups[-1].extend(pending)
    elif pending:
        groups.append(pending)
    layers = []
    for g in groups:
        members = [nodes[order[k]] for k in g]
        named = next((n for n in members if not n.zero_cost), members[-1])
        layers.append(
            LayerProfile(
                name=named.label,
                fwd_s=_ms_to_s(sum(n.fwd_ms for n in members)),
                bwd_s=_ms_to_s(sum(n.bwd_ms for n in members)),
                param_bytes=sum(n.param_bytes for n in members),
                act_bytes=sum(n.act_bytes for n in members),
                out_bytes=out[g[-1]],
            )
        )
    return layers


def _source(path: Path) -> str:
    model = path.parent.name
    kind = "translation" if model.startswith("gnmt") else "image_classification"
    return f"{PIPEDREAM_REPO}@{PIPEDREAM_COMMIT} profiler/{kind}/profiles/{model}/graph.txt"


def read_pipedream(
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    microbatch_size: int | None = None,
    dtype: str = "fp32",
    merge_zero_cost: bool = True,
) -> Trace:
    """Read a PipeDream ``graph.txt`` and fold it into a chain :class:`Trace`.

    Args:
        path: the ``graph.txt``; its directory name (e.g. ``gnmt_large``) names the model.
        name: trace name; default the directory name.
        microbatch_size: samples the profile was taken at; default from
            :data:`PROFILED_MICROBATCH` by directory name.
        dtype: dtype as profiled (PipeDream profiled fp32).
        merge_zero_cost: merge zero-time, parameter-free nodes into their neighbour.

    Returns:
        A trace with times in seconds per micro-batch of ``microbatch_size`` samples.

    Raises:
        InputError: unreadable file, malformed line (file and line named), a cycle, or an
            unknown profiling batch size with no ``microbatch_size`` given.
    """
    p = Path(path)
    file = str(p)
    text = read_text(p, label=file, what="PipeDream graph")
    dtype_bytes(dtype)
    model = p.parent.name
    evidence = "given by the caller"
    if microbatch_size is None:
        if model not in PROFILED_MICROBATCH:
            raise InputError(
                f"the profiling batch size of model {model!r} is not known; pass "
                f"microbatch_size= to read_pipedream and save it with write_trace "
                f"(known: {', '.join(sorted(PROFILED_MICROBATCH))})",
                file=file,
                field="microbatch_size",
            )
        microbatch_size, evidence = PROFILED_MICROBATCH[model]
    nodes, succ = parse_graph(text, file)
    n_file = len(nodes)
    dropped_ms = _clean(nodes, succ)
    order = topological_order(nodes, succ, file)
    layers = fold_to_chain(nodes, succ, order, merge_zero_cost)
    ours = model in PIPEDREAM_MODELS
    prov = {
        "source": _source(p) if ours else file,
        "licence": "MIT (Copyright (c) 2015 - present Microsoft Corporation)"
        if ours
        else "unknown",
        "file": file,
        "format": "PipeDream graph.txt: times in ms per minibatch as profiled, sizes in bytes",
        "microbatch_size_evidence": evidence,
        "dtype_evidence": (
            "as profiled: fp32 (4-byte elements in the activation sizes)"
            if ours and dtype == "fp32"
            else "given by the caller"
        ),
        "fold": (
            f"{n_file} nodes; Input sources zeroed and __getitem__ sinks removed as in "
            f"PipeDream's optimizer; Kahn order (ties by node number); out_bytes = bytes of "
            f"tensors crossing the cut; zero-cost nodes merged: {merge_zero_cost}; "
            f"{len(layers)} layers"
        ),
        "input_time_dropped_s": _ms_to_s(dropped_ms),
        "command": f"sim.trace.read_pipedream({file!r})",
        "notes": (
            "Measured by PipeDream's profiler; times are per minibatch of "
            f"{microbatch_size} samples as profiled. The GPU is not recorded in the file "
            "(V100-class per the PipeDream paper)."
        ),
    }
    return Trace(
        name=name or model,
        layers=tuple(layers),
        microbatch_size=microbatch_size,
        dtype=dtype,
        device=DEVICE_AS_PROFILED,
        provenance=prov,
    )

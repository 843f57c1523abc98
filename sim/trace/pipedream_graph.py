"""Parsing of PipeDream ``graph.txt`` files into nodes and edges, and a deterministic order.

The format (msr-fiddle/pipedream, MIT) and how pipesim folds the graph into a chain are
described in :mod:`sim.trace.pipedream`. This module only parses and orders:

* :func:`parse_graph` -> nodes by id (times in ms, sizes in bytes) and successor sets;
* :func:`topological_order` -> Kahn's algorithm with ties broken by node number.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass

from sim.errors import InputError

_NODE = re.compile(
    r"^(?P<id>\S+) -- (?P<desc>.*) -- forward_compute_time=(?P<fwd>[^,]*), "
    r"backward_compute_time=(?P<bwd>[^,]*), activation_size=(?P<act>.*?), "
    r"parameter_size=(?P<param>[^,\s]*)\s*$"
)
_EDGE = re.compile(r"^\t(\S+) -- (\S+)\s*$")


@dataclass
class Node:
    """One ``graph.txt`` node: times in ms per minibatch as profiled, sizes in bytes."""

    id: str
    desc: str
    fwd_ms: float
    bwd_ms: float
    act_bytes: float
    param_bytes: float
    line: int

    @property
    def key(self) -> tuple[int, str]:
        m = re.search(r"\d+", self.id)
        return (int(m.group()) if m else 2**62, self.id)

    @property
    def zero_cost(self) -> bool:
        return self.fwd_ms == 0 and self.bwd_ms == 0 and self.param_bytes == 0

    @property
    def label(self) -> str:
        desc = " ".join(self.desc.split())
        return f"{self.id}:{desc if len(desc) <= 40 else desc.split('(', 1)[0]}"


def _number(text: str, field: str, where: str, file: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InputError(
            f"{where}: {field}: not a number: {text!r}", file=file, field=field
        ) from None
    if not 0 <= v < float("inf"):
        raise InputError(
            f"{where}: {field}: must be a finite number >= 0, got {v}", file=file, field=field
        )
    return v


def _parse_node(m: re.Match[str], n: int, file: str) -> Node:
    where = f"line {n} ({m['id']})"
    act = m["act"].strip()
    parts = act[1:-1].split(";") if act.startswith("[") and act.endswith("]") else [act]
    return Node(
        id=m["id"],
        desc=m["desc"],
        fwd_ms=_number(m["fwd"], "forward_compute_time", where, file),
        bwd_ms=_number(m["bwd"], "backward_compute_time", where, file),
        act_bytes=sum(_number(p.strip(), "activation_size", where, file) for p in parts),
        param_bytes=_number(m["param"], "parameter_size", where, file),
        line=n,
    )


def parse_graph(text: str, file: str) -> tuple[dict[str, Node], dict[str, set[str]]]:
    """Nodes by id and successor sets from the text of a ``graph.txt``.

    Raises:
        InputError: a line matches neither form, a number is bad, a node is defined twice, an
            edge names an unknown node, or there are no nodes; the message names file and line.
    """
    nodes: dict[str, Node] = {}
    edges: list[tuple[str, str, int]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if e := _EDGE.match(line):
            edges.append((e[1], e[2], n))
        elif m := _NODE.match(line):
            if m["id"] in nodes:
                raise InputError(
                    f"line {n}: node {m['id']} defined twice (first on line {nodes[m['id']].line})",
                    file=file,
                    field=f"line {n}",
                )
            nodes[m["id"]] = _parse_node(m, n, file)
        else:
            raise InputError(
                f"line {n}: neither a node ('nodeN -- desc -- forward_compute_time="
                f"...') nor an edge ('<tab>nodeX -- nodeY'): {line[:80]!r}",
                file=file,
                field=f"line {n}",
            )
    if not nodes:
        raise InputError("no nodes found", file=file)
    succ: dict[str, set[str]] = {i: set() for i in nodes}
    for a, b, n in edges:
        for x in (a, b):
            if x not in nodes:
                raise InputError(
                    f"line {n}: edge names unknown node {x}", file=file, field=f"line {n}"
                )
        succ[a].add(b)
    return nodes, succ


def topological_order(nodes: dict[str, Node], succ: dict[str, set[str]], file: str) -> list[str]:
    """Kahn's algorithm, ties broken by node number: a deterministic topological order.

    Raises:
        InputError: the edges contain a cycle (the nodes left on it are named).
    """
    indeg = {i: 0 for i in nodes}
    for outs in succ.values():
        for b in outs:
            indeg[b] += 1
    ready = [nodes[i].key for i in nodes if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for b in succ[i]:
            indeg[b] -= 1
            if indeg[b] == 0:
                heapq.heappush(ready, nodes[b].key)
    if len(order) != len(nodes):
        left = sorted(nodes[i].key for i in nodes if indeg[i] > 0)[:5]
        raise InputError(f"the edges contain a cycle through {[i for _, i in left]}", file=file)
    return order

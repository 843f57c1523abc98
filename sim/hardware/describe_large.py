"""Large topologies in ``sim hardware show``: above :data:`MATRIX_GPUS` GPUs, runs of equal
table rows merged (:func:`add_rows`) and the GPU x GPU route matrix summarised
(:func:`route_summary`). Split from :mod:`sim.hardware.describe`, which uses them.
"""

from __future__ import annotations

from rich.table import Table

from sim.hardware.parts import Link
from sim.hardware.topology import Topology

_GB = 1e9


def route_relays(topo: Topology, route: tuple[Link, ...]) -> list[str]:
    """Intermediate GPUs and hosts of a route (switches are not listed)."""
    keep = {g.name for g in topo.gpus} | {h.name for h in topo.hosts}
    return [lk.dst for lk in route[:-1] if lk.dst in keep]


MATRIX_GPUS = 16
"""Above this many GPUs ``sim hardware show`` merges runs of equal rows and summarizes the
route matrix (72 x 72 cells do not fit a terminal); ``--json`` lists every one."""


def add_rows(table: Table, topo: Topology, rows: list[list[str]], varying: tuple[int, ...]) -> None:
    """Add ``rows`` to ``table``; above :data:`MATRIX_GPUS` GPUs, consecutive rows equal but
    for the ``varying`` columns become one, those columns written ``first .. last`` and the
    first with the count (``gpu0 .. gpu71 (72)``)."""
    if topo.num_gpus <= MATRIX_GPUS:
        for row in rows:
            table.add_row(*row)
        return
    same = [i for i in range(len(rows[0]))] if rows else []
    same = [i for i in same if i not in varying]
    i = 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and all(rows[j][k] == rows[i][k] for k in same):
            j += 1
        row = list(rows[i])
        if j - i > 1:
            for k in varying:
                first, last = rows[i][k], rows[j - 1][k]
                row[k] = first if first == last else f"{first} .. {last}"
            row[varying[0]] += f" ({j - i})"
        table.add_row(*row)
        i = j


def route_summary(topo: Topology) -> Table:
    """The route matrix of a topology above :data:`MATRIX_GPUS` GPUs as one row per distinct
    bottleneck bandwidth and relay count: how many ordered GPU pairs, and the first of them."""
    groups: dict[tuple[float, int], list[tuple[str, str, list[str]]]] = {}
    for src in topo.gpus:
        for dst in topo.gpus:
            if src is not dst:
                via = route_relays(topo, topo.route(src.name, dst.name))
                bw = topo.route_bandwidth_Bps(src.name, dst.name) / _GB
                groups.setdefault((round(bw, 1), len(via)), []).append((src.name, dst.name, via))
    table = Table(
        title=f"{topo.name}: GPU-to-GPU routes",
        caption=f"{topo.num_gpus} GPUs: ordered pairs grouped by bottleneck GB/s (--json: each)",
    )
    for col in ("GB/s", "relays", "GPU pairs", "e.g."):
        table.add_column(col, justify="left" if col == "e.g." else "right")
    for (bw, hops), pairs in sorted(groups.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        a, b, via = pairs[0]
        example = f"{a} -> {b}" + (f" ({', '.join(via)})" if via else "")
        table.add_row(f"{bw:.1f}", str(hops), str(len(pairs)), example)
    return table

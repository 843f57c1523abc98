"""Measured collective times: what a communication library took on this machine, by size.

``sim calibrate`` times the collectives of the replay's own library between its ranks (gloo on
CPU, NCCL on GPUs: ``torch.distributed.all_reduce``, ``all_gather_into_tensor``,
``reduce_scatter_tensor``) over a sweep of sizes and writes them into the hardware description
(``collectives:``, :mod:`sim.hardware.spec`). A communicator of the measured number of ranks on
that hardware then takes its collective times from the table, not from a model: that is how
the CPU tensor-parallel replay's gloo collectives are predicted (issue 16).

Between two measured sizes the time is linear in bytes (each segment is its own latency plus
bytes over bandwidth); below the smallest size it is the smallest size's time (a latency
floor); above the largest, the last segment's slope continues. Sizes follow nccl-tests' ``B``:
the all-reduce buffer, the all-gather output, the reduce-scatter input.

A table holds for communicators of its ``ranks`` spread over its ``servers`` (1: inside one
server, which is what ``sim calibrate`` and the presets' tables measured), never for the same
number of ranks across servers, whose collectives cross the network.

Where only the all-reduce was measured, a reduce-scatter or all-gather of the same ``B`` takes
half the all-reduce's time (:func:`find_table`): NCCL's ring all-reduce *is* a reduce-scatter
followed by an all-gather of the same buffer (NCCL ``src/device/all_reduce.h``, ``runRing``:
a send, ``n-2`` reduce-and-copy steps and a reduce, then ``n-2`` copy steps), and nccl-tests' ``doc/PERFORMANCE.md`` gives
them the same bus bandwidth at factors ``2(n-1)/n`` against ``(n-1)/n`` of the algorithm
bandwidth. Korthikanti et al. (arXiv:2205.05198, §6.2) measured a reduce-scatter plus an
all-gather as slightly slower than one all-reduce, so the halves are a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CollectiveTable:
    """Measured seconds of one collective kind over ``ranks`` members, by size.

    Attributes:
        kind: ``allreduce``, ``all_gather`` or ``reduce_scatter``.
        ranks: communicator size the table was measured with.
        sizes_bytes: increasing message sizes (nccl-tests' ``B``), at least one.
        times_s: the median seconds measured at each size.
        source: where and how it was measured.
        servers: servers the measured communicator spanned (1: one server).

    Raises:
        ValueError: sizes not increasing, lengths differ, or a negative time.
    """

    kind: str
    ranks: int
    sizes_bytes: tuple[float, ...]
    times_s: tuple[float, ...]
    source: str = ""
    servers: int = 1

    def __post_init__(self) -> None:
        if not self.sizes_bytes or len(self.sizes_bytes) != len(self.times_s):
            raise ValueError("a collective table needs as many times as sizes, at least one")
        if any(b <= a for a, b in zip(self.sizes_bytes, self.sizes_bytes[1:], strict=False)):
            raise ValueError("a collective table's sizes must increase")
        if any(t < 0 for t in self.times_s):
            raise ValueError("a collective table's times must not be negative")

    def time_s(self, nbytes: float) -> float:
        """Seconds of a collective of ``nbytes`` (module doc: piecewise linear, floored below
        the smallest size, the last slope above the largest, never below 0)."""
        xs, ys = self.sizes_bytes, self.times_s
        if nbytes <= xs[0] or len(xs) == 1:
            return ys[0]
        k = next((i for i in range(1, len(xs)) if nbytes <= xs[i]), len(xs) - 1)
        slope = (ys[k] - ys[k - 1]) / (xs[k] - xs[k - 1])
        return max(0.0, ys[k - 1] + slope * (nbytes - xs[k - 1]))


HALF_OF_ALLREDUCE = ("reduce_scatter", "all_gather")
"""Kinds derived from a measured all-reduce where not measured themselves (module doc)."""


def find_table(
    tables: tuple[CollectiveTable, ...], kind: str, ranks: int, servers: int = 1
) -> CollectiveTable | None:
    """The table of ``kind`` measured with ``ranks`` members over ``servers`` servers; for a
    reduce-scatter or all-gather without its own, the all-reduce's at half the time (module
    doc); else None."""
    found = next(
        (t for t in tables if (t.kind, t.ranks, t.servers) == (kind, ranks, servers)), None
    )
    if found is not None or kind not in HALF_OF_ALLREDUCE:
        return found
    ar = find_table(tables, "allreduce", ranks, servers)
    if ar is None:
        return None
    return CollectiveTable(
        kind,
        ranks,
        ar.sizes_bytes,
        tuple(t / 2 for t in ar.times_s),
        f"half of the measured all-reduce ({ar.source}): ring all-reduce = reduce-scatter + "
        "all-gather (sim.hardware.comm_tables)",
        servers,
    )

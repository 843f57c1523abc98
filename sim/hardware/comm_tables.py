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

    Raises:
        ValueError: sizes not increasing, lengths differ, or a negative time.
    """

    kind: str
    ranks: int
    sizes_bytes: tuple[float, ...]
    times_s: tuple[float, ...]
    source: str = ""

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


def find_table(
    tables: tuple[CollectiveTable, ...], kind: str, ranks: int
) -> CollectiveTable | None:
    """The table of ``kind`` measured with ``ranks`` members, or None."""
    return next((t for t in tables if t.kind == kind and t.ranks == ranks), None)

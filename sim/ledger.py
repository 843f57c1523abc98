"""Memory ledger: allocations and frees per device, with the running peak.

It never raises on over-subscription: the engine finishes the run and the verdict
(:meth:`Ledger.over_capacity`) says which device exceeded its capacity, by how much.
"""

from __future__ import annotations

from sim.events import MemoryEvent


class Ledger:
    """Per-device byte accounting over simulated time.

    Args:
        capacity_bytes: capacity of every device that has one (GPUs, host sockets).
        pools: ``{pool: (device, ...)}``: devices whose bytes come out of one shared capacity
            (a server's host DRAM: every rank's host state draws on all sockets' DRAM, as
            PatrickStar sizes its CPU chunk memory from the whole machine,
            Tencent/PatrickStar ``core/memtracer/memtracer.py`` ``available_chunk_mem``). The
            pool's running total and peak are kept in :attr:`pool_peak` under its name; its
            capacity is the sum of its devices', and only the pool is checked by
            :meth:`over_capacity`.
    """

    def __init__(
        self, capacity_bytes: dict[str, float], pools: dict[str, tuple[str, ...]] | None = None
    ):
        self.capacity_bytes = dict(capacity_bytes)
        self.events: list[MemoryEvent] = []
        self.current: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self.pool_of: dict[str, str] = {}
        self.pool_current: dict[str, float] = {}
        self.pool_peak: dict[str, float] = {}
        self.pool_capacity: dict[str, float] = {}
        for pool, devices in (pools or {}).items():
            self.pool_capacity[pool] = sum(self.capacity_bytes.get(d, 0.0) for d in devices)
            self.pool_of.update((d, pool) for d in devices)

    def change(
        self, time_s: float, device: str, delta_bytes: float, category: str, label: str = ""
    ) -> None:
        """Record ``delta_bytes`` (positive: allocate, negative: free) on ``device``."""
        if delta_bytes == 0:
            return
        self.events.append(MemoryEvent(time_s, device, delta_bytes, category, label))
        self._add(self.current, self.peak, device, delta_bytes)
        pool = self.pool_of.get(device)
        if pool is not None:
            self._add(self.pool_current, self.pool_peak, pool, delta_bytes)

    @staticmethod
    def _add(current: dict, peak: dict, name: str, delta_bytes: float) -> None:
        now = current.get(name, 0.0) + delta_bytes
        current[name] = now
        if now > peak.get(name, 0.0):
            peak[name] = now

    def over_capacity(self) -> list[tuple[str, float, float]]:
        """``(device, peak_bytes, capacity_bytes)`` for every device (or pool) whose peak
        exceeds its capacity; pooled devices are checked as their pool only."""
        peaks = {**self.peak, **self.pool_peak}
        caps = {d: c for d, c in self.capacity_bytes.items() if d not in self.pool_of}
        caps.update(self.pool_capacity)
        return [
            (dev, peaks.get(dev, 0.0), cap)
            for dev, cap in sorted(caps.items())
            if peaks.get(dev, 0.0) > cap
        ]

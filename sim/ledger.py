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
    """

    def __init__(self, capacity_bytes: dict[str, float]):
        self.capacity_bytes = dict(capacity_bytes)
        self.events: list[MemoryEvent] = []
        self.current: dict[str, float] = {}
        self.peak: dict[str, float] = {}

    def change(
        self, time_s: float, device: str, delta_bytes: float, category: str, label: str = ""
    ) -> None:
        """Record ``delta_bytes`` (positive: allocate, negative: free) on ``device``."""
        if delta_bytes == 0:
            return
        self.events.append(MemoryEvent(time_s, device, delta_bytes, category, label))
        now = self.current.get(device, 0.0) + delta_bytes
        self.current[device] = now
        if now > self.peak.get(device, 0.0):
            self.peak[device] = now

    def over_capacity(self) -> list[tuple[str, float, float]]:
        """``(device, peak_bytes, capacity_bytes)`` for every device whose peak exceeds it."""
        return [
            (dev, self.peak.get(dev, 0.0), cap)
            for dev, cap in sorted(self.capacity_bytes.items())
            if self.peak.get(dev, 0.0) > cap
        ]

"""Peak memory: the one computation every report and result row uses.

The engine's :class:`~sim.ledger.Ledger` records every allocation and free; this module replays
those events once per device (:func:`device_peaks`) and gives each device's peak, the bytes of
each category live at that moment, and the headroom left under its capacity. The ledger's
running peak, ``results.csv`` and the memory plots therefore cannot disagree. Events at one
instant keep the order the engine logged them in, so an allocate-then-free shows its peak.

Each category's live bytes are a running sum of float allocations and frees, so a category
that is empty in exact arithmetic may read a few ulps off zero (``-1.9e-06`` bytes of
activations at the peak of an interleaved Llama-3-70B point, issue 28): a live value within
:data:`ROUNDING` of the bytes that category has moved so far is zero.

Categories (:data:`ROW_CATEGORIES` maps them to result columns): ``weights``, ``gradients``,
``optimizer``, ``activations``, ``buffers`` (receive buffers), ``chunks``, ``framework`` (the
framework's buffers: gradient buckets, TE's weight-gradient buffers, workspaces), ``working``
(the running action's transients, the pipeline output cache), ``allocator`` (reserved by
PyTorch's caching allocator, handed to no tensor), ``reserve`` (CUDA context, NCCL buffers:
outside the allocator); hosts also have ``swap`` and ``offload``. A GPU's peak is its
``device`` bytes; :func:`allocated_bytes` and :func:`reserved_bytes` are what
``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` report
(:mod:`sim.memory.rank_memory`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from sim.events import MemoryEvent

ROUNDING = 1e-9
"""Relative rounding of a running sum of allocations and frees: each addition errs by at most
half an ulp of the partial sum (2^-53 of it, at most of the bytes moved so far), so even a
million of them stay under 1e-9 of the bytes moved; a live value within that is zero."""


def settled(live_bytes: float, moved_bytes: float) -> float:
    """``live_bytes`` (a running sum of allocations and frees that moved ``moved_bytes`` in
    all), or 0 when it is within :data:`ROUNDING` of zero.

    Example:
        >>> x = 51305899622.4  # stashes of 30 %, 10 % and 20 % of x, all freed
        >>> live = 0.3 * x - 0.1 * x - 0.2 * x
        >>> live, settled(live, 0.6 * x)
        (-1.9073486328125e-06, 0.0)
    """
    return 0.0 if abs(live_bytes) <= ROUNDING * moved_bytes else live_bytes


@dataclass(frozen=True)
class DevicePeak:
    """One device's peak.

    Attributes:
        device: node name (``gpu3``, ``cpu0``).
        peak_bytes: maximum bytes in use.
        time_s: first time the peak is reached.
        by_category: bytes of each category live at the peak (they sum to ``peak_bytes``).
        capacity_bytes: the device's capacity (None when unknown).
    """

    device: str
    peak_bytes: float
    time_s: float
    by_category: dict[str, float] = field(default_factory=dict)
    capacity_bytes: float | None = None

    @property
    def headroom_bytes(self) -> float | None:
        """``capacity - peak`` (negative when the device does not fit)."""
        return None if self.capacity_bytes is None else self.capacity_bytes - self.peak_bytes


def device_peaks(
    events: Iterable[MemoryEvent], capacity_bytes: dict[str, float] | None = None
) -> dict[str, DevicePeak]:
    """The peak of every device that has events or a capacity (0 bytes when no events)."""
    caps = capacity_bytes or {}
    grouped: dict[str, list[MemoryEvent]] = defaultdict(list)
    for ev in sorted(events, key=lambda e: e.time_s):
        grouped[ev.device].append(ev)
    out = {}
    for dev in sorted(set(grouped) | set(caps)):
        live: dict[str, float] = {c: 0.0 for c in sorted({e.category for e in grouped[dev]})}
        moved = dict(live)
        total, best, at, when = 0.0, 0.0, dict(live), 0.0
        for ev in grouped[dev]:
            live[ev.category] += ev.delta_bytes
            moved[ev.category] += abs(ev.delta_bytes)
            total += ev.delta_bytes
            if total > best:
                best, when = total, ev.time_s
                at = {c: settled(v, moved[c]) for c, v in live.items()}
        out[dev] = DevicePeak(dev, best, when, at, caps.get(dev))
    return out


def tightest_gpu(peaks: dict[str, DevicePeak]) -> DevicePeak | None:
    """The GPU with the least headroom (first by name on ties); None without GPUs."""
    gpus = [p for d, p in peaks.items() if d.startswith("gpu") and p.capacity_bytes is not None]
    return min(gpus, key=lambda p: (p.headroom_bytes, p.device), default=None)


ROW_CATEGORIES: dict[str, tuple[str, ...]] = {
    "peak_weights_bytes": ("weights",),
    "peak_gradients_bytes": ("gradients",),
    "peak_optimizer_bytes": ("optimizer",),
    "peak_activations_bytes": ("activations", "chunks"),
    "peak_buffers_bytes": ("buffers",),
    "peak_working_bytes": ("working",),
    "peak_reserve_bytes": ("reserve", "allocator", "framework"),
}
"""Result-row column -> ledger categories summed into it (at the tightest GPU's peak)."""


OUTSIDE_ALLOCATOR = ("reserve",)
"""Ledger categories PyTorch's caching allocator does not hold (CUDA context, NCCL buffers)."""
UNALLOCATED = ("allocator",)
"""Reserved by the caching allocator but handed to no tensor (:mod:`sim.memory.rank_memory`)."""


def allocated_bytes(peak: DevicePeak) -> float:
    """What ``torch.cuda.max_memory_allocated`` reports at ``peak``: every category but the
    runtime reserve and the allocator's unallocated bytes."""
    skip = OUTSIDE_ALLOCATOR + UNALLOCATED
    return sum(v for c, v in peak.by_category.items() if c not in skip)


def reserved_bytes(peak: DevicePeak) -> float:
    """What ``torch.cuda.max_memory_reserved`` reports at ``peak``: allocated + the allocator's
    unallocated bytes."""
    return allocated_bytes(peak) + sum(peak.by_category.get(c, 0.0) for c in UNALLOCATED)


def row_breakdown(peaks: dict[str, DevicePeak]) -> dict:
    """``headroom_bytes``, ``tightest_gpu``, ``peak_allocated_bytes``, ``peak_reserved_bytes``
    and the :data:`ROW_CATEGORIES` columns of the GPU with the least headroom (empty values when
    there is no GPU)."""
    tight = tightest_gpu(peaks)
    if tight is None:
        empty = {col: None for col in (*ROW_CATEGORIES, *MEMORY_COLUMNS)}
        return {"headroom_bytes": None, "tightest_gpu": "", **empty}
    row = {
        "headroom_bytes": tight.headroom_bytes,
        "tightest_gpu": tight.device,
        "peak_allocated_bytes": allocated_bytes(tight),
        "peak_reserved_bytes": reserved_bytes(tight),
    }
    for col, cats in ROW_CATEGORIES.items():
        row[col] = sum(tight.by_category.get(c, 0.0) for c in cats)
    return row


MEMORY_COLUMNS = ("peak_allocated_bytes", "peak_reserved_bytes")
"""Result-row columns of the tightest GPU's allocated and reserved peak."""

"""Memory in use per device over time, computed from the :class:`~sim.events.MemoryEvent` ledger.

Each device starts empty (0 bytes). Events are replayed in time order; events at the same time
keep the order the engine logged them in, so an allocate-then-free at one instant still shows its
transient peak. All values are bytes; times are seconds.
"""

from __future__ import annotations

from collections import defaultdict

from sim.events import EventLog, MemoryEvent
from sim.memory.peak import device_peaks
from sim.report._common import category_key, sorted_devices


def _by_device(log: EventLog) -> dict[str, list[MemoryEvent]]:
    """Memory events grouped per device, stably sorted by time."""
    grouped: dict[str, list[MemoryEvent]] = defaultdict(list)
    for ev in sorted(log.memory, key=lambda e: e.time_s):
        grouped[ev.device].append(ev)
    return grouped


def memory_timeline(log: EventLog) -> dict[str, tuple[list[float], list[float]]]:
    """Bytes in use on each device after every allocation or free.

    Args:
        log: the simulation's event log.

    Returns:
        ``{device: (times_s, bytes_in_use)}`` for every device with memory events or a capacity,
        in display order (GPUs by number, then hosts). Both lists have the same length; the first
        point is ``(min(0, first event time), 0.0)`` and each further point is the running sum of
        ``delta_bytes`` just after one event, so ``bytes_in_use`` is a step function (hold each
        value until the next time).
    """
    grouped = _by_device(log)
    out: dict[str, tuple[list[float], list[float]]] = {}
    for device in sorted_devices([*grouped, *log.capacity_bytes]):
        events = grouped.get(device, [])
        start_s = min(0.0, events[0].time_s) if events else 0.0
        times_s, in_use = [start_s], [0.0]
        total = 0.0
        for ev in events:
            total += ev.delta_bytes
            times_s.append(ev.time_s)
            in_use.append(total)
        out[device] = (times_s, in_use)
    return out


def peak_by_device(log: EventLog) -> dict[str, float]:
    """Peak bytes in use per device (0.0 for a device that never allocates), from
    :func:`sim.memory.peak.device_peaks`, the one peak computation.

    Returns:
        ``{device: peak_bytes}`` in display order.
    """
    peaks = device_peaks(log.memory, log.capacity_bytes)
    return {dev: peaks[dev].peak_bytes if dev in peaks else 0.0 for dev in memory_timeline(log)}


def peak_by_category(log: EventLog, device: str) -> dict[str, float]:
    """Bytes of each memory category live on ``device`` at its peak.

    The peak moment is the first time the device's total bytes in use reaches its maximum;
    the returned values therefore sum to ``peak_by_device(log)[device]``.

    Args:
        log: the simulation's event log.
        device: a device name such as ``gpu3``.

    Returns:
        ``{category: bytes}`` for every category the device ever allocates (0.0 when none of it
        is live at the peak), ordered weights, gradients, optimizer, activations, buffers, swap,
        then others by name. Empty for a device that has a capacity but no memory events.

    Raises:
        KeyError: ``device`` has neither memory events nor a capacity in the log.
    """
    parts = peaks_by_category(log)
    if device not in parts:
        raise KeyError(f"device {device!r} does not appear in the event log")
    return parts[device]


def peaks_by_category(log: EventLog) -> dict[str, dict[str, float]]:
    """:func:`peak_by_category` of every device with memory events or a capacity, from one
    pass over the ledger (:func:`sim.memory.peak.device_peaks`).

    Returns:
        ``{device: {category: bytes}}``, devices in :func:`sim.memory.peak.device_peaks`'s
        order; ``{}`` for a device with a capacity but no memory events.
    """
    with_events = {ev.device for ev in log.memory}
    out: dict[str, dict[str, float]] = {}
    for device, peak in device_peaks(log.memory, log.capacity_bytes).items():
        live = peak.by_category if device in with_events else {}
        out[device] = {c: live[c] for c in sorted(live, key=category_key)}
    return out

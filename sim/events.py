"""The event log: what the engine returns and everything downstream reads.

Metrics, plots and the Chrome-trace timeline are computed from these records only, so they
cannot disagree with the simulation. Times are seconds from the start of the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Event:
    """A span of activity on one device stream.

    Attributes:
        kind: ``compute`` (F/B/I/W), ``recompute``, ``optimizer``, ``transfer`` (stage
            boundary send), ``allreduce`` (data-parallel gradient reduction), ``swap_out``,
            ``swap_in``, ``stall`` (compute waiting for data that is late), ``chunk_move``,
            ``reduce_scatter`` / ``all_gather`` (sharded data parallelism), ``host_optimizer``
            (an optimizer step on the host CPU).
        device: the device it runs on (``gpu3``); for transfers the sending device.
        stream: ``compute``, ``send``, ``recv``, ``d2h``, ``h2d``, ``p2p`` or ``comm``.
        name: a short label: ``"2F5"``, ``"2F5 gpu1->gpu2"``, ``"allreduce s2"`` ...
        start_s: start time in seconds.
        end_s: end time in seconds.
        stage: pipeline stage, if any.
        microbatch: global micro-batch index, if any.
        iteration: optimizer-step index the micro-batch belongs to, if any.
        nbytes: bytes moved, for transfers.
        links: names of the links the transfer occupied.
        replica: data-parallel replica index of the device.
    """

    kind: str
    device: str
    stream: str
    name: str
    start_s: float
    end_s: float
    stage: int | None = None
    microbatch: int | None = None
    iteration: int | None = None
    nbytes: float = 0.0
    links: tuple[str, ...] = ()
    replica: int = 0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class MemoryEvent:
    """One allocation (``delta_bytes > 0``) or free (``< 0``) on a device at ``time_s``.

    Attributes:
        time_s: when, in seconds.
        device: ``gpu3`` or a host ``cpu0``.
        delta_bytes: signed change in bytes.
        category: ``weights``, ``gradients``, ``optimizer``, ``activations``, ``buffers``,
            ``swap`` (bytes parked on this device by another), ``chunks`` (fetched chunks
            and gradients on their way out), ``offload`` (model state in host DRAM).
        label: what it is, e.g. ``"stash 2F5"``.
    """

    time_s: float
    device: str
    delta_bytes: float
    category: str
    label: str = ""


@dataclass
class EventLog:
    """Everything one simulation produced.

    Attributes:
        events: activity spans in the order they ended.
        memory: allocations and frees in time order.
        capacity_bytes: memory capacity per device.
        iteration_ends_s: per optimizer step, the time the last stage finished it.
        meta: free-form facts about the run (placement, schedule, policy decisions).
    """

    events: list[Event] = field(default_factory=list)
    memory: list[MemoryEvent] = field(default_factory=list)
    capacity_bytes: dict[str, float] = field(default_factory=dict)
    iteration_ends_s: list[float] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

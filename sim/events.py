"""The event log: what the engine returns and everything downstream reads.

Metrics, plots and the Chrome-trace timeline are computed from these records only, so they
cannot disagree with the simulation. Times are seconds from the start of the simulation.

The vocabularies (:class:`EventKind`, :class:`Stream`, :class:`MemCategory`) are ``str`` enums:
a member equals its plain string (``EventKind.COMPUTE == "compute"``), so readers that compare
strings keep working. Records are named tuples (cheap to create: the engine makes one per
action and transfer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from itertools import repeat
from typing import Any, NamedTuple


class EventKind(StrEnum):
    """What an :class:`Event` is."""

    COMPUTE = "compute"  # F, B, I or W
    RECOMPUTE = "recompute"  # re-running a forward before its backward
    OPTIMIZER = "optimizer"  # the optimizer step on the GPU
    TRANSFER = "transfer"  # a stage-boundary send (activation or gradient)
    ALLREDUCE = "allreduce"  # data-parallel gradient reduction
    REDUCE_SCATTER = "reduce_scatter"  # sharded data parallelism: gradients
    ALL_GATHER = "all_gather"  # sharded data parallelism: parameters
    SWAP_OUT = "swap_out"  # a copy off the GPU (stash to host or peer, state to host)
    SWAP_IN = "swap_in"  # a copy back to the GPU
    CHUNK_MOVE = "chunk_move"  # a chunk fetch or gradient write-back
    STALL = "stall"  # compute waiting for data that is late
    HOST_WAIT = "host_wait"  # compute waiting for its host to issue the next op (sim.engine.host)
    HOST_OPTIMIZER = "host_optimizer"  # an optimizer step on the host CPU
    ALLTOALL = "alltoall"  # expert-parallel dispatch/combine, Ulysses context parallelism
    RING_EXCHANGE = "ring_exchange"  # ring attention's KV steps (context parallelism)


COLLECTIVE_KINDS = (EventKind.ALLREDUCE, EventKind.REDUCE_SCATTER, EventKind.ALL_GATHER)
GROUP_KINDS = (EventKind.ALLTOALL, EventKind.RING_EXCHANGE)
"""Exchanges within an expert- or context-parallel group (:mod:`sim.engine.groups`)."""
MEMORY_MOVE_KINDS = (EventKind.SWAP_OUT, EventKind.SWAP_IN, EventKind.CHUNK_MOVE)


class Stream(StrEnum):
    """The lane of a device an :class:`Event` runs on (host optimizer steps use ``adam-s<s>r<r>``)."""

    COMPUTE = "compute"
    SEND = "send"
    RECV = "recv"
    D2H = "d2h"
    H2D = "h2d"
    P2P = "p2p"
    COMM = "comm"
    TP = "tp"  # tensor-parallel collectives (sim.engine.tensor_collectives.TensorCollectives)
    EP = "ep"  # expert-parallel all-to-alls (sim.engine.groups)
    CP = "cp"  # context-parallel exchanges (sim.engine.groups)


class MemCategory(StrEnum):
    """What the bytes of a :class:`MemoryEvent` are."""

    WEIGHTS = "weights"
    GRADIENTS = "gradients"
    OPTIMIZER = "optimizer"
    ACTIVATIONS = "activations"
    BUFFERS = "buffers"  # received activations and gradients
    SWAP = "swap"  # bytes parked on this device by another
    CHUNKS = "chunks"  # fetched chunks and gradients on their way out
    OFFLOAD = "offload"  # model state in host DRAM
    RESERVE = "reserve"  # CUDA context, cuBLAS workspace, NCCL buffers (sim.hardware.capacity)
    ALLOCATOR = "allocator"  # caching-allocator margin
    WORKING = "working"  # transient working memory of the peak (sim.hardware.capacity)
    FRAMEWORK = "framework"  # a framework's buffers, or memory it keeps out of its reach


class Event(NamedTuple):
    """A span of activity on one device stream.

    Attributes:
        kind: an :class:`EventKind`.
        device: the device it runs on (``gpu3``); for transfers the sending device.
        stream: a :class:`Stream` (or ``adam-s<s>r<r>`` for a host optimizer step).
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


class MemoryEvent(NamedTuple):
    """One allocation (``delta_bytes > 0``) or free (``< 0``) on a device at ``time_s``.

    Attributes:
        time_s: when, in seconds.
        device: ``gpu3`` or a host ``cpu0``.
        delta_bytes: signed change in bytes.
        category: a :class:`MemCategory`.
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

    def __reduce__(self) -> tuple:
        """Pickled with its records as plain tuples, rebuilt by :func:`_unpickle_log`: the
        pool workers of ``sim run`` send each possible winner's log back (a 64-stage GPT-2
        point's is 7,700 events and 15,000 memory events, 1.2 MB), and a named tuple pickles
        as its class and its fields, rebuilt by a call of its ``__new__`` each: 35 against
        11 ms to pickle that log, 18 against 13 ms to unpickle it. The same records come back
        (the fields' own objects, enum members included, are pickled as before)."""
        return (
            _unpickle_log,
            (
                type(self),
                list(map(tuple, self.events)),
                list(map(tuple, self.memory)),
                self.capacity_bytes,
                self.iteration_ends_s,
                self.meta,
            ),
        )

    def to_frame(self) -> Any:
        """The spans as a :class:`pandas.DataFrame`: one row per :class:`Event` (its fields,
        seconds and bytes) plus ``duration_s``, in the log's order.

        Example:
            >>> log = EventLog([Event("compute", "gpu0", "compute", "0F0", 0.0, 0.5, 0, 0, 0)])
            >>> log.to_frame()[["device", "name", "duration_s"]].values.tolist()
            [['gpu0', '0F0', 0.5]]
        """
        import pandas as pd  # on first use: `import sim` stays fast

        df = pd.DataFrame(self.events, columns=list(Event._fields))
        return df.assign(duration_s=df["end_s"] - df["start_s"])

    def memory_frame(self) -> Any:
        """The memory ledger as a :class:`pandas.DataFrame`: one row per :class:`MemoryEvent`
        (time order) plus ``in_use_bytes``, the device's bytes in use after it."""
        import pandas as pd

        df = pd.DataFrame(self.memory, columns=list(MemoryEvent._fields))
        return df.assign(in_use_bytes=df.groupby("device")["delta_bytes"].cumsum())


def _unpickle_log(
    cls: type[EventLog],
    events: list[tuple],
    memory: list[tuple],
    capacity_bytes: dict[str, float],
    iteration_ends_s: list[float],
    meta: dict,
) -> EventLog:
    """The log :meth:`EventLog.__reduce__` pickled: each record made from its fields as
    ``Event._make`` makes it (``tuple.__new__``), without a Python call per record."""
    return cls(
        list(map(tuple.__new__, repeat(Event), events)),
        list(map(tuple.__new__, repeat(MemoryEvent), memory)),
        capacity_bytes,
        iteration_ends_s,
        meta,
    )

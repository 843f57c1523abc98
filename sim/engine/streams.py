"""A GPU's compute stream: kernels run one after another, and waits for late data are stalls."""

from __future__ import annotations

import simpy

from sim.events import Event, EventKind, Stream


class ComputeStream:
    """Runs compute spans and waits on the compute stream of any GPU, logging each.

    Args:
        env: the simulation environment.
        events: the log's event list.
    """

    def __init__(self, env: simpy.Environment, events: list[Event]):
        self.env = env
        self.events = events

    def run(self, gpu: str, kind: str, name: str, duration_s: float, **tags):
        """Process: occupy ``gpu``'s compute stream for ``duration_s`` and log it as ``kind``."""
        start = self.env.now
        if duration_s > 0:
            yield self.env.timeout(duration_s)
        self.events.append(Event(kind, gpu, Stream.COMPUTE, name, start, self.env.now, **tags))

    def wait(self, ev: simpy.Event, gpu: str, name: str, **tags):
        """Process: wait for ``ev``; time spent waiting is logged as a ``stall``."""
        start = self.env.now
        if not ev.triggered:
            yield ev
        if self.env.now > start:
            self.events.append(
                Event(EventKind.STALL, gpu, Stream.COMPUTE, name, start, self.env.now, **tags)
            )

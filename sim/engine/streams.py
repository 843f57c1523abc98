"""A GPU's compute stream: kernels run one after another, and waits for late data are stalls.

With a host model (:mod:`sim.engine.host`), an action's kernels also wait for the host to issue
them: :meth:`ComputeStream.run_issued`.
"""

from __future__ import annotations

import simpy

from sim.engine.host import HostClock
from sim.events import Event, EventKind, Stream
from sim.hardware.host_ops import HostWork


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

    def run_issued(self, gpu: str, kind: str, name: str, work: HostWork, host: HostClock, **tags):
        """Process: run ``work`` issued by ``host``: the device ends at
        ``max(now + work.device_s, host.t + work.span_s)`` (:mod:`sim.hardware.host_ops`) and the
        host moves on to ``host.t + work.host_s``. When the host is the later one, the
        device's idle time before the span is logged as ``host_wait`` (``host <name>``) and the
        span as ``kind`` (its last ``device_s`` seconds); otherwise as :meth:`run`."""
        now = self.env.now
        end, host.t = work.finish(host.t, now)
        if end <= now + work.device_s:
            yield from self.run(gpu, kind, name, work.device_s, **tags)
            return
        start = end - work.device_s
        self.events.append(
            Event(EventKind.HOST_WAIT, gpu, Stream.COMPUTE, f"host {name}", now, start, **tags)
        )
        yield self.env.timeout(end - now)
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

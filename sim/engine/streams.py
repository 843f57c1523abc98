"""A GPU's compute stream: kernels run one after another, and waits for late data are stalls.

With a host model (:mod:`sim.engine.host`), an action's kernels also wait for the host to issue
them: :meth:`ComputeStream.run_issued`. While an overlapped data-parallel collective holds SMs
of the GPU, a span runs longer by the work it loses (:mod:`sim.engine.sm_share`).
"""

from __future__ import annotations

import simpy

from sim.engine.host import HostClock
from sim.engine.sm_share import SmShare
from sim.events import Event, EventKind, Stream
from sim.hardware.host_ops import HostWork


class ComputeStream:
    """Runs compute spans and waits on the compute stream of any GPU, logging each.

    Args:
        env: the simulation environment.
        events: the log's event list.
        share: the SMs overlapped collectives take (:class:`~sim.engine.sm_share.SmShare`);
            None: compute never slows.
    """

    def __init__(self, env: simpy.Environment, events: list[Event], share: SmShare | None = None):
        self.env = env
        self.events = events
        self.share = share

    def run(self, gpu: str, kind: str, name: str, duration_s: float, **tags):
        """Process: occupy ``gpu``'s compute stream for ``duration_s`` of work (longer by
        what overlapped collectives take, :mod:`sim.engine.sm_share`, unless it is a
        ``host_wait``) and log it as ``kind``."""
        start = self.env.now
        if duration_s > 0:
            yield self.env.timeout(duration_s)
            if self.share is not None and kind != EventKind.HOST_WAIT:
                yield from self.share.finish(gpu, start)
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
        if self.share is not None:
            yield from self.share.finish(gpu, start)
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

"""A GPU's compute stream: kernels run one after another, and waits for late data are stalls.

With a host model (:mod:`sim.engine.host`), an action's kernels also wait for the host to issue
them: :meth:`ComputeStream.run_issued`. While an overlapped data-parallel collective holds SMs
of the GPU, a span runs longer by the work it loses (:mod:`sim.engine.sm_share`). A span whose
work waits inside for another stream (a layer's host sync that drains its collectives,
:mod:`sim.engine.drains`) is logged in pieces around those waits (:meth:`ComputeStream.
run_issued`), which its caller logs on that stream.
"""

from __future__ import annotations

from typing import NamedTuple

import simpy

from sim.engine.host import HostClock
from sim.engine.sm_share import SmShare
from sim.events import Event, EventKind, Stream
from sim.hardware.host_ops import HostWork


class Wait(NamedTuple):
    """A wait of an issued span's work for another stream: the device runs nothing of the
    span for ``seconds`` once it is done with ``before`` (the span's work issued before the
    wait, a prefix of it) and the host has issued that (:func:`sim.engine.host.drain_prefixes`)."""

    before: HostWork
    seconds: float


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

    def run_issued(
        self,
        gpu: str,
        kind: str,
        name: str,
        work: HostWork,
        host: HostClock,
        waits: tuple[Wait, ...] = (),
        **tags,
    ):
        """Process: run ``work`` issued by ``host``: the device ends at
        ``max(now + work.device_s, host.t + work.span_s)`` (:mod:`sim.hardware.host_ops`) and the
        host moves on to ``host.t + work.host_s``. When the host is the later one, the
        device's idle time before the span is logged as ``host_wait`` (``host <name>``) and the
        span as ``kind`` (its last ``device_s`` seconds); otherwise as :meth:`run`. With
        ``waits`` (in order), as :meth:`_log_around` logs it; returns each wait's ``(start,
        end)`` seconds (none without)."""
        now, host_free = self.env.now, host.t
        end, host.t = work.finish(host.t, now)
        if end <= now + work.device_s:
            if not waits:
                yield from self.run(gpu, kind, name, work.device_s, **tags)
                return ()
            start = now
            if work.device_s > 0:  # as run() times it
                yield self.env.timeout(work.device_s)
                if self.share is not None:
                    yield from self.share.finish(gpu, start)
            return self._log_around(gpu, kind, name, work, (host_free, now, end), waits, tags)
        start = end - work.device_s
        if not waits:
            self.events.append(
                Event(EventKind.HOST_WAIT, gpu, Stream.COMPUTE, f"host {name}", now, start, **tags)
            )
        yield self.env.timeout(end - now)
        if self.share is not None:
            yield from self.share.finish(gpu, start)
        if waits:
            return self._log_around(gpu, kind, name, work, (host_free, now, end), waits, tags)
        self.events.append(Event(kind, gpu, Stream.COMPUTE, name, start, self.env.now, **tags))
        return ()

    def _log_around(
        self,
        gpu: str,
        kind: str,
        name: str,
        work: HostWork,
        free: tuple[float, float, float],
        waits: tuple[Wait, ...],
        tags: dict,
    ) -> tuple[tuple[float, float], ...]:
        """Log ``work``, issued by a host free at ``free[0]`` on a device free at ``free[1]``
        and ending at ``free[2]`` (now, with what overlapped collectives took), in pieces
        around its ``waits``; their ``(start, end)`` seconds. A wait starts when the device is
        done with its ``before`` and the host has issued that; each piece of work is logged as
        ``kind`` over the last of the seconds it has before its end, the device's idle time
        before it and before a wait as ``host_wait`` (as :meth:`run_issued` logs a whole
        span). What overlapped collectives took (:mod:`sim.engine.sm_share`) lengthens the last
        piece only (assumption: the waits stay where the host model puts them)."""
        host_free, t, end = free
        done_s, spans = 0.0, []
        for w in waits:
            device_end, host_end = w.before.finish(host_free, free[1])
            start = max(t, device_end - (w.before.device_s - done_s))
            self._idle(gpu, name, t, start, tags)
            if device_end > start:
                self.events.append(
                    Event(kind, gpu, Stream.COMPUTE, name, start, device_end, **tags)
                )
            begin = max(device_end, host_end)
            self._idle(gpu, name, device_end, begin, tags)
            spans.append((begin, begin + w.seconds))
            t, done_s = begin + w.seconds, w.before.device_s + w.seconds
        start = max(t, end - (work.device_s - done_s))
        self._idle(gpu, name, t, start, tags)
        self.events.append(Event(kind, gpu, Stream.COMPUTE, name, start, self.env.now, **tags))
        return tuple(spans)

    def _idle(self, gpu: str, name: str, start: float, end: float, tags: dict) -> None:
        """Log ``gpu``'s compute stream idle from ``start`` to ``end`` waiting for the host
        to issue ``name``'s ops (``host_wait``); nothing when empty."""
        if end > start:
            self.events.append(
                Event(EventKind.HOST_WAIT, gpu, Stream.COMPUTE, f"host {name}", start, end, **tags)
            )

    def wait(self, ev: simpy.Event, gpu: str, name: str, **tags):
        """Process: wait for ``ev``; time spent waiting is logged as a ``stall``."""
        start = self.env.now
        if not ev.triggered:
            yield ev
        if self.env.now > start:
            self.events.append(
                Event(EventKind.STALL, gpu, Stream.COMPUTE, name, start, self.env.now, **tags)
            )

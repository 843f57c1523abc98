"""The SMs a data-parallel collective's NCCL kernel takes from the compute it overlaps.

An overlapped data-parallel collective (the gradient buckets' all-reduce or reduce-scatter
under the backward, :mod:`sim.engine.buckets`; the parameter all-gather under the next
forward, :mod:`sim.engine.param_gather`) runs an NCCL kernel of ``c`` thread blocks, one per
channel, each resident on an SM for the kernel's whole duration (NCCL ``src/enqueue.cc``;
:func:`sim.comm.nccl_ctas.ctas`). Compute kernels that run meanwhile get the other SMs: a
GPU of ``sm`` SMs computes at ``(sm - c) / sm`` of its speed while the collective runs, at
full speed otherwise (the rule :mod:`sim.engine.overlap` applies to DualPipe's exchanges with
DeepSeek-V3's 20 SMs; an assumption that compute scales with its SMs, as there).

:class:`SmShare` keeps, per GPU, the CTAs of the collectives running now and the integral
``L(t) = ∫ min(c(t), sm) / sm dt``: the compute work (seconds at full speed) lost by ``t``.
A compute span of ``T`` seconds of work that starts at ``s`` ends at the ``e`` with
``(e - s) - (L(e) - L(s)) = T``: it first runs ``T``, then, while work is missing, runs the
missing work again (the loss during each such extension is missing after it; the sequence
shrinks by ``c / sm`` per round when the collective runs throughout). Closed forms: with a
collective of ``C`` seconds starting with the span, ``e - s = T + C c / sm`` when
``C <= T sm / (sm - c)``, else ``T sm / (sm - c)``.

A hold of several buckets (:data:`sim.engine.buckets.MAX_HOLDS`) whose buckets wait for the
backward runs its kernels only part of the hold: its CTAs count at the hold's duty (kernel
seconds over the hold's planned span), an assumption of the same grain as the hold itself.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

import simpy

TOLERANCE_S = 1e-9
"""Missing work below which a compute span ends (seconds)."""
MAX_ROUNDS = 64
"""Most extension rounds of one span (the missing work shrinks by ``c / sm`` per round)."""


class SmShare:
    """The CTAs overlapped collectives hold on each GPU and the compute work they cost.

    Args:
        env: the simulation environment.
        sm_counts: SMs of each GPU by name; a GPU absent or with None loses nothing.
    """

    def __init__(self, env: simpy.Environment, sm_counts: dict[str, int | None]):
        self.env = env
        self.sms = {g: n for g, n in sm_counts.items() if n}
        self._times: dict[str, list[float]] = {}
        self._lost: dict[str, list[float]] = {}
        self._rate: dict[str, list[float]] = {}
        self._ctas: dict[str, float] = {}

    def lost_s(self, gpu: str, t: float) -> float:
        """``L(t)`` of ``gpu``: full-speed compute seconds lost to collectives by ``t``
        (``t`` at most now)."""
        times = self._times.get(gpu)
        if not times:
            return 0.0
        i = bisect_right(times, t) - 1
        if i < 0:
            return 0.0
        return self._lost[gpu][i] + self._rate[gpu][i] * (t - times[i])

    def change(self, gpus: Iterable[str], ctas: float) -> None:
        """From now, ``gpus`` hold ``ctas`` more thread blocks (fewer when negative)."""
        now = self.env.now
        for gpu in dict.fromkeys(gpus):
            sm = self.sms.get(gpu)
            if sm is None or ctas == 0:
                continue
            lost = self.lost_s(gpu, now)
            held = max(0.0, self._ctas.get(gpu, 0.0) + ctas)
            self._ctas[gpu] = held
            times = self._times.setdefault(gpu, [])
            if times and times[-1] == now:  # same instant: replace the last segment
                self._lost[gpu][-1], self._rate[gpu][-1] = lost, min(held, sm) / sm
                continue
            times.append(now)
            self._lost.setdefault(gpu, []).append(lost)
            self._rate.setdefault(gpu, []).append(min(held, sm) / sm)

    def finish(self, gpu: str, start_s: float) -> Iterator[simpy.Event]:
        """Process: after a compute span of ``gpu`` that started at ``start_s`` has run its
        work's seconds (now), run on until the work collectives took meanwhile is made up
        (module doc)."""
        if gpu not in self._times:
            return
        missing = self.lost_s(gpu, self.env.now) - self.lost_s(gpu, start_s)
        for _ in range(MAX_ROUNDS):
            if missing <= TOLERANCE_S:
                return
            begin = self.env.now
            yield self.env.timeout(missing)
            missing = self.lost_s(gpu, self.env.now) - self.lost_s(gpu, begin)

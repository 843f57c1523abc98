"""Max-min fair sharing of links between flows: the bandwidth of every shared link divided
among the flows crossing it, recomputed whenever a flow starts, ends or gives links back.

A flow is one operation of one NCCL communicator (a collective, a send) on a set of links
(:data:`sim.engine.links.SHARED_KINDS`: network, NVLink, NVSwitch). Its work is its
uncontended duration in seconds (what the engine computes for it alone: latencies and bytes
over its bottleneck, :mod:`sim.comm.hierarchical`, :mod:`sim.comm.nccl`), so its demand is 1 on
each of its links and its rate a fraction ``r in (0, 1]``: it ends when it has done its work
at its rate. Rates are max-min fair (progressive filling, Bertsekas and Gallager, *Data
Networks*, 2nd ed., §6.5.2): the link whose flows get the least equal share fixes those flows'
rate, its capacity is removed from their other links, and so on. Sources that two
communicators' operations on one link progress together, each slower, in about equal shares:
NVIDIA/nccl#204 (two broadcasts on one PCIe switch, each at half the rate alone),
meta-pytorch/torchrec#4251 (process groups "compete for NVLink bandwidth"), fair congestion
control in CASSINI (NSDI'24) and MLTCP (``measurements/engine/link_sharing.md``). Equal shares
per link are an **assumption** (NCCL's channel counts per communicator are not modelled).

Only the connected component of the flows that changed (flows linked through shared links)
is recomputed; a flow alone on its links starts at the full rate without any. Each flow's end
(or the moment it gives back its ``early`` links: a hierarchical collective's server-local
links after their local phase) is one SimPy timeout, ignored when it is stale (the flow's rate
changed since: ``gen``). Deterministic: flows are visited in start order, links in name
order; no clock, no I/O.
"""

from __future__ import annotations

import simpy

EPS_S = 1e-12
"""Work (seconds at the full rate) below which a flow counts as done: what a rate change
leaves of float rounding, so that flows due at one instant end at it."""


class Flow:
    """One flow: its ``links`` (names, sorted), work ``left_s`` (seconds at the full rate) as
    of ``since_s``, its ``rate`` (fraction of each link), ``early`` (links given back once
    ``left_s`` falls to ``early_left_s``), ``done`` (succeeds when it ends) and ``gen`` (its
    current timeout's generation)."""

    __slots__ = (
        "links",
        "left_s",
        "since_s",
        "rate",
        "early",
        "early_left_s",
        "done",
        "gen",
        "seq",
    )

    def __init__(
        self,
        links: tuple[str, ...],
        work_s: float,
        now_s: float,
        early: tuple[str, ...],
        early_left_s: float,
        done: simpy.Event,
        seq: int,
    ):
        self.links: tuple[str, ...] = links
        self.left_s: float = work_s
        self.since_s: float = now_s
        self.rate: float = 0.0
        self.early: tuple[str, ...] = early
        self.early_left_s: float = early_left_s
        self.done: simpy.Event = done
        self.gen = 0
        self.seq = seq

    def advance(self, now_s: float) -> None:
        """Count the work done at the current rate since :attr:`since_s`."""
        if now_s > self.since_s:
            self.left_s -= self.rate * (now_s - self.since_s)
            self.since_s = now_s


class FairShare:
    """The flows on the shared links of one run (module doc).

    Args:
        env: the simulation environment.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._on: dict[str, list[Flow]] = {}
        self._seq = 0

    def start(
        self,
        links: tuple[str, ...],
        work_s: float,
        early: tuple[tuple[str, ...], float] = ((), 0.0),
    ) -> simpy.Event:
        """A flow of ``work_s`` seconds (at the full rate) over the links named ``links``
        (sorted, each once), starting now; ``early``: ``(names, seconds)`` of links given back
        after that much of its work (a subset of ``links``). Returns the event that succeeds
        when it ends (at once when ``work_s <= 0`` or ``links`` is empty: nothing to share)."""
        done = simpy.Event(self.env)
        if work_s <= 0 or not links:
            done.succeed()
            return done
        names, early_s = early
        drop = tuple(n for n in names if n in links) if early_s < work_s else ()
        flow = Flow(links, work_s, self.env.now, drop, work_s - early_s, done, self._seq)
        self._seq += 1
        alone = True
        for n in links:
            on = self._on.get(n)
            if on is None:
                self._on[n] = [flow]
            else:
                alone = alone and not on
                on.append(flow)
        if alone:
            flow.rate = 1.0
            self._schedule(flow)
        else:
            self._refill([flow])
        return done

    def _schedule(self, flow: Flow) -> None:
        flow.gen += 1
        target = flow.early_left_s if flow.early else 0.0
        left_s = flow.left_s - target
        wait_s = left_s / flow.rate if left_s > EPS_S else 0.0
        timer = self.env.timeout(wait_s)
        gen = flow.gen
        timer.callbacks.append(lambda _: self._wake(flow, gen))

    def _wake(self, flow: Flow, gen: int) -> None:
        if gen != flow.gen:  # stale: the rate changed since it was scheduled
            return
        now = self.env.now
        flow.advance(now)
        if flow.early:
            flow.left_s = min(flow.left_s, flow.early_left_s)
            dropped, flow.early = flow.early, ()
            flow.links = tuple(n for n in flow.links if n not in dropped)
            touched = self._leave(flow, dropped)
            if not flow.links:  # the rest of its work crosses no shared link: at full rate
                rest = self.env.timeout(flow.left_s)
                rest.callbacks.append(lambda _: _succeed(flow.done))
            else:
                touched.append(flow)
        else:
            flow.left_s = 0.0
            touched = self._leave(flow, flow.links)
            flow.done.succeed()
        if touched:
            self._refill(touched)

    def _leave(self, flow: Flow, names: tuple[str, ...]) -> list[Flow]:
        """Take ``flow`` off ``names``; returns the flows left on them."""
        left: dict[int, Flow] = {}
        for n in names:
            on = self._on[n]
            on.remove(flow)
            for f in on:
                left[f.seq] = f
        return [left[k] for k in sorted(left)]

    def _component(self, seeds: list[Flow]) -> tuple[list[Flow], list[str]]:
        """The flows and links connected to ``seeds`` through shared links, in start and
        name order."""
        flows = {f.seq: f for f in seeds}
        todo = list(seeds)
        links: set[str] = set()
        while todo:
            f = todo.pop()
            for n in f.links:
                if n in links:
                    continue
                links.add(n)
                for g in self._on[n]:
                    if g.seq not in flows:
                        flows[g.seq] = g
                        todo.append(g)
        return [flows[k] for k in sorted(flows)], sorted(links)

    def _refill(self, seeds: list[Flow]) -> None:
        """Advance the component of ``seeds`` to now, give it max-min rates, reschedule the
        flows whose rate changed (and the seeds), and end those with no work left."""
        now = self.env.now
        flows, links = self._component(seeds)
        for f in flows:
            f.advance(now)
        rates = max_min_rates(flows, links, self._on)
        fresh = {f.seq for f in seeds}
        for f, r in zip(flows, rates, strict=True):
            if r != f.rate or f.seq in fresh:
                f.rate = r
                self._schedule(f)


def max_min_rates(flows: list[Flow], links: list[str], on: dict[str, list[Flow]]) -> list[float]:
    """Max-min fair rates of ``flows`` (each link of capacity 1, ``on``: the flows of each of
    ``links``), by progressive filling: the link with the least equal share for its unfixed
    flows fixes them at that share (every link with that least share at once), in order.

    Returns:
        The rates, in the order of ``flows`` (each in ``(0, 1]``).
    """
    cap = dict.fromkeys(links, 1.0)
    count = {n: len(on[n]) for n in links}
    rate: dict[int, float] = {}
    while len(rate) < len(flows):
        level = min(cap[n] / count[n] for n in links if count[n])
        for n in links:
            if not count[n] or cap[n] / count[n] > level * (1 + 1e-12):
                continue
            for f in on[n]:
                if f.seq in rate:
                    continue
                rate[f.seq] = level
                for m in f.links:
                    cap[m] -= level
                    count[m] -= 1
    return [max(rate[f.seq], 1e-12) for f in flows]


def _succeed(event: simpy.Event) -> None:
    event.succeed()

"""An overlapped pair of actions (torch's ``OVERLAP_F_B``): a forward and a backward of one
rank run back to back, or, with ``overlap_pairs``, as DualPipe's two chains
(:mod:`sim.engine.overlap`), whose host thread must still have issued both
(:mod:`sim.engine.pair_host`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from sim.engine.actions import ActionRuns
from sim.engine.host import layered_work
from sim.engine.inputs import SimInput
from sim.engine.overlap import PairOverlap, slowdown
from sim.engine.pair_host import pair_parts, pair_work
from sim.engine.parts import RunParts
from sim.engine.replicas import StageReplica
from sim.events import EventKind, MemCategory
from sim.memory.overlapped import pair_delta
from sim.schedules.action import Action


class PairRuns:
    """The overlapped pairs of one run (module doc).

    Args:
        inp: the configuration.
        parts: the run's composed parts (:func:`~sim.engine.parts.compose`).
        actions: the action processes the pair's two actions run as.
        rep_of: the stage replica (of a rank's first one's replica and tensor rank) that runs
            an action.
    """

    def __init__(
        self,
        inp: SimInput,
        parts: RunParts,
        actions: ActionRuns,
        rep_of: Callable[[StageReplica, Action], StageReplica],
    ):
        self.inp, self.actions, self._rep = inp, actions, rep_of
        self.env, self.ledger, self.compute = parts.env, parts.ledger, parts.compute
        self.hosts, self.groups, self.sends = parts.hosts, parts.groups, parts.sends
        self._orders: dict = {}  # the pairs' exchange orders (PairOverlap._order), per run

    def overlap_pair(self, first: StageReplica, pair: tuple[Action, ...], ends: dict):
        """Process: torch's ``OVERLAP_F_B``: wait for both inputs, run the forward then the
        backward (or, with ``overlap_pairs``, the two as DualPipe's chains), then send both
        outputs (``_add_send_recv`` and ``_PipelineScheduleRuntime``, torch 2.13
        ``schedules.py``)."""
        m, r, k = self.inp.microbatches, first.replica, first.tp_rank
        for a in pair:
            rep = self._rep(first, a)
            if a.op == "F" and not rep.first:
                yield from self.sends.receive(("act", r, a.stage, a.microbatch, k))
            elif a.op in ("B", "I") and not rep.last:
                yield from self.sends.receive(("grad", r, a.stage, a.microbatch, k))
        sends: list = []
        ov = self._pair_overlap(first, pair)
        layered = _layered(pair, [self._rep(first, a).plan for a in pair])
        if layered:  # Megatron's combined 1F1B: the two stashes held layer by layer
            self.ledger.change(
                self.env.now, first.gpu, layered, MemCategory.ACTIVATIONS, f"layered {pair[0]}"
            )
        procs, start, issued = [], self.env.now, self.hosts.clock(first.gpu).t
        for a in pair:
            rep = self._rep(first, a)
            tags = rep.tags(a.microbatch, a.microbatch // m)
            if a.op == "F":
                proc = self.actions.forward(rep, a, tags, sends, ov)
            else:
                proc = self.actions.backward(rep, a, tags, ends.get(a), sends, ov)
            if ov is None:
                yield from proc
            else:
                procs.append(self.env.process(proc))
        if procs:
            yield self.env.all_of(procs)
            yield from self._pair_host(first, pair, start, issued)
        if layered:
            self.ledger.change(
                self.env.now, first.gpu, -layered, MemCategory.ACTIVATIONS, f"layered {pair[1]}"
            )
        for send in sends:
            self.sends.start(send)

    def _pair_host(
        self, first: StageReplica, pair: tuple[Action, ...], start: float, issued: float
    ):
        """Process: an overlapped pair, whose chains ran from ``start`` to now, waits for its
        host thread, free at ``issued``, to have issued both actions
        (:mod:`sim.engine.pair_host`); the wait is logged as ``host_wait``."""
        if len(pair) != 2 or (pair[0].op, pair[1].op) != ("F", "B"):
            return
        reps = [self._rep(first, a) for a in pair]
        parts = [pair_parts(r.cost, r.plan, a.op) for r, a in zip(reps, pair, strict=True)]
        gpu, now = first.gpu, self.env.now
        receives = not reps[0].first or not reps[1].last
        if receives and "recv" in self.hosts.syncs:  # the chains' receive syncs, at start
            issued = max(issued, start)
        # uncached: each pair's scaled parts are new, and would evict the actions' cached works
        layered = partial(layered_work.__wrapped__, self.hosts.overhead_of(gpu))
        work = pair_work(layered, parts[0], parts[1], now - start)
        clock = self.hosts.clock(gpu)
        end, host_end = work.finish(issued, start)
        clock.t = max(clock.t, host_end)  # the chains' own syncs (a loss read) stand
        if end > now:
            a = pair[0]
            tags = first.tags(a.microbatch, a.microbatch // self.inp.microbatches)
            yield from self.compute.run(gpu, EventKind.HOST_WAIT, f"host {a}", end - now, **tags)

    def _pair_overlap(self, first: StageReplica, pair: tuple[Action, ...]) -> PairOverlap | None:
        """DualPipe's two chains for ``pair`` (:mod:`sim.engine.overlap`) when
        ``overlap_pairs`` is on and the pair has group exchanges; None: run it serially."""
        reps = [self._rep(first, a) for a in pair]
        if not self.inp.overlap_pairs or not any(
            r.cost.group_fwd or r.cost.group_bwd for r in reps
        ):
            return None
        gpu = self.inp.topology.gpu(int(first.gpu[3:])).compute
        sms = gpu.sm_count if gpu is not None else None
        factor = slowdown(sms, self.inp.runtime.comm_sms)
        return PairOverlap(
            self.env,
            self.compute,
            self.groups,
            factor,
            self.inp.runtime.delay_wgrad,
            self._orders,
        )


def _layered(pair: tuple[Action, ...], plans: list) -> float:
    """What a combined 1F1B step (a forward then a backward whose plans carry
    ``layer_shares``) holds less than its two whole stashes (:func:`~sim.memory.overlapped.
    pair_delta`, ``<= 0``); 0 for any other pair."""
    if len(pair) != 2 or (pair[0].op, pair[1].op) != ("F", "B"):
        return 0.0
    return pair_delta(plans[0], plans[1])

"""Partitioned parameters and gradients (ZeRO-3, PatrickStar chunk groups) on the
data-parallel replicas.

Parameters: before a forward or a backward (B or I), a stage replica whose plan partitions its
parameters (``gather_bytes`` > 0, more than one replica) all-gathers them over the replicas; the
all-gather starts one action ahead, as ZeRO-3's prefetcher (``stage3_prefetch_bucket_size``,
:mod:`sim.memory.zero3`) and PatrickStar's chunk fetch (:mod:`sim.memory.chunked`) do, and holds ``gather_live`` bytes until the action ends.
Gradients: after a backward (B or W), they are reduce-scattered over the replicas
(``scatter_bytes``) and then written back to the host (``writeback_bytes``); the optimizer step
waits for both (:mod:`sim.engine.step`). With ``grad_stream_bytes`` they go out bucket by bucket
while the backward computes (:meth:`PartitionedStates.stream_gradients`); with
``blocking_moves`` the backward's rank waits for them before its next action, and nothing is
gathered ahead (the framework's calls are synchronous, :class:`~sim.memory.plan.StagePlan`).
With expert parallelism the routed experts' share of
both (the stage's ``expert_grad_share``) runs over their expert-data-parallel group instead
(ZeRO-3 partitions them there: :mod:`sim.memory.zero3`).
"""

from __future__ import annotations

import math

import simpy

from sim.engine.collectives import Collectives
from sim.engine.inputs import SimInput
from sim.engine.replicas import StageReplica
from sim.engine.streams import ComputeStream
from sim.engine.traffic import MemoryTraffic
from sim.events import EventKind, MemCategory
from sim.ledger import Ledger
from sim.schedules.action import Action


class PartitionedStates:
    """The per-action all-gathers and reduce-scatters of partitioned states of one run.

    Args:
        env: the simulation environment.
        inp: the configuration (its data-parallel width, micro-batches).
        parts: the engine's ``(ledger, traffic, collectives, compute)``.
    """

    def __init__(
        self,
        env: simpy.Environment,
        inp: SimInput,
        parts: tuple[Ledger, MemoryTraffic, Collectives, ComputeStream],
    ):
        self.env = env
        self.inp = inp
        self.ledger, self.traffic, self.collectives, self.compute = parts
        self._gathers: dict[tuple, simpy.Process] = {}

    def gathers(self, rep: StageReplica) -> bool:
        """Whether ``rep`` all-gathers partitioned parameters before its actions."""
        return rep.plan.gather_bytes > 0 and self.inp.dp_width > 1

    def gather(self, rep: StageReplica, a: Action) -> simpy.Process:
        """The (one) all-gather of ``rep``'s partitioned parameters for action ``a``, started
        if not yet (one action ahead, as ZeRO-3's prefetcher and the chunk fetch do)."""
        key = (*rep.key, str(a))
        proc = self._gathers.get(key)
        if proc is None:
            proc = self._gathers[key] = self.env.process(self._run_gather(rep, a))
        return proc

    def _run_gather(self, rep: StageReplica, a: Action):
        plan = rep.plan
        self.ledger.change(
            self.env.now, rep.gpu, plan.gather_live, MemCategory.CHUNKS, f"gather {a}"
        )
        if plan.fetch_bytes > 0:  # an owned chunk on the host comes up before the gather
            yield self.traffic.fetch(rep, a)
        tags = rep.tags(a.microbatch, a.microbatch // self.inp.microbatches)
        yield from self._join(rep, str(a), plan.gather_bytes, EventKind.ALL_GATHER, tags)

    def _join(self, rep: StageReplica, key: str, size: float, kind: str, tags: dict):
        """Process: a collective of ``size`` bytes, the routed experts' share of it over
        their expert-data-parallel group (module doc)."""
        share = self.collectives.expert_share(rep)
        yield from self.collectives.join_keyed(rep, key, size * (1.0 - share), kind, tags)
        if share > 0 and len(self.collectives.expert_members(rep)) > 1:
            yield from self.collectives.join_expert_keyed(rep, key, size * share, kind, tags)

    def wait(self, rep: StageReplica, a: Action, tags: dict):
        """Process: wait (on ``rep``'s compute stream) for ``a``'s all-gather, if any."""
        if self.gathers(rep):
            yield from self.compute.wait(self.gather(rep, a), rep.gpu, f"wait gather {a}", **tags)

    def release(self, rep: StageReplica, a: Action) -> None:
        """Free the gathered parameters of ``a`` (it has ended)."""
        if self.gathers(rep):
            self.ledger.change(
                self.env.now, rep.gpu, -rep.plan.gather_live, MemCategory.CHUNKS, f"free {a}"
            )

    def after_backward(self, rep: StageReplica, a: Action, tags: dict) -> simpy.Process | None:
        """Reduce-scatter a backward's gradients over the replicas (``scatter_bytes``), then
        write them back to the host (``writeback_bytes``); the step waits for both. Returns the
        process that ends with both (None: nothing to do). A plan that streams them
        (``grad_stream_bytes``) started them with :meth:`stream_gradients` instead."""
        plan, rs = rep.plan, None
        if plan.grad_stream_bytes > 0:
            return None
        if self.scatters(rep):
            rs = self.env.process(
                self._join(rep, str(a), plan.scatter_bytes, EventKind.REDUCE_SCATTER, tags)
            )
        if rs is not None or plan.writeback_bytes > 0:
            return self.traffic.writeback(rep, a, tags, after=rs)
        return None

    def scatters(self, rep: StageReplica) -> bool:
        """Whether ``rep`` reduce-scatters its gradients after each backward."""
        return rep.plan.scatter_bytes > 0 and self.inp.dp_width > 1

    def streams(self, rep: StageReplica, a: Action) -> bool:
        """Whether ``a``'s gradients go out in buckets while it computes (module doc)."""
        plan = rep.plan
        moves = self.scatters(rep) or plan.writeback_bytes > 0
        return plan.grad_stream_bytes > 0 and a.op in ("B", "W") and moves

    def stream_gradients(
        self, rep: StageReplica, a: Action, dur_s: float, done: simpy.Event, tags: dict
    ) -> simpy.Process:
        """Start reducing and copying ``a``'s gradients bucket by bucket while it computes
        (``grad_stream_bytes`` of write-back each, else of reduce-scatter): bucket ``i`` of
        ``n`` is full ``(i + 1) / n`` of the backward's ``dur_s`` seconds after now, the last
        one when ``done`` (the backward's end) succeeds; each bucket is reduce-scattered, then
        copied, on one side stream in order (DeepSpeed's ``reduce_ipg_grads`` on its
        ``reduction_stream`` with ``overlap_comm``). The step waits for the process."""
        proc = self.env.process(self._stream(rep, a, dur_s, done, tags))
        self.traffic.add_writeback(rep, proc)
        return proc

    def _stream(self, rep: StageReplica, a: Action, dur_s: float, done: simpy.Event, tags):
        plan = rep.plan
        scatter = plan.scatter_bytes if self.scatters(rep) else 0.0
        total = plan.writeback_bytes or scatter
        n = max(1, math.ceil(total / plan.grad_stream_bytes - 1e-9))
        start = self.env.now
        for i in range(n):
            if i + 1 < n:
                wait = start + (i + 1) / n * dur_s - self.env.now
                if wait > 0:
                    yield self.env.timeout(wait)
            else:
                yield done
            if scatter > 0:
                yield from self._join(rep, f"{a}#{i}", scatter / n, EventKind.REDUCE_SCATTER, tags)
            if plan.writeback_bytes > 0:
                yield from self.traffic.copy_back(
                    rep, a, plan.writeback_bytes / n, tags, f" {i + 1}/{n}"
                )

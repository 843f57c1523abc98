"""Partitioned parameters and gradients (ZeRO-3, PatrickStar chunk groups) on the
data-parallel replicas.

Parameters: before a forward or a backward (B or I), a stage replica whose plan partitions its
parameters (``gather_bytes`` > 0, more than one replica) all-gathers them over the replicas; the
all-gather starts one action ahead, as ZeRO-3's prefetcher (``stage3_prefetch_bucket_size``,
:mod:`sim.memory.zero3`) and PatrickStar's chunk fetch (:mod:`sim.memory.chunked`) do, and holds ``gather_live`` bytes until the action ends.
Gradients: after a backward (B or W), they are reduce-scattered over the replicas
(``scatter_bytes``) and then written back to the host (``writeback_bytes``); the optimizer step
waits for both (:mod:`sim.engine.step`). With expert parallelism the routed experts' share of
both (the stage's ``expert_grad_share``) runs over their expert-data-parallel group instead
(ZeRO-3 partitions them there: :mod:`sim.memory.zero3`).
"""

from __future__ import annotations

import simpy

from sim.engine.collectives import Collectives
from sim.engine.inputs import SimInput, StageReplica
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

    def after_backward(self, rep: StageReplica, a: Action, tags: dict) -> None:
        """Reduce-scatter a backward's gradients over the replicas (``scatter_bytes``), then
        write them back to the host (``writeback_bytes``); the step waits for both."""
        plan, rs = rep.plan, None
        if plan.scatter_bytes > 0 and self.inp.dp_width > 1:
            rs = self.env.process(
                self._join(rep, str(a), plan.scatter_bytes, EventKind.REDUCE_SCATTER, tags)
            )
        if rs is not None or plan.writeback_bytes > 0:
            self.traffic.writeback(rep, a, tags, after=rs)

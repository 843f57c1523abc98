"""A sharded optimizer's parameter all-gather hidden under the next forward (Megatron-Core's
``overlap_param_gather``).

Without overlap the distributed optimizer all-gathers its updated parameter shards right after
the update (:mod:`sim.engine.step`). With it (``PipelineRuntime.param_gather`` ``"forward"`` or
``"aligned"``) the step only records the gather, and the next iteration's first forward of each
stage chunk waits for it bucket by bucket (Megatron-LM ``megatron/core/distributed/
distributed_data_parallel.py``: a forward pre-hook on every module calls ``finish_param_sync``
of its parameters' bucket group, which dispatches that group's all-gather if not yet
dispatched, waits for it, then dispatches the next group's: ``param_and_grad_buffer.py::
_ParamAndGradBucketGroup.finish_param_sync``; bucket groups chained first layers first,
``next_param_gather_bucket_group``). The buckets are those of the gradient reduction
(:func:`~sim.engine.buckets.buckets` of :meth:`Collectives.bucket_bytes
<sim.engine.collectives.Collectives.bucket_bytes>`: one bucket on every chunk but stage 0).

The chain of a chunk, for buckets ``j = 0 .. n-1`` of all-gather ``e_j`` (end) and compute
share ``c_j = fwd_s * bytes_j / bytes`` (an assumption: a stage's parameters are used at a
uniform rate over its forward, as :mod:`sim.engine.buckets` assumes for gradients):

* ``"forward"``: bucket 0 is launched when the forward is ready and waited for (exposed); the
  forward's compute reaches bucket ``j`` at ``b_j = max(b_{j-1} + c_{j-1}, e_j)`` (``b_0 = e_0``)
  and bucket ``j + 1`` is launched then, after bucket ``j`` is done (one NCCL stream);
* ``"aligned"`` (``align_param_gather``, interleaved schedules only: Megatron-LM
  ``pipeline_parallel/schedules.py`` calls ``start_param_sync`` for model chunks 0 and 1 before
  the first micro-batch, and for chunk ``k + 1`` when chunk ``k``'s first micro-batch starts):
  every bucket of chunks 0 and 1 is launched right after the step, those of chunk ``c`` when
  chunk ``c - 1``'s first forward starts; the forward waits for bucket 0, then reaches bucket
  ``j`` at the same ``b_j``.

* ``"optimizer"`` (``overlap_param_gather_with_optimizer_step``: Megatron-LM dispatches each
  model chunk's all-gather as the distributed optimizer has updated it, in one bucket, bucketing
  off: ``training.py``): launched as the chunk's update ends; the forward waits as above.

The forward's compute runs as one span from ``b_0``; it cannot end before ``b_{n-1} + c_{n-1}``:
the difference, if any, is logged after it as ``wait param gather`` (a stall drawn at the end
rather than where it happens). The routed experts' parameters (gathered over their
expert-data-parallel group) form a second chain alongside. The first iteration gathers nothing
(the step before it did not run).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import simpy

from sim.comm.hierarchical import CollectivePlan
from sim.engine.buckets import buckets
from sim.engine.collectives import Collectives
from sim.engine.inputs import SimInput
from sim.engine.links import DENSE, EXPERT
from sim.engine.replicas import StageReplica
from sim.engine.streams import ComputeStream
from sim.events import Event, EventKind, Stream


@dataclass
class Chain:
    """The bucketed all-gather of one stage chunk's parameters before one forward, shared by
    the replicas of its communicator.

    Attributes:
        plan: the communicator's rings.
        sizes: bytes of each bucket, first layers first.
        held: the links to hold.
        label: event name suffix (``""`` or ``" experts"``).
        size: members that launch it (the simulated replicas, or the expert group's).
        members: ``(stage replica, tags)`` of those that have launched it.
        ends: each bucket's end once run.
        first: succeeds when bucket 0 is done.
        done: succeeds when the last bucket is done.
    """

    plan: CollectivePlan
    sizes: list[float]
    held: tuple
    label: str
    size: int
    first: simpy.Event
    done: simpy.Event
    members: list = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def shares(self, fwd_s: float) -> list[float]:
        """Each bucket's share of a forward of ``fwd_s`` seconds (its bytes' share; equal
        shares when every bucket is empty, as a LoRA stage's frozen weights gather nothing)."""
        total = sum(self.sizes)
        if total <= 0:
            return [fwd_s / len(self.sizes)] * len(self.sizes)
        return [fwd_s * b / total for b in self.sizes]


def reach_times(start_s: float, shares_s: list[float], ends: list[float]) -> list[float]:
    """``b_j``: when a forward that starts computing at ``start_s`` (after bucket 0) reaches
    bucket ``j``, given the compute share ``shares_s[j]`` of each bucket and each bucket's
    all-gather end ``ends[j]`` (module doc).

    Example:
        >>> reach_times(1.0, [2.0, 2.0, 2.0], [1.0, 2.5, 6.0])
        [1.0, 3.0, 6.0]
    """
    out = [start_s]
    for j in range(1, len(shares_s)):
        out.append(max(out[-1] + shares_s[j - 1], ends[j]))
    return out


class ParamGathers:
    """The deferred parameter all-gathers of one run (module doc).

    Args:
        env: the simulation environment.
        inp: the configuration (``runtime.param_gather``, program, micro-batches).
        collectives: the data-parallel communicators (rings, bytes, bucket sizes).
        compute: the compute streams (logs the stalls).
    """

    def __init__(
        self,
        env: simpy.Environment,
        inp: SimInput,
        collectives: Collectives,
        compute: ComputeStream,
    ):
        self.env, self.inp, self.coll, self.compute = env, inp, collectives, compute
        self.mode = inp.runtime.param_gather
        self._chains: dict[tuple, Chain] = {}
        self._launched: set[tuple] = set()
        self._used: set[tuple] = set()

    @property
    def active(self) -> bool:
        """Whether gathers are deferred to the forward at all."""
        return self.mode != "step"

    def _keys(self, rep: StageReplica, it: int) -> list[tuple]:
        """The chains of ``rep``'s chunk before iteration ``it``: dense, then experts."""
        coll, out = self.coll, list[tuple]()
        if coll.nbytes(rep) > 0:
            out.append(("dense", rep.stage, rep.tp_rank, it))
        if coll.expert_nbytes(rep) > 0:
            out.append(("expert", rep.stage, rep.tp_rank, it, coll.expert_members(rep)[0]))
        return out

    def _chain(self, rep: StageReplica, key: tuple) -> Chain:
        chain = self._chains.get(key)
        if chain is None:
            coll = self.coll
            share = coll.gather_share(rep)  # quantized parameters gather fewer bytes
            if key[0] == "dense":
                plan, nbytes, size = coll.ring(rep.stage, rep.tp_rank), coll.nbytes(rep), None
            else:
                group = coll.expert_members(rep)
                plan = coll.ring(rep.stage, rep.tp_rank, group)
                # the simulated members launch it (a mirrored run simulates some of the group)
                nbytes, size = coll.expert_nbytes(rep), coll.held.members(group)
            nbytes *= share
            chain = self._chains[key] = Chain(
                plan,
                buckets(nbytes, coll.bucket_bytes(rep)),
                coll.held(plan),
                "" if key[0] == "dense" else " experts",
                size or self.inp.simulated_replicas,
                self.env.event(),
                self.env.event(),
            )
        return chain

    def defer(self, reps: list[StageReplica], k: int) -> None:
        """The update of step ``k`` of a rank's chunks ``reps`` ran: their all-gathers wait
        for their first forwards of iteration ``k + 1``; with ``"aligned"``, those of the
        rank's first two chunks are launched now."""
        for rep in reps:
            for key in self._keys(rep, k + 1):
                self._chain(rep, key)
        if self.mode in ("aligned", "optimizer"):
            for rep in reps:
                if self.mode == "optimizer" or self._chunk(rep) < 2:
                    self._launch(rep, k + 1, 0.0, rep.tags(None, k + 1))

    def _chunk(self, rep: StageReplica) -> int:
        return sorted({a.stage for a in rep.order if a.stage >= 0}).index(rep.stage)

    def _launch(self, rep: StageReplica, it: int, fwd_s: float, tags: dict) -> None:
        """``rep`` launches its chunk's chains for iteration ``it`` (once per replica); the
        last member to launch a chain starts it."""
        if (*rep.key, it) in self._launched:
            return
        self._launched.add((*rep.key, it))
        for key in self._keys(rep, it):
            chain = self._chains.get(key)
            if chain is None:
                continue
            chain.members.append((rep, tags))
            if len(chain.members) == chain.size:
                gated = self.mode == "forward"
                self.env.process(self._run(rep, chain, chain.shares(fwd_s) if gated else None))

    def before(self, rep: StageReplica, it: int, fwd_s: float, tags: dict) -> Iterator:
        """Process: before the first forward of iteration ``it`` of ``rep``'s chunk (of
        ``fwd_s`` seconds): launch its chains (``"forward"``) or the next chunk's but one
        (``"aligned"``), then wait for bucket 0 of each (logged as ``wait param gather``)."""
        chains = self._waiting(rep, it)
        if not chains:
            return
        self._launch(rep, it, fwd_s, tags)
        if self.mode == "aligned":
            nxt = self._later_chunk(rep)
            if nxt is not None:
                self._launch(nxt, it, 0.0, nxt.tags(None, it))
        start = self.env.now
        for chain in chains:
            yield chain.first
        self._stall(rep, start, tags)

    def after(self, rep: StageReplica, it: int, start_s: float, fwd_s: float, tags: dict):
        """Process: after that forward's compute (started at ``start_s``): wait until every
        chain lets it end (module doc), logged as ``wait param gather``."""
        chains = self._waiting(rep, it)
        if not chains:
            return
        self._used.add((*rep.key, it))
        end, begin = start_s, self.env.now
        for chain in chains:
            yield chain.done
            shares = chain.shares(fwd_s)
            end = max(end, reach_times(start_s, shares, chain.ends)[-1] + shares[-1])
        if end > self.env.now:
            yield self.env.timeout(end - self.env.now)
        self._stall(rep, begin, tags)

    def _waiting(self, rep: StageReplica, it: int) -> list[Chain]:
        """The chains ``rep``'s forward of iteration ``it`` waits for: none once its first
        forward of the iteration has run."""
        if (*rep.key, it) in self._used:
            return []
        return [self._chains[k] for k in self._keys(rep, it) if k in self._chains]

    def _later_chunk(self, rep: StageReplica) -> StageReplica | None:
        """The rank's chunk two after ``rep``'s (chunks 0 and 1 launch at the step)."""
        stages = sorted({a.stage for a in rep.order if a.stage >= 0})
        i = stages.index(rep.stage)
        if i + 2 >= len(stages):
            return None
        return StageReplica.of(self.inp, rep.replica, stages[i + 2], rep.tp_rank)

    def _stall(self, rep: StageReplica, start: float, tags: dict) -> None:
        if self.env.now > start:
            self.compute.events.append(
                Event(
                    EventKind.STALL,
                    rep.gpu,
                    Stream.COMPUTE,
                    f"wait param gather s{rep.stage}",
                    start,
                    self.env.now,
                    **tags,
                )
            )

    def _hold(self, chain: Chain, size: float, early: tuple):
        """Process: one bucket's all-gather on ``chain``'s links (one operation of its communicator,
        :meth:`~sim.engine.links.Links.hold`), its NCCL thread blocks counted against the
        members' compute meanwhile (:mod:`sim.engine.sm_share`); returns when it began."""
        links, plan, kind = self.coll.links, chain.plan, EventKind.ALL_GATHER
        comm = ("edp" if chain.label else "dp", plan.members)  # the buckets' (sim.engine.buckets)
        ticket = yield from links.take(comm, chain.held, EXPERT if chain.label else DENSE)
        begin = self.env.now
        share, gpus = self.coll.share, [m.gpu for m, _ in chain.members]
        ctas = plan.ctas(size, kind) if share is not None else 0
        if share is not None and ctas:
            share.change(gpus, ctas)
        yield from links.run(ticket, plan.time_s(size, kind), (early, plan.local_s(size, kind)))
        links.give(ticket)
        if share is not None and ctas:
            share.change(gpus, -ctas)
        return begin

    def _run(self, rep: StageReplica, chain: Chain, shares: list[float] | None):
        """Process: the chain's buckets one after another (module doc); with ``shares`` (the
        forward's compute per bucket, ``"forward"``), bucket ``j + 1`` also waits until the
        forward has reached bucket ``j``: ``b_0 = e_0``, ``b_j = max(b_{j-1} + c_{j-1}, e_j)``."""
        kind = EventKind.ALL_GATHER
        reach = 0.0
        for j, size in enumerate(chain.sizes):
            if shares is not None and j > 0:
                reach = chain.ends[0] if j == 1 else max(reach + shares[j - 2], chain.ends[j - 1])
                if reach > self.env.now:
                    yield self.env.timeout(reach - self.env.now)
            plan = chain.plan
            early = tuple(lk for lk in plan.local_links() if lk in chain.held)
            begin = yield from self._hold(chain, size, early)
            chain.ends.append(self.env.now)
            for member, tags in chain.members:
                self.coll.links.events.append(
                    Event(
                        kind,
                        member.gpu,
                        Stream.COMM,
                        f"{kind}{chain.label} s{member.stage} b{j}",
                        begin,
                        self.env.now,
                        nbytes=size,
                        links=chain.plan.names,
                        **tags,
                    )
                )
            if j == 0:
                chain.first.succeed()
        chain.done.succeed()

"""The SimPy model of one training configuration: the pipeline's stage replicas.

Scenario: ``w`` replicas of a ``p``-rank pipeline run on ``p*w`` GPUs (``p*w*t`` with tensor
parallelism: every rank is then ``t`` processes, one per tensor rank, each sending to its own
rank of the next stage and joining its group's collectives after every F and B). Each rank of
each replica is a SimPy process that executes its schedule's action list in order on its GPU's
compute stream; a rank holding ``v`` stage chunks (virtual stages) runs each action with the
costs, memory plan and neighbours of the action's stage, and runs one optimizer step over
all of them (:mod:`sim.engine.step`: every chunk's reduction, then the barrier, then every
chunk's update). A forward waits for its input activation, a backward (B or I) for its
output gradient; a W only for its I (earlier in the same list). Sends of activations and
gradients (:mod:`sim.engine.sends`), the memory policy's copies (:mod:`sim.engine.traffic`), the
data-parallel collectives (:mod:`sim.engine.collectives`, :mod:`sim.engine.buckets`), those of
partitioned states (:mod:`sim.engine.partitioned`) and the tensor-parallel ones
(:mod:`sim.engine.tensor_collectives`) are separate processes that hold the links of their
routes (:mod:`sim.engine.links`). Each rank's CPU thread issues the ops of its
F, B, I, W and recompute (:mod:`sim.engine.host`): the device runs them no earlier than the host
has issued them, the host runs ahead of the device until a host sync point; a GPU's measured
``action_overhead_s`` lengthens each F, B and I (:meth:`Engine._with_runtime`). Memory is recorded in a
:class:`~sim.ledger.Ledger`; an over-subscribed device is a verdict, not a crash.

The core does no I/O and reads no clock: the same :class:`SimInput` gives the same event log.
Python's garbage collector is paused while the simulation runs (it allocates many small
objects and frees them by reference counting; the cycle collector only costs time there).
"""

from __future__ import annotations

import gc
from functools import partial

import simpy

from sim.engine.collectives import Collectives
from sim.engine.exchanges import Exchanges
from sim.engine.fsdp import FsdpRuns
from sim.engine.groups import GroupCollectives
from sim.engine.host import HostThreads, layered_work
from sim.engine.inputs import SimInput
from sim.engine.links import Links
from sim.engine.overlap import PairOverlap, slowdown
from sim.engine.pair_host import full_only, pair_parts, pair_work
from sim.engine.partitioned import PartitionedStates
from sim.engine.replicas import StageReplica, stage_replicas
from sim.engine.sends import StageSends
from sim.engine.step import RankStep, step_ends, step_group
from sim.engine.streams import ComputeStream
from sim.engine.tensor_collectives import TensorCollectives
from sim.engine.traffic import MemoryTraffic
from sim.events import EventKind, EventLog, MemCategory
from sim.hardware.host_ops import HostWork
from sim.ledger import Ledger
from sim.memory.overlapped import pair_delta
from sim.memory.transients import input_grad_send_bytes
from sim.schedules.action import STEP, Action

HOST_POOL = "host"
"""Ledger name of the server's host DRAM: one pool shared by every socket's ranks."""


class Engine:
    """One run: the composed parts and the stage-replica processes."""

    def __init__(self, inp: SimInput):
        self.inp = inp
        self.env = env = simpy.Environment()
        topo = inp.topology
        caps = {g.name: g.memory_bytes for g in topo.gpus}
        caps.update({h.name: h.dram_bytes for h in topo.hosts})
        self.ledger = Ledger(caps, pools={HOST_POOL: tuple(h.name for h in topo.hosts)})
        self.log = EventLog(capacity_bytes=caps)
        self.links = Links(env, topo, self.log.events)
        self.compute = ComputeStream(env, self.log.events)
        self.traffic = MemoryTraffic(env, self.links, self.ledger, self.compute, inp.microbatches)
        self.collectives = Collectives(env, inp, self.links)
        self.tensor = TensorCollectives(env, inp, self.links)
        self.groups = GroupCollectives(env, inp, self.links)
        self.hosts = HostThreads(env, inp.host_overhead, inp.host_syncs)
        self.exchanges = Exchanges(env, inp, self.compute, self.hosts, self.tensor)
        parts = (self.exchanges, self.traffic, self.collectives, self.compute, self.ledger)
        self.fsdp = FsdpRuns(env, inp, self.links, self.ledger, self.compute)
        self.stepper = RankStep(env, inp, (*parts, self.hosts), fsdp=self.fsdp)
        self.sends = StageSends(env, inp, self.links, self.ledger, self.exchanges)
        self.partitioned = PartitionedStates(
            env, inp, (self.ledger, self.traffic, self.collectives, self.compute)
        )
        self._bwd_done: dict[tuple[int, int, int], int] = {}
        self._step_end: dict[tuple[int, int, int, int], float] = {}
        self._reps: dict[tuple[int, int, int], StageReplica] = {}
        self._action_s = {g.name: g.action_overhead_s for g in topo.gpus}

    # -- the run ----------------------------------------------------------------------
    def run(self) -> EventLog:
        """Allocate model state, start every rank of every replica (and tensor rank), run to
        the end; the log."""
        reps = stage_replicas(self.inp)
        self._reps = {rep.key: rep for rep in reps}
        ranks = self.inp.stage_ranks
        first_stage = {rank: ranks.index(rank) for rank in set(ranks)}
        for rep in reps:
            s, plan, gpu = rep.stage, rep.plan, rep.gpu
            self.ledger.change(0.0, gpu, plan.weight_bytes, MemCategory.WEIGHTS, f"s{s} weights")
            self.ledger.change(0.0, gpu, plan.grad_bytes, MemCategory.GRADIENTS, f"s{s} gradients")
            self.ledger.change(
                0.0, gpu, plan.optimizer_bytes, MemCategory.OPTIMIZER, f"s{s} optimizer"
            )
            for category, nbytes in plan.overhead_charges():  # runtime reserve (memory)
                self.ledger.change(0.0, gpu, nbytes, MemCategory(category), f"s{s} {category}")
            if plan.host_bytes:
                self.ledger.change(
                    0.0, rep.host, plan.host_bytes, MemCategory.OFFLOAD, f"s{s} states"
                )
            if plan.host_framework_bytes:
                self.ledger.change(
                    0.0, rep.host, plan.host_framework_bytes, MemCategory.FRAMEWORK, f"s{s} host"
                )
            if first_stage[ranks[rep.stage]] == rep.stage:
                self.env.process(self.rank(rep))
        paused = gc.isenabled()
        gc.disable()
        try:
            self.env.run()
        finally:
            if paused:
                gc.enable()
        ends: dict[int, float] = {}
        for (_, _, _, k), t in self._step_end.items():
            ends[k] = max(ends.get(k, t), t)
        self.log.iteration_ends_s = [ends[k] for k in sorted(ends)]
        self.log.memory = self.ledger.events
        self.log.meta["peak_bytes"] = dict(self.ledger.peak)
        self.log.meta["over_capacity"] = self.ledger.over_capacity()
        if self.inp.mirrored:  # sim.engine.symmetry: what the simulated ranks stand for
            self.log.meta["mirrored"] = {
                "replicas": self.inp.dp_width,
                "tensor_ranks": self.inp.tensor_parallel,
            }
        return self.log

    def _rep(self, first: StageReplica, a: Action) -> StageReplica:
        """The stage replica (of ``first``'s replica and tensor rank) that runs ``a``."""
        return self._reps[(first.replica, _stage_of(a), first.tp_rank)]

    def rank(self, first: StageReplica):
        """Process: run the action list of ``first``'s rank in order, each action as its
        stage's replica."""
        order, m = first.order, self.inp.microbatches
        ends = step_ends(order)
        for i, a in enumerate(order):
            rep = self._rep(first, a)
            self.exchanges.post_ahead(first, i)
            if i + 1 < len(order):
                nxt, nrep = order[i + 1], self._rep(first, order[i + 1])
                self.traffic.prefetch(nrep, nxt)
                ahead = not nrep.plan.blocking_moves  # synchronous calls fetch nothing ahead
                if ahead and self.partitioned.gathers(nrep) and nxt.op in ("F", "B", "I"):
                    self.partitioned.gather(nrep, nxt)
            if a.op == STEP:
                steps = step_group(order, i)  # empty: an earlier STEP ran this one
                if steps:
                    yield from self.step(first, steps)
            elif a.sub_actions is not None:
                yield from self.overlap_pair(first, a.sub_actions, ends)
            elif a.op == "F":
                yield from self.forward(rep, a, rep.tags(a.microbatch, a.microbatch // m))
            elif a.op in ("B", "I", "W"):
                tags = rep.tags(a.microbatch, a.microbatch // m)
                yield from self.backward(rep, a, tags, ends.get(a))

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
                proc = self.forward(rep, a, tags, sends, ov)
            else:
                proc = self.backward(rep, a, tags, ends.get(a), sends, ov)
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
            self.env, self.compute, self.groups, factor, self.inp.runtime.delay_wgrad
        )

    def _issue(self, rep: StageReplica, kind: str, name: str, work: HostWork, tags: dict):
        """Process: run an action's ops as ``rep``'s host thread issues them."""
        clock = self.hosts.clock(rep.gpu)
        yield from self.compute.run_issued(rep.gpu, kind, name, work, clock, **tags)

    def _compute(self, rep: StageReplica, kind: str, name: str, work: HostWork, ovl, tags: dict):
        """Process: an action's compute ``work``; with tensor-parallel collectives overlapped
        with its GEMMs (``ovl``: :class:`~sim.parallel.tp_overlap.OverlapOp` s), those start
        beside it, the compute takes what the pairs add, and the rank waits for both."""
        if not ovl:
            yield from self._issue(rep, kind, name, work, tags)
            return
        comm = self.tensor.start(rep, name, ovl, tags)
        extra = self.tensor.overlap_extra_s(rep, ovl)
        yield from self._issue(rep, kind, name, work.then(HostWork.device_only(extra)), tags)
        yield comm

    def _with_runtime(self, work: HostWork, gpu: str, op: str) -> HostWork:
        """``work`` followed, on ``gpu``'s compute stream, by the runtime's own seconds for an
        action ``op`` (``F``: the forward's, ``B``/``I``: the backward's; ``W`` none: it
        receives and sends nothing): :attr:`~sim.hardware.topology.GPU.action_overhead_s`,
        device time (on a CPU rank the host thread is the device)."""
        fwd_s, bwd_s = self._action_s[gpu]
        extra = fwd_s if op == "F" else bwd_s if op in ("B", "I") else 0.0
        return work.then(HostWork.device_only(extra)) if extra > 0 else work

    def _read_loss(self, rep: StageReplica) -> None:
        """The last stage's check of its loss after a forward (``runtime.loss_reads``): the
        host waits for the forward, then issues each check's op and reads its result
        (``nograd_op_s + read_s`` each), before it issues anything else."""
        self.hosts.wait(rep.gpu)
        host = self.hosts.overhead_of(rep.gpu)
        reads = self.inp.runtime.loss_reads
        self.hosts.clock(rep.gpu).t += host.blocking_s(reads, reads)

    def _unit_runner(self, rep: StageReplica, a: Action, tags: dict, op: str):
        """The compute of one FSDP unit of ``a`` (:data:`~sim.engine.fsdp.UnitRunner`): its
        layers' forward, or their recompute (full checkpointing per layer, else the stage's
        selective recompute in proportion to the layers' forward seconds) and backward."""
        gpu, plan, cost = rep.gpu, rep.plan, rep.cost
        fwd = cost.forward_parts(plan.recompute_layers)
        bwd = cost.backward_layer_parts()
        total_f = sum(p[0] for p in fwd) or 1.0

        def run(unit, last: bool):
            if op == "F":
                work = self.hosts.layered(gpu, "F", tuple(fwd[i] for i in unit.layers))
            else:
                full = [i for i in unit.layers if i in plan.recompute_layers]
                if full:
                    parts = cost.recompute_parts(tuple(full))
                    redo = self.hosts.layered(gpu, "R", parts)
                    yield from self._issue(rep, EventKind.RECOMPUTE, f"R{a}", redo, tags)
                elif plan.recompute_s > 0 and not full_only(plan):
                    share = sum(fwd[i][0] for i in unit.layers) / total_f
                    redo = self.hosts.work(gpu, "R", plan.recompute_s * share, 0.0, 1)
                    yield from self._issue(rep, EventKind.RECOMPUTE, f"R{a}", redo, tags)
                work = self.hosts.layered(gpu, "B", tuple(bwd[i] for i in reversed(unit.layers)))
            if last:
                work = self._with_runtime(work, gpu, op)
            yield from self._issue(rep, EventKind.COMPUTE, str(a), work, tags)

        return run

    def _fetch(self, rep: StageReplica, a: Action, tags: dict):
        yield from self.compute.wait(self.traffic.fetch(rep, a), rep.gpu, f"wait fetch {a}", **tags)

    def forward(
        self,
        rep: StageReplica,
        a: Action,
        tags: dict,
        sends: list | None = None,
        overlap: PairOverlap | None = None,
    ):
        """Process: wait for the input activation (and chunks), stash, compute, send (or,
        with ``sends``, add the send's arguments to it for the caller to start). With
        ``overlap`` (:class:`~sim.engine.overlap.PairOverlap`) the compute and the group
        exchanges run as its chain instead of one after the other."""
        s, gpu, plan, mb = rep.stage, rep.gpu, rep.plan, a.microbatch
        if not rep.first:
            yield from self.sends.receive(("act", rep.replica, s, mb, rep.tp_rank))
            self.hosts.sync(rep.gpu, "recv")
        if self.exchanges.active:
            yield from self.exchanges.boundary(rep, a, tags, not rep.first)
        if plan.fetch_bytes > 0:
            yield from self._fetch(rep, a, tags)
        yield from self.partitioned.wait(rep, a, tags)
        self.ledger.change(
            self.env.now, gpu, plan.fwd_alloc_bytes, MemCategory.ACTIVATIONS, f"stash {a}"
        )
        cost = rep.cost
        gathers, it = self.stepper.gathers, a.microbatch // self.inp.microbatches
        if gathers.active:
            yield from gathers.before(rep, it, cost.fwd_s, tags)
        start = self.env.now
        tp_after = cost.tp_fwd
        if overlap is not None:
            yield from overlap.body(rep, a, cost.fwd_s, cost.group_fwd, tags)
            tp_after = tp_after + _triples(cost.tp_fwd_overlap)
        elif plan.fsdp is not None:  # unit by unit (sim.engine.fsdp)
            yield from self.fsdp.forward(rep, a, tags, self._unit_runner(rep, a, tags, "F"))
        else:
            if cost.fwd_layers and full_only(plan):
                every = range(len(cost.fwd_layers))
                drain_s, tp_after = self._drain(rep, every, tp_after)
                parts = cost.forward_parts(plan.recompute_layers, drain_s)
                work = self.hosts.layered(gpu, "F", parts)
            else:
                work = self.hosts.work(
                    gpu, "F", cost.fwd_s, cost.fwd_ops, nograd_ops=plan.recompute_ops
                )
            work = self._with_runtime(work, gpu, "F")
            yield from self._compute(
                rep, EventKind.COMPUTE, str(a), work, cost.tp_fwd_overlap, tags
            )
        if gathers.active:
            yield from gathers.after(rep, it, start, cost.fwd_s, tags)
        if plan.offload_fwd_stall_s > 0:  # TE's offload schedule (sim.memory.offload_schedule)
            yield from self._stall(gpu, f"wait offload {a}", plan.offload_fwd_stall_s, tags)
        if tp_after:
            yield from self.tensor.join(rep, str(a), tp_after, tags)
        if rep.cost.group_fwd and overlap is None:
            yield from self.groups.join(rep, str(a), rep.cost.group_fwd, tags)
        if rep.last and self.inp.runtime.loss_reads:
            self._read_loss(rep)
        now = self.env.now
        self.partitioned.release(rep, a)
        if plan.fetch_bytes > 0:
            self.ledger.change(now, gpu, -plan.fetch_live, MemCategory.CHUNKS, f"evict {a}")
        if not rep.first:
            self.ledger.change(now, gpu, -rep.cost.in_bytes, MemCategory.BUFFERS, f"recv {a}")
        self.ledger.change(now, gpu, -plan.rebuild_bytes, MemCategory.ACTIVATIONS, f"drop {a}")
        if plan.swap_bytes > 0:
            self.traffic.swap_out(rep, mb, tags)
        if not rep.last:
            self.sends.start_or_defer((rep, s + 1, mb, rep.cost.out_bytes, "act"), sends)

    def backward(
        self,
        rep: StageReplica,
        a: Action,
        tags: dict,
        step_no: int | None = None,
        sends: list | None = None,
        overlap: PairOverlap | None = None,
    ):
        """Process: wait for the gradient (swap-in, chunks), recompute, compute, send back.

        A B or W that ends optimizer step ``step_no`` reduces its gradients over the replicas
        in buckets while it computes (:mod:`sim.engine.buckets`)."""
        s, gpu, plan, mb = rep.stage, rep.gpu, rep.plan, a.microbatch
        uses_grad = a.op in ("B", "I")
        # after an iteration's first micro-batch, weight gradients add into .grad
        cost = rep.cost if mb % self.inp.microbatches == 0 else rep.cost.accumulating()
        if uses_grad and not rep.last:
            yield from self.sends.receive(("grad", rep.replica, s, mb, rep.tp_rank))
            self.hosts.sync(rep.gpu, "recv")
        if self.exchanges.active:
            yield from self.exchanges.boundary(rep, a, tags, uses_grad and not rep.last)
        if uses_grad and plan.swap_bytes > 0:
            yield from self.compute.wait(
                self.traffic.swap_in(rep, mb), gpu, f"wait swap-in {a}", **tags
            )
        if uses_grad and plan.offload_bwd_stall_s > 0:
            yield from self._stall(gpu, f"wait reload {a}", plan.offload_bwd_stall_s, tags)
        if plan.fetch_bytes > 0:
            yield from self._fetch(rep, a, tags)
        if uses_grad:
            yield from self.partitioned.wait(rep, a, tags)
        if uses_grad and (plan.recompute_s > 0 or plan.rebuild_bytes > 0):
            yield from self._recompute(rep, a, tags, overlap)
        dur = {"B": cost.bwd_s, "I": cost.input_s}.get(a.op, cost.weight_s)
        if step_no is not None and a.op in ("B", "W") and self.collectives.overlaps(rep):
            self.collectives.start_overlapped(rep, step_no, dur, tags)
        done = self.env.event()
        if self.partitioned.streams(rep, a):  # buckets leave while the backward computes
            self.partitioned.stream_gradients(rep, a, dur, done, tags)
        tp_after = rep.cost.tp_bwd
        if overlap is not None and uses_grad:
            wgrad = cost.weight_s if a.op == "B" else 0.0
            yield from overlap.body(rep, a, dur, rep.cost.group_bwd, tags, wgrad)
            tp_after = tp_after + _triples(rep.cost.tp_bwd_overlap)
        elif plan.fsdp is not None and a.op == "B":
            yield from self.fsdp.backward(rep, a, tags, self._unit_runner(rep, a, tags, "B"))
        else:
            if a.op == "B" and cost.bwd_layers:
                work = self.hosts.layered(gpu, "B", cost.backward_parts())
            else:
                work = self.hosts.work(gpu, a.op, dur, cost.backward_ops(a.op))
            work = self._with_runtime(work, gpu, a.op)
            ovl = rep.cost.tp_bwd_overlap if uses_grad else ()
            yield from self._compute(rep, EventKind.COMPUTE, str(a), work, ovl, tags)
        if uses_grad and tp_after:
            yield from self.tensor.join(rep, str(a), tp_after, tags)
        if uses_grad and rep.cost.group_bwd and overlap is None:
            yield from self.groups.join(rep, str(a), rep.cost.group_bwd, tags)
        yield from self._after_backward(rep, a, tags, done, sends)

    def _stall(self, gpu: str, name: str, seconds: float, tags: dict):
        """Process: the compute stream waits ``seconds`` for copies on a side stream whose
        schedule the plan computed (activation offload and reload)."""
        yield from self.compute.wait(self.env.timeout(seconds), gpu, name, **tags)

    def _drain(self, rep: StageReplica, layers, tp: tuple[tuple[str, float, int], ...]):
        """Per layer of ``rep``'s stage (those in ``layers``, else 0), the seconds of the
        collectives its first host sync waits for (:meth:`StageCost.drained`, each
        uncontended on the group's ring: :meth:`TensorCollectives.comm_s`), and ``tp`` (the
        action's collectives after its kernels) without them; ``((), tp)`` when there are none
        or ``tp`` does not hold them all (they then stay after the kernels)."""
        cost = rep.cost
        ops = [op for i in layers for op in cost.drained(i)]
        left = _less(tp, ops) if ops else None
        if left is None:
            return (), tp
        drain_s = [0.0] * len(cost.fwd_layers)
        for i in layers:
            drain_s[i] = sum(self.tensor.comm_s(rep, k, nb) for k, nb in cost.drained(i))
        return tuple(drain_s), left

    def _recompute(self, rep: StageReplica, a: Action, tags: dict, overlap: PairOverlap | None):
        """Process: the recompute before a B or I (its rebuilt bytes, its compute and the
        tensor-parallel collectives of the layers it runs again)."""
        gpu, plan = rep.gpu, rep.plan
        self.ledger.change(
            self.env.now, gpu, plan.rebuild_bytes, MemCategory.ACTIVATIONS, f"recompute {a}"
        )
        tp_rec = rep.cost.tp_recompute
        if overlap is not None:
            yield from overlap.compute(gpu, EventKind.RECOMPUTE, f"R{a}", plan.recompute_s, **tags)
        elif plan.fsdp is not None and a.op == "B":
            pass  # each unit recomputes before its backward (sim.engine.fsdp)
        else:
            if rep.cost.fwd_layers and full_only(plan):
                drain_s, tp_rec = self._drain(rep, plan.recompute_layers, tp_rec)
                parts = rep.cost.recompute_parts(plan.recompute_layers, drain_s)
                work = self.hosts.layered(gpu, "R", parts)
            else:
                rec = (plan.recompute_s, plan.recompute_ops, plan.recompute_regions)
                work = self.hosts.work(gpu, "R", *rec)
            ovl = rep.cost.tp_recompute_overlap
            yield from self._compute(rep, EventKind.RECOMPUTE, f"R{a}", work, ovl, tags)
        if overlap is not None:
            tp_rec = tp_rec + _triples(rep.cost.tp_recompute_overlap)
        if tp_rec:
            yield from self.tensor.join(rep, f"R{a}", tp_rec, tags)

    def _after_backward(self, rep: StageReplica, a: Action, tags: dict, done, sends):
        """Process: what follows a backward's compute: chunks evicted, the stash freed (B, W),
        ``done`` signalled, the gradient sent back to the previous stage (B, I)."""
        s, gpu, plan, mb = rep.stage, rep.gpu, rep.plan, a.microbatch
        uses_grad = a.op in ("B", "I")
        now = self.env.now
        if plan.fetch_bytes > 0:
            self.ledger.change(now, gpu, -plan.fetch_live, MemCategory.CHUNKS, f"evict {a}")
        if uses_grad:
            self.partitioned.release(rep, a)
        if a.op in ("B", "W"):
            self.ledger.change(
                now, gpu, -plan.fwd_alloc_bytes, MemCategory.ACTIVATIONS, f"free {a}"
            )
            key = rep.key
            self._bwd_done[key] = self._bwd_done.get(key, 0) + 1
            done.succeed()
            moves = self.partitioned.after_backward(rep, a, tags)
            if moves is not None and plan.blocking_moves:  # synchronous calls: the rank waits
                yield from self.compute.wait(moves, gpu, f"wait gradients {a}", **tags)
        if uses_grad:
            if not rep.last:
                self.ledger.change(now, gpu, -rep.cost.out_bytes, MemCategory.BUFFERS, f"grad {a}")
            if not rep.first:  # the input gradient lives until its send completes
                held = input_grad_send_bytes(rep.cost.in_bytes)
                self.ledger.change(now, gpu, held, MemCategory.BUFFERS, f"send grad {a}")
                self.sends.start_or_defer((rep, s - 1, mb, held, "grad"), sends)

    def step(self, first: StageReplica, steps: tuple[Action, ...]):
        """Process: the optimizer step of ``first``'s rank over its stage chunks (``steps``:
        their STEP actions, :func:`~sim.engine.step.step_group`; :mod:`sim.engine.step`),
        then the iteration's end for each chunk whose m-th backward it follows."""
        reps = [self._rep(first, a) for a in steps]
        yield from self.stepper.run(reps, steps[0].microbatch)
        for rep in reps:
            done = self._bwd_done.get(rep.key, 0)
            if done % self.inp.microbatches == 0:  # iteration boundary: m backwards since
                self._step_end[(*rep.key, done // self.inp.microbatches - 1)] = self.env.now


def _triples(ops) -> tuple[tuple[str, float, int], ...]:
    """Overlapped collectives as ``(kind, bytes, count)`` run after the compute instead (an
    action of an overlapped pair, whose chains already share the compute)."""
    return tuple((op.kind, op.nbytes, op.count) for op in ops)


def _less(
    tp: tuple[tuple[str, float, int], ...], ops: list[tuple[str, float]]
) -> tuple[tuple[str, float, int], ...] | None:
    """``tp`` (``(kind, bytes each, count)``) less one of each of ``ops`` (``(kind, bytes)``),
    entries left at 0 dropped; None when ``tp`` does not hold them all.

    >>> _less((("allreduce", 8.0, 3), ("allreduce", 4.0, 1)), [("allreduce", 8.0)] * 2)
    (('allreduce', 8.0, 1), ('allreduce', 4.0, 1))
    >>> _less((("allreduce", 8.0, 1),), [("allreduce", 8.0)] * 2) is None
    True
    """
    take: dict[tuple[str, float], int] = {}
    for op in ops:
        take[op] = take.get(op, 0) + 1
    out = []
    for kind, nbytes, count in tp:
        n = count - take.pop((kind, nbytes), 0)
        if n < 0:
            return None
        if n:
            out.append((kind, nbytes, n))
    return None if take else tuple(out)


def _layered(pair: tuple[Action, ...], plans: list) -> float:
    """What a combined 1F1B step (a forward then a backward whose plans carry
    ``layer_shares``) holds less than its two whole stashes (:func:`~sim.memory.overlapped.
    pair_delta`, ``<= 0``); 0 for any other pair."""
    if len(pair) != 2 or (pair[0].op, pair[1].op) != ("F", "B"):
        return 0.0
    return pair_delta(plans[0], plans[1])


def _stage_of(a: Action) -> int:
    """The stage of ``a``; of its forward for an ``OVERLAP_F_B`` pair."""
    return a.stage if a.sub_actions is None else a.sub_actions[0].stage


def simulate(inp: SimInput) -> EventLog:
    """Run one configuration to completion and return its event log.

    Raises:
        ValueError: the program deadlocks (an action waits for data nobody sends, or for a
            collective or barrier that some rank never reaches); the message names the GPUs
            whose optimizer steps did not all run.
    """
    log = Engine(inp).run()
    want: dict[str, int] = {}
    for rep in stage_replicas(inp):
        steps = sum(a.op == STEP and a.stage == rep.stage for a in rep.order)
        want[rep.gpu] = want.get(rep.gpu, 0) + steps
    ran: dict[str, int] = {}
    for e in log.events:
        if e.kind == EventKind.OPTIMIZER:
            ran[e.device] = ran.get(e.device, 0) + 1
    stuck = [g for g, n in want.items() if ran.get(g, 0) < n]
    if stuck:
        more = ", ..." if len(stuck) > 8 else ""
        raise ValueError(
            f"the schedule deadlocked: {sum(ran.values())} of {sum(want.values())} optimizer "
            f"steps ran (unfinished: {', '.join(stuck[:8])}{more})"
        )
    return log

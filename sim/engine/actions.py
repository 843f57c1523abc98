"""The processes of one stage replica's actions: a forward, a backward (B, I or W), the
recompute before a backward.

A forward waits for its input activation (and the memory policy's chunks, the partitioned
states, the framework's exchanges), stashes, runs its compute as the rank's host thread issues
it (:mod:`sim.engine.host`; layer by layer when the stage has per-layer costs, unit by unit
under FSDP: :mod:`sim.engine.fsdp`), joins its tensor-parallel and group collectives and sends
its output (:mod:`sim.engine.sends`). A backward waits for its output gradient (B or I; a W
only for its I, earlier in the same list), recomputes, computes (reducing its gradients over
the replicas in buckets when it ends a step: :mod:`sim.engine.buckets`), frees its stash and
sends the input gradient back. A GPU's measured ``action_overhead_s`` lengthens each F, B and
I (:meth:`ActionRuns._with_runtime`). Collectives a layer's host sync waits for run before the
sync (:mod:`sim.engine.drains`). An action of an overlapped pair runs its compute and group
exchanges as the pair's chain (:class:`~sim.engine.overlap.PairOverlap`, :mod:`sim.engine.pairs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from sim.engine.drains import Drained, Triples, drain, drained
from sim.engine.host import LayerPart
from sim.engine.inputs import SimInput
from sim.engine.overlap import PairOverlap
from sim.engine.pair_host import full_only
from sim.engine.parts import RunParts
from sim.engine.replicas import StageReplica
from sim.engine.streams import Wait
from sim.events import EventKind, MemCategory
from sim.hardware.host_ops import HostWork
from sim.memory.transients import input_grad_send_bytes
from sim.schedules.action import Action


class ActionRuns:
    """The action processes of every stage replica of one run (module doc).

    Args:
        inp: the configuration.
        parts: the run's composed parts (:func:`~sim.engine.parts.compose`).

    Attributes:
        bwd_done: per stage replica (:attr:`~sim.engine.replicas.StageReplica.key`), the
            backwards (B or W) it has finished.
    """

    def __init__(self, inp: SimInput, parts: RunParts):
        self.inp = inp
        self.env, self.ledger, self.compute = parts.env, parts.ledger, parts.compute
        self.traffic, self.collectives = parts.traffic, parts.collectives
        self.tensor, self.groups, self.hosts = parts.tensor, parts.groups, parts.hosts
        self.exchanges, self.fsdp, self.stepper = parts.exchanges, parts.fsdp, parts.stepper
        self.sends, self.partitioned = parts.sends, parts.partitioned
        self.bwd_done: dict[tuple[int, int, int], int] = {}
        self._action_s = {g.name: g.action_overhead_s for g in inp.topology.gpus}

    def _issue(
        self,
        rep: StageReplica,
        kind: str,
        name: str,
        work: HostWork,
        tags: dict,
        drains: tuple[Drained, ...] = (),
    ):
        """Process: run an action's ops as ``rep``'s host thread issues them; the collectives
        its host syncs drain (``drains``, :mod:`sim.engine.drains`) are logged on the group's
        stream, not as the action's compute."""
        clock = self.hosts.clock(rep.gpu)
        waits = tuple(Wait(d.before, d.seconds) for d in drains)
        spans = yield from self.compute.run_issued(rep.gpu, kind, name, work, clock, waits, **tags)
        if drains:
            self.tensor.log_drained(rep, name, spans, drains, tags)

    def _drained_work(
        self,
        rep: StageReplica,
        op: str,
        layers: Iterable[int],
        tp: Triples,
        parts_of: Callable[[tuple[float, ...]], tuple[LayerPart, ...]],
    ) -> tuple[HostWork, Triples, tuple[Drained, ...]]:
        """The layered work of action ``op`` (``F`` or ``R``) of ``rep``'s stage, its parts
        ``parts_of(drain_s)``, with the collectives the host syncs of ``layers`` drain inside
        it (:func:`~sim.engine.drains.drain`): ``(work, tp without them, where they run)``."""
        comm_s = partial(self.tensor.comm_s, rep)
        drain_s, left = drain(rep.cost, layers, tp, comm_s)
        parts = parts_of(drain_s)
        work = self.hosts.layered(rep.gpu, op, parts)
        if not any(drain_s):
            return work, left, ()
        prefixes = self.hosts.drain_prefixes(rep.gpu, op, parts)
        return work, left, drained(rep.cost, drain_s, prefixes, comm_s)

    def _compute(
        self,
        rep: StageReplica,
        kind: str,
        name: str,
        work: HostWork,
        ovl,
        tags: dict,
        drains: tuple[Drained, ...] = (),
    ):
        """Process: an action's compute ``work`` (``drains``: as in :meth:`_issue`); with
        tensor-parallel collectives overlapped with its GEMMs (``ovl``:
        :class:`~sim.parallel.tp_overlap.OverlapOp` s), those start beside it, the compute
        takes what the pairs add, and the rank waits for both."""
        if not ovl:
            yield from self._issue(rep, kind, name, work, tags, drains)
            return
        comm = self.tensor.start(rep, name, ovl, tags)
        extra = self.tensor.overlap_extra_s(rep, ovl)
        work = work.then(HostWork.device_only(extra))
        yield from self._issue(rep, kind, name, work, tags, drains)
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
            drains: tuple[Drained, ...] = ()
            if cost.fwd_layers and full_only(plan):
                every = range(len(cost.fwd_layers))
                parts_of = partial(cost.forward_parts, plan.recompute_layers)
                work, tp_after, drains = self._drained_work(rep, "F", every, tp_after, parts_of)
            else:
                work = self.hosts.work(
                    gpu, "F", cost.fwd_s, cost.fwd_ops, nograd_ops=plan.recompute_ops
                )
            work = self._with_runtime(work, gpu, "F")
            ovl = cost.tp_fwd_overlap
            yield from self._compute(rep, EventKind.COMPUTE, str(a), work, ovl, tags, drains)
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
        done = self.env.event()  # the backward's end, its exchanges included
        if step_no is not None and a.op in ("B", "W") and self.collectives.overlaps(rep):
            self.collectives.start_overlapped(rep, step_no, dur, tags, done)
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
            drains: tuple[Drained, ...] = ()
            if rep.cost.fwd_layers and full_only(plan):
                layers = plan.recompute_layers
                parts_of = partial(rep.cost.recompute_parts, layers)
                work, tp_rec, drains = self._drained_work(rep, "R", layers, tp_rec, parts_of)
            else:
                rec = (plan.recompute_s, plan.recompute_ops, plan.recompute_regions)
                work = self.hosts.work(gpu, "R", *rec)
            ovl = rep.cost.tp_recompute_overlap
            yield from self._compute(rep, EventKind.RECOMPUTE, f"R{a}", work, ovl, tags, drains)
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
            self.bwd_done[key] = self.bwd_done.get(key, 0) + 1
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


def _triples(ops) -> tuple[tuple[str, float, int], ...]:
    """Overlapped collectives as ``(kind, bytes, count)`` run after the compute instead (an
    action of an overlapped pair, whose chains already share the compute)."""
    return tuple((op.kind, op.nbytes, op.count) for op in ops)

"""The SimPy model of one training configuration on one server.

Scenario: ``w`` replicas of a ``p``-stage pipeline run on ``p*w`` GPUs. Each stage replica is a
SimPy process that executes its schedule's action list in order on the GPU's compute stream:
a forward waits for its input activation, a backward for its output gradient. Sends of
activations and gradients, swaps (to a host, or striped over peer GPUs), chunk fetches and
write-backs, step copies and the data-parallel collectives (all-reduce; reduce-scatter and
all-gather when optimizer state is sharded) are separate processes
(:mod:`sim.engine_memory`, :mod:`sim.engine_collectives`) that hold every link on their route
for ``latency + bytes / bottleneck bandwidth``;
a link is a FIFO resource, so two transfers crossing one link take longer than one. Memory is
recorded in a :class:`~sim.ledger.Ledger` (weights, gradients, optimizer state, activation
stashes, receive buffers, swapped bytes) and an over-subscribed device is a verdict, not a crash.

The core does no I/O and reads no clock: the same :class:`SimInput` gives the same event log.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import simpy

from sim.engine_collectives import Collectives
from sim.engine_memory import MemoryOps
from sim.events import Event, EventLog
from sim.hardware.topology import Topology
from sim.ledger import Ledger
from sim.memory.plan import StagePlan
from sim.schedules.action import STEP, Action, Program
from sim.trace.schema import LayerProfile


@dataclass(frozen=True)
class StageCost:
    """Per-micro-batch compute and boundary sizes of one stage.

    Attributes:
        fwd_s: forward seconds.
        bwd_s: backward seconds (B, or I + W).
        out_bytes: bytes of the activation this stage sends to the next one.
        in_bytes: bytes of the activation it receives (the gradient it sends back).
    """

    fwd_s: float
    bwd_s: float
    out_bytes: float
    in_bytes: float

    @classmethod
    def from_layers(cls, layers: tuple[LayerProfile, ...], in_bytes: float) -> StageCost:
        return cls(sum(x.fwd_s for x in layers), sum(x.bwd_s for x in layers),
                   layers[-1].out_bytes, in_bytes)


@dataclass(frozen=True)
class SimInput:
    """One configuration, fully resolved.

    Attributes:
        topology: the server.
        costs: per stage.
        program: per-rank action lists (rank = stage), STEP included.
        microbatches: micro-batches per iteration (m).
        placement: GPU index per ``[replica][stage]``.
        plans: memory plan per ``[replica][stage]``.
    """

    topology: Topology
    costs: tuple[StageCost, ...]
    program: Program
    microbatches: int
    placement: tuple[tuple[int, ...], ...]
    plans: tuple[tuple[StagePlan, ...], ...]

    @cached_property
    def stages(self) -> int:
        return len(self.costs)

    @cached_property
    def dp_width(self) -> int:
        return len(self.placement)


class _Engine(MemoryOps, Collectives):
    def __init__(self, inp: SimInput):
        self.inp = inp
        self.env = simpy.Environment()
        topo = inp.topology
        caps = {g.name: g.memory_bytes for g in topo.gpus}
        caps.update({h.name: h.dram_bytes for h in topo.hosts})
        self.ledger = Ledger(caps)
        self.links: dict[str, simpy.Resource] = {}
        self.mail: dict[tuple, simpy.Event] = {}
        self.log = EventLog(capacity_bytes=caps)
        self.step_end: dict[tuple[int, int, int], float] = {}
        self.collectives: dict[tuple[int, int], list] = {}
        self.bwd_done: dict[tuple[int, int], int] = {}
        self.pending: dict[tuple[int, int], list] = {}

    # -- plumbing ---------------------------------------------------------------------
    def box(self, key: tuple) -> simpy.Event:
        ev = self.mail.get(key)
        if ev is None:
            ev = self.mail[key] = self.env.event()
        return ev

    def link(self, name: str) -> simpy.Resource:
        res = self.links.get(name)
        if res is None:
            res = self.links[name] = simpy.Resource(self.env, capacity=1)
        return res

    def hold_links(self, links, duration_s: float):
        """Process: acquire ``links`` in name order (no deadlock), hold, release."""
        reqs = []
        for name in sorted({lk.name for lk in links}):
            res = self.link(name)
            req = res.request()
            yield req
            reqs.append((res, req))
        start = self.env.now
        yield self.env.timeout(duration_s)
        for res, req in reqs:
            res.release(req)
        return start

    def transfer(self, src: str, dst: str, nbytes: float, kind: str, name: str, stream: str,
                 **meta):
        """Process: move ``nbytes`` from node ``src`` to ``dst``; returns its start time."""
        route = self.inp.topology.route(src, dst)
        if not route or nbytes <= 0:
            return self.env.now
        dur = sum(lk.latency_s for lk in route) + nbytes / min(lk.bandwidth_Bps for lk in route)
        start = yield from self.hold_links(route, dur)
        self.log.events.append(Event(kind, src, stream, name, start, self.env.now, nbytes=nbytes,
                                     links=tuple(lk.name for lk in route), **meta))
        return start

    def compute(self, gpu: str, kind: str, name: str, dur: float, **meta):
        start = self.env.now
        if dur > 0:
            yield self.env.timeout(dur)
        self.log.events.append(Event(kind, gpu, "compute", name, start, self.env.now, **meta))

    def wait(self, ev: simpy.Event, gpu: str, name: str, **meta):
        """Wait for ``ev``; time spent waiting is logged as a stall on the compute stream."""
        start = self.env.now
        if not ev.triggered:
            yield ev
        if self.env.now > start:
            self.log.events.append(Event("stall", gpu, "compute", name, start, self.env.now,
                                         **meta))

    # -- the run ----------------------------------------------------------------------
    def run(self) -> EventLog:
        inp = self.inp
        for r, row in enumerate(inp.placement):
            for s, g in enumerate(row):
                plan = inp.plans[r][s]
                gpu = f"gpu{g}"
                self.ledger.change(0.0, gpu, plan.weight_bytes, "weights", f"s{s} weights")
                self.ledger.change(0.0, gpu, plan.grad_bytes, "gradients", f"s{s} gradients")
                self.ledger.change(0.0, gpu, plan.optimizer_bytes, "optimizer", f"s{s} optimizer")
                for category, nbytes in plan.overhead_charges():  # runtime reserve (memory)
                    self.ledger.change(0.0, gpu, nbytes, category, f"s{s} {category}")
                if plan.host_bytes:
                    host = inp.topology.gpu(g).host
                    self.ledger.change(0.0, host, plan.host_bytes, "offload", f"s{s} states")
                self.env.process(self.rank(r, s))
        self.env.run()
        steps = sorted({k for (_, _, k) in self.step_end})
        self.log.iteration_ends_s = [
            max(t for (r, s, k), t in self.step_end.items() if k == step) for step in steps
        ]
        self.log.memory = self.ledger.events
        self.log.meta["peak_bytes"] = dict(self.ledger.peak)
        self.log.meta["over_capacity"] = self.ledger.over_capacity()
        return self.log

    def rank(self, r: int, s: int):
        inp = self.inp
        gpu = f"gpu{inp.placement[r][s]}"
        plan = inp.plans[r][s]
        order = inp.program[s]
        m = inp.microbatches
        for i, a in enumerate(order):
            nxt = order[i + 1] if i + 1 < len(order) else None
            if nxt is not None:
                self.prefetch(r, s, gpu, plan, nxt)
            meta = dict(stage=s, microbatch=a.microbatch if a.op != STEP else None,
                        iteration=a.microbatch // m if a.op != STEP else a.microbatch,
                        replica=r)
            if a.op == "F":
                yield from self.forward(r, s, gpu, plan, a, meta)
            elif a.op in ("B", "I", "W"):
                yield from self.backward(r, s, gpu, plan, a, meta)
            elif a.op == STEP:
                yield from self.step(r, s, gpu, plan, a, meta)

    def forward(self, r, s, gpu, plan: StagePlan, a: Action, meta):
        inp, mb = self.inp, a.microbatch
        if s > 0:
            yield self.box(("act", r, s, mb))
        if plan.fetch_bytes > 0:
            yield from self.wait(self.start_once(("fetch", r, s, str(a)),
                                                 self.fetch(gpu, plan, a, s, r)),
                                 gpu, f"wait fetch {a}", **meta)
        self.ledger.change(self.env.now, gpu, plan.fwd_alloc_bytes, "activations", f"stash {a}")
        yield from self.compute(gpu, "compute", str(a), inp.costs[s].fwd_s, **meta)
        now = self.env.now
        if plan.fetch_bytes > 0:
            self.ledger.change(now, gpu, -plan.fetch_live, "chunks", f"evict {a}")
        if s > 0:
            self.ledger.change(now, gpu, -inp.costs[s].in_bytes, "buffers", f"recv {a}")
        self.ledger.change(now, gpu, -plan.rebuild_bytes, "activations", f"drop {a}")
        if plan.swap_bytes > 0:
            self.box(("swapout", r, s, mb))  # created now so swap-in can wait on it
            self.env.process(self.swap_out(r, s, gpu, plan, mb, meta))
        if s < inp.stages - 1:
            self.env.process(self.send(r, s, s + 1, mb, inp.costs[s].out_bytes, "act"))

    def backward(self, r, s, gpu, plan: StagePlan, a: Action, meta):
        inp, mb = self.inp, a.microbatch
        if a.op in ("B", "I") and s < inp.stages - 1:
            yield self.box(("grad", r, s, mb))
        if a.op in ("B", "I") and plan.swap_bytes > 0:
            done = self.start_once(("swapin", r, s, mb), self.swap_in(r, s, gpu, plan, mb))
            yield from self.wait(done, gpu, f"wait swap-in {a}", **meta)
        if plan.fetch_bytes > 0:
            yield from self.wait(self.start_once(("fetch", r, s, str(a)),
                                                 self.fetch(gpu, plan, a, s, r)),
                                 gpu, f"wait fetch {a}", **meta)
        if a.op in ("B", "I") and (plan.recompute_s > 0 or plan.rebuild_bytes > 0):
            self.ledger.change(self.env.now, gpu, plan.rebuild_bytes, "activations",
                               f"recompute {a}")
            yield from self.compute(gpu, "recompute", f"R{a}", plan.recompute_s, **meta)
        dur = inp.costs[s].bwd_s if a.op == "B" else inp.costs[s].bwd_s / 2
        yield from self.compute(gpu, "compute", str(a), dur, **meta)
        now = self.env.now
        if plan.fetch_bytes > 0:
            self.ledger.change(now, gpu, -plan.fetch_live, "chunks", f"evict {a}")
        if a.op in ("B", "W"):
            self.ledger.change(now, gpu, -plan.fwd_alloc_bytes, "activations", f"free {a}")
            self.bwd_done[(r, s)] = self.bwd_done.get((r, s), 0) + 1
            if plan.writeback_bytes > 0:
                self.writeback(r, s, gpu, plan, a, meta)
        if a.op in ("B", "I"):
            if s < inp.stages - 1:
                self.ledger.change(now, gpu, -inp.costs[s].out_bytes, "buffers", f"grad {a}")
            if s > 0:
                self.env.process(self.send(r, s, s - 1, mb, inp.costs[s].in_bytes, "grad"))

    def send(self, r, s, dst_stage, mb, nbytes, kind):
        inp = self.inp
        src = f"gpu{inp.placement[r][s]}"
        dst = f"gpu{inp.placement[r][dst_stage]}"
        op = "F" if kind == "act" else "B"
        yield from self.transfer(src, dst, nbytes, "transfer", f"{s}{op}{mb} {src}->{dst}",
                                 "send", stage=s, microbatch=mb,
                                 iteration=mb // inp.microbatches, replica=r)
        self.ledger.change(self.env.now, dst, nbytes, "buffers", f"recv {kind} {dst_stage}/{mb}")
        self.box((kind, r, dst_stage, mb)).succeed()

    def step(self, r, s, gpu, plan: StagePlan, a: Action, meta):
        yield from self.wait_writebacks(r, s, gpu, meta)
        dp = self.inp.dp_width > 1
        if dp:
            kind = "reduce_scatter" if plan.dp_sharded else "allreduce"
            yield from self.collective(r, s, a.microbatch, plan, meta, kind)
        for t in plan.step_transfers_before:
            yield from self.copy(t, meta)
        if plan.host_optimizer_s > 0:
            yield from self.host_step(r, s, plan, meta)
        for t in plan.step_transfers_after:
            yield from self.copy(t, meta)
        yield from self.compute(gpu, "optimizer", f"{s}STEP{a.microbatch}", plan.optimizer_s,
                                **meta)
        if dp and plan.dp_sharded:
            yield from self.collective(r, s, a.microbatch, plan, meta, "all_gather")
        done = self.bwd_done.get((r, s), 0)
        if done % self.inp.microbatches == 0:  # iteration boundary: m backwards since the last
            self.step_end[(r, s, done // self.inp.microbatches - 1)] = self.env.now


def simulate(inp: SimInput) -> EventLog:
    """Run one configuration to completion and return its event log.

    Raises:
        ValueError: the program deadlocks (an action waits for data nobody sends).
    """
    log = _Engine(inp).run()
    expected = sum(1 for rank in inp.program for a in rank if a.op == STEP) * inp.dp_width
    done = sum(1 for e in log.events if e.kind == "optimizer")
    if done < expected:
        raise ValueError(f"the schedule deadlocked: {done} of {expected} optimizer steps ran")
    return log

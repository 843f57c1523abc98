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
``action_overhead_s`` lengthens each F, B and I. Memory is recorded in a
:class:`~sim.ledger.Ledger`; an over-subscribed device is a verdict, not a crash.

The parts are composed in :mod:`sim.engine.parts`; each action runs as
:mod:`sim.engine.actions` says, an overlapped pair as :mod:`sim.engine.pairs` says; this
module starts every rank's process, runs it to the end and records each iteration's end.

The core does no I/O and reads no clock: the same :class:`SimInput` gives the same event log.
Python's garbage collector is paused while the simulation runs (it allocates many small
objects and frees them by reference counting; the cycle collector only costs time there).
"""

from __future__ import annotations

import gc

from sim.engine.actions import ActionRuns
from sim.engine.drive import run_to_end
from sim.engine.inputs import SimInput
from sim.engine.pairs import PairRuns
from sim.engine.parts import compose
from sim.engine.replicas import StageReplica, stage_replicas
from sim.engine.step import step_ends, step_group
from sim.events import EventKind, EventLog, MemCategory
from sim.schedules.action import STEP, Action


class Engine:
    """One run: the composed parts and the stage-replica processes."""

    def __init__(self, inp: SimInput):
        self.inp = inp
        parts = compose(inp)
        self.env, self.ledger, self.log = parts.env, parts.ledger, parts.log
        self.exchanges, self.traffic = parts.exchanges, parts.traffic
        self.partitioned, self.stepper = parts.partitioned, parts.stepper
        self.actions = ActionRuns(inp, parts)
        self.pairs = PairRuns(inp, parts, self.actions, self._rep)
        self._step_end: dict[tuple[int, int, int, int], float] = {}
        self._reps: dict[tuple[int, int, int], StageReplica] = {}

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
            run_to_end(self.env)  # env.run(), its step inline (sim.engine.drive)
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
                yield from self.pairs.overlap_pair(first, a.sub_actions, ends)
            elif a.op == "F":
                yield from self.actions.forward(rep, a, rep.tags(a.microbatch, a.microbatch // m))
            elif a.op in ("B", "I", "W"):
                tags = rep.tags(a.microbatch, a.microbatch // m)
                yield from self.actions.backward(rep, a, tags, ends.get(a))

    def step(self, first: StageReplica, steps: tuple[Action, ...]):
        """Process: the optimizer step of ``first``'s rank over its stage chunks (``steps``:
        their STEP actions, :func:`~sim.engine.step.step_group`; :mod:`sim.engine.step`),
        then the iteration's end for each chunk whose m-th backward it follows."""
        reps = [self._rep(first, a) for a in steps]
        yield from self.stepper.run(reps, steps[0].microbatch)
        for rep in reps:
            done = self.actions.bwd_done.get(rep.key, 0)
            if done % self.inp.microbatches == 0:  # iteration boundary: m backwards since
                self._step_end[(*rep.key, done // self.inp.microbatches - 1)] = self.env.now


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

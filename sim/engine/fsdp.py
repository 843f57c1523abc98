"""FSDP2's per-unit all-gathers and reduce-scatters in the engine (plans of :mod:`sim.memory.fsdp`).

A stage whose plan has FSDP units (:attr:`~sim.memory.plan.StagePlan.fsdp`) runs its forward
and its backward unit by unit (torch 2.13 ``torch/distributed/fsdp/_fully_shard/``,
``_fsdp_param_group.py``; the research note's section numbers in brackets):

* **Forward** (implicit prefetch, §4.3): a unit's all-gather runs on its own stream, after the
  previous unit's; the compute waits for it, copies it out (the unit's unsharded parameters
  appear) and the next unit's all-gather starts then (``pre_forward`` unshards the unit and
  ``wait_for_unshard`` frees the previous unit's all-gather output, letting the next one
  start: one unit ahead). After the unit's compute its parameters are freed
  (``reshard_after_forward`` True), kept (False) or kept at ``1/k`` (an int).
* **Backward** (§4.3, ``_prefetch_unshard``): units in reverse; a resharded unit is gathered
  again (over ``k`` ranks for an int), the next one (the previous in forward order) one
  unit ahead. After the unit's backward its gradients go into a ``reduce_dtype``
  reduce-scatter input and are reduce-scattered over the shard group on their own stream; one
  such buffer may be in flight (``reduce_scatter_max_input_buffers = 1``, §4.4), so the
  compute waits for the previous unit's reduce-scatter before copying in. The all-gather's
  copy-out and the reduce-scatter's copy-in take the compute stream where the plan times them
  (:attr:`~sim.memory.fsdp_units.FsdpPlan.copy_Bps`, torch FSDP2). With HSDP the
  reduce-scatter's output is then all-reduced over the replicate group on a third stream.
  The unit is resharded after its backward.
* **With pipeline parallelism** (:attr:`~sim.memory.fsdp.FsdpPlan.accumulate`, §4.4 "PP"): the
  units are gathered at the stage's first forward of the step and stay unsharded; each
  backward accumulates into unsharded ``reduce_dtype`` gradients; at the step every unit is
  reduce-scattered (and, with HSDP, all-reduced), one after another, before the update.

The routed experts of a unit are gathered and reduced over their own shard group
(:func:`~sim.parallel.folding.expert_shard_group`). Collectives are timed by the group's
:func:`~sim.comm.hierarchical.collective_plan` and hold its links; mirrored runs
(:mod:`sim.engine.symmetry`) wait only for the simulated members. Memory: the all-gather
output (``buffers``), the unsharded parameters (``weights``), the unit's gradients and
reduce-scatter input (``gradients``), each charged and freed when the above happens.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import simpy

from sim.engine.inputs import SimInput
from sim.engine.joined import JoinedCollectives
from sim.engine.links import Links
from sim.engine.replicas import StageReplica
from sim.engine.streams import ComputeStream
from sim.engine.symmetry import HeldLinks
from sim.events import EventKind, MemCategory
from sim.ledger import Ledger
from sim.memory.fsdp_units import FsdpPlan, FsdpUnit
from sim.parallel.folding import expert_replicate_group, expert_shard_group
from sim.schedules.action import Action

UnitRunner = Callable[[FsdpUnit, bool], Generator]
"""``run(unit, last)``: the process that computes ``unit``'s layers (``last``: the action's
last unit, which carries its runtime overhead)."""

AG, RS, AR = EventKind.ALL_GATHER, EventKind.REDUCE_SCATTER, EventKind.ALLREDUCE


class FsdpRuns:
    """The FSDP collectives and unsharded memory of one run (module doc).

    Args:
        env: the simulation environment.
        inp: the configuration (its layout's shard and replicate groups).
        links: the link resources collectives hold.
        ledger: the memory ledger.
        compute: the compute streams (stalls are logged on them).
    """

    def __init__(
        self,
        env: simpy.Environment,
        inp: SimInput,
        links: Links,
        ledger: Ledger,
        compute: ComputeStream,
    ):
        self.env, self.inp, self.links, self.ledger, self.compute = env, inp, links, ledger, compute
        self.held = HeldLinks(inp)
        self._joined = JoinedCollectives(env, inp, links, self.held)
        self._ag_tail: dict[tuple, simpy.Process] = {}
        self._rs_tail: dict[tuple, simpy.Process] = {}
        self._pending: dict[tuple, list[simpy.Process]] = {}
        self._live: dict[tuple, str] = {}
        self._accumulated: set[tuple] = set()
        self._rs_held: dict[tuple, float] = {}

    # -- groups -------------------------------------------------------------------------
    def _groups(self, rep: StageReplica, unit: FsdpUnit, kind: str, world: int = 0):
        """``[(members, nbytes)]`` of ``unit``'s ``kind`` collective for ``rep``: the dense part
        over the shard group (its first ``world`` ranks' block for a partial reshard), the
        experts' over theirs; the HSDP all-reduce over the replicate groups."""
        fs = _fs(rep)
        lay, r, k = self.inp.layout, rep.replica, rep.tp_rank
        per = fs.param_bytes if kind == AG else fs.reduce_bytes
        if kind == AR:
            dense = tuple((x, k) for x in lay.replicate_group(r))
            parts = [(dense, unit.params * per / fs.shard)]
            if unit.expert_params:
                parts.append(
                    (expert_replicate_group(lay, r, k), unit.expert_params * per / fs.expert_shard)
                )
            return [(m, b) for m, b in parts if len(m) > 1 and b > 0]
        shard = lay.shard_group(r)
        if world:
            shard = tuple(x for x in shard if x // world == r // world)
        parts = [(tuple((x, k) for x in shard), unit.params * per)]
        if unit.expert_params:
            parts.append((expert_shard_group(lay, r, k), unit.expert_params * per))
        return [(m, b) for m, b in parts if len(m) > 1 and b > 0]

    def _collective(
        self, rep: StageReplica, i: int, label: str, kind: str, tags: dict, world: int = 0
    ):
        """Process: ``rep`` joins each part of unit ``i``'s ``kind`` collective ``label``
        (module doc); returns when every part has run."""
        unit = _fs(rep).units[i]
        for members, nbytes in self._groups(rep, unit, kind, world):
            gpus = tuple(f"gpu{self.inp.gpu_index(r, rep.stage, k)}" for r, k in members)
            yield from self._joined.join(
                rep,
                (rep.stage, label, kind, members[0], members[-1]),
                self.held.members(members),
                self._joined.plan(gpus),
                kind=kind,
                nbytes=nbytes,
                name=f"fsdp {kind} s{rep.stage} {label}",
                tags=tags,
            )

    # -- all-gathers --------------------------------------------------------------------
    def _gather(self, rep: StageReplica, i: int, label: str, tags: dict, world: int = 0):
        """Start unit ``i``'s all-gather after ``rep``'s previous one (its stream)."""
        prev = self._ag_tail.get(rep.key)
        proc = self.env.process(self._run_gather(rep, i, label, tags, prev, world))
        self._ag_tail[rep.key] = proc
        return proc

    def _run_gather(self, rep, i, label, tags, prev, world):
        if prev is not None and not prev.triggered:
            yield prev
        fs = _fs(rep)
        out = fs.unsharded_bytes(fs.units[i])
        self.ledger.change(self.env.now, rep.gpu, out, MemCategory.BUFFERS, f"fsdp ag {label}")
        yield from self._collective(rep, i, label, AG, tags, world)

    def _unshard(self, rep: StageReplica, i: int, label: str, proc, prev_out: float, tags):
        """Process: the compute waits for unit ``i``'s all-gather, copies it out (its
        parameters appear) and frees the previous unit's all-gather output."""
        fs = _fs(rep)
        yield from self.compute.wait(proc, rep.gpu, f"wait fsdp ag {label}", **tags)
        copy_s = fs.copy_out_s(fs.units[i])
        if copy_s:  # FsdpPlan.copy_Bps: the copy-out on the compute stream
            yield from self.compute.run(
                rep.gpu, EventKind.COMPUTE, f"fsdp copy-out {label}", copy_s, **tags
            )
        now = self.env.now
        held = fs.held_bytes(fs.units[i]) if self._live.get((*rep.key, i)) == "partial" else 0.0
        self.ledger.change(
            now,
            rep.gpu,
            fs.unsharded_bytes(fs.units[i]) - held,
            MemCategory.WEIGHTS,
            f"fsdp unshard {label}",
        )
        if prev_out:
            self.ledger.change(
                now, rep.gpu, -prev_out, MemCategory.BUFFERS, f"fsdp ag free {label}"
            )
        self._live[(*rep.key, i)] = "full"

    def _needs(self, rep: StageReplica, i: int) -> str:
        """``"full"``, ``"partial"`` (gather over the reshard world) or ``""``."""
        state = self._live.get((*rep.key, i), "")
        return "" if state == "full" else "partial" if state == "partial" else "full"

    # -- actions ------------------------------------------------------------------------
    def forward(self, rep: StageReplica, a: Action, tags: dict, run: UnitRunner):
        """Process: ``rep``'s forward ``a`` unit by unit (module doc)."""
        fs = _fs(rep)
        order = range(len(fs.units))
        yield from self._pass(rep, a, tags, run, list(order), "F")

    def backward(self, rep: StageReplica, a: Action, tags: dict, run: UnitRunner):
        """Process: ``rep``'s backward ``a`` unit by unit in reverse (module doc)."""
        fs = _fs(rep)
        yield from self._pass(rep, a, tags, run, list(reversed(range(len(fs.units)))), "B")

    def _pass(self, rep, a, tags, run, order: list[int], op: str):
        fs = _fs(rep)
        procs: dict[int, tuple] = {}

        def start(i: int) -> None:
            need = self._needs(rep, i)
            if need and i not in procs:
                world = fs.units[i].reshard if need == "partial" else 0
                label = f"{a}u{i}"
                procs[i] = (self._gather(rep, i, label, tags, int(world)), label)

        prev_out = 0.0
        if order:
            start(order[0])
        for n, i in enumerate(order):
            unit = fs.units[i]
            if i in procs:
                proc, label = procs[i]
                yield from self._unshard(rep, i, label, proc, prev_out, tags)
                prev_out = fs.unsharded_bytes(unit)
                if op == "B":  # freed at its copy-out in backward (wait_for_unshard)
                    self.ledger.change(
                        self.env.now,
                        rep.gpu,
                        -prev_out,
                        MemCategory.BUFFERS,
                        f"fsdp ag free {label}",
                    )
                    prev_out = 0.0
            if n + 1 < len(order):
                start(order[n + 1])
            if op == "B":
                grads = unit.elements * fs.param_bytes
                self.ledger.change(
                    self.env.now, rep.gpu, grads, MemCategory.GRADIENTS, f"fsdp grads {a}u{i}"
                )
            yield from run(unit, n + 1 == len(order))
            if op == "F":
                self._after_forward(rep, a, i)
            else:
                yield from self._after_backward(rep, a, i, tags, n + 1 == len(order))
        if prev_out:
            self.ledger.change(
                self.env.now, rep.gpu, -prev_out, MemCategory.BUFFERS, f"fsdp ag free {a}"
            )

    def _after_forward(self, rep: StageReplica, a: Action, i: int) -> None:
        """``reshard_after_forward`` of unit ``i`` (kept whole with accumulation)."""
        fs = _fs(rep)
        unit = fs.units[i]
        if fs.accumulate or unit.reshard is False:
            return
        full = fs.unsharded_bytes(unit)
        kept = 0.0 if unit.reshard is True else fs.held_bytes(unit)
        label = f"fsdp reshard {a}u{i}"
        self.ledger.change(self.env.now, rep.gpu, kept - full, MemCategory.WEIGHTS, label)
        self._live[(*rep.key, i)] = "partial" if kept else ""

    def _after_backward(self, rep: StageReplica, a: Action, i: int, tags: dict, last: bool):
        """Process: unit ``i``'s gradients accumulated (with PP) or reduce-scattered, the unit
        resharded (module doc). As ``post_backward`` does (``_fsdp_param_group.py`` 588-720):
        the unit is resharded, the previous unit's reduce-scatter input dropped (kept until
        now by ``reduce_scatter_states``), this unit's copied in; the ``last`` one of the pass
        is dropped when its reduce-scatter ends (the final callback, ``_fsdp_state.py``
        420-431)."""
        fs = _fs(rep)
        unit, now = fs.units[i], self.env.now
        grads = unit.elements * fs.param_bytes
        if fs.accumulate:
            key = (*rep.key, i)
            if key not in self._accumulated:
                self._accumulated.add(key)
                self.ledger.change(
                    now, rep.gpu, fs.grad_bytes(unit), MemCategory.GRADIENTS, f"fsdp acc u{i}"
                )
            self.ledger.change(now, rep.gpu, -grads, MemCategory.GRADIENTS, f"fsdp acc {a}u{i}")
            return
        label = f"{a}u{i}"
        full = -fs.unsharded_bytes(unit)
        self.ledger.change(now, rep.gpu, full, MemCategory.WEIGHTS, f"fsdp reshard {label}")
        self._live[(*rep.key, i)] = ""
        prev = self._rs_tail.get(rep.key)
        if prev is not None and not prev.triggered:  # one reduce-scatter input in flight
            yield from self.compute.wait(prev, rep.gpu, f"wait fsdp rs {label}", **tags)
        copy_s = fs.copy_in_s(unit)
        if copy_s:  # FsdpPlan.copy_Bps: the reduce-scatter copy-in on the compute stream
            yield from self.compute.run(
                rep.gpu, EventKind.COMPUTE, f"fsdp copy-in {label}", copy_s, **tags
            )
        held = self._rs_held.pop(rep.key, 0.0)
        now = self.env.now
        self.ledger.change(now, rep.gpu, -held, MemCategory.GRADIENTS, f"fsdp rs drop {label}")
        self.ledger.change(
            now, rep.gpu, fs.grad_bytes(unit), MemCategory.GRADIENTS, f"fsdp rs {label}"
        )
        self.ledger.change(now, rep.gpu, -grads, MemCategory.GRADIENTS, f"fsdp grads free {label}")
        if not last:
            self._rs_held[rep.key] = fs.grad_bytes(unit)
        proc = self.env.process(self._reduce(rep, label, i, tags, last))
        self._rs_tail[rep.key] = proc
        self._pending.setdefault(rep.key, []).append(proc)

    def _reduce(self, rep: StageReplica, label: str, i: int, tags: dict, free: bool):
        """Process: unit ``i``'s reduce-scatter (its input freed after it when ``free``, else
        by the next unit's post-backward), then its HSDP all-reduce on a stream of its own
        (waited for at the step)."""
        fs = _fs(rep)
        yield from self._collective(rep, i, label, RS, tags)
        if free:
            self.ledger.change(
                self.env.now,
                rep.gpu,
                -fs.grad_bytes(fs.units[i]),
                MemCategory.GRADIENTS,
                f"fsdp rs done {label}",
            )
        if self._groups(rep, fs.units[i], AR):
            self._pending.setdefault(rep.key, []).append(
                self.env.process(self._collective(rep, i, label, AR, tags))
            )

    # -- the step -----------------------------------------------------------------------
    def at_step(self, rep: StageReplica, k: int, tags: dict):
        """Process: before ``rep``'s update at step ``k``: with accumulation every unit's
        reduce-scatter (last unit first, one after another) and all-reduce, its unsharded
        parameters and gradients freed; then every pending reduction of the step."""
        fs = _fs(rep)
        if fs.accumulate:
            for i in reversed(range(len(fs.units))):
                label = f"STEP{k}u{i}"
                yield from self._collective(rep, i, label, RS, tags)
                unit, now = fs.units[i], self.env.now
                if (*rep.key, i) in self._accumulated:
                    self._accumulated.discard((*rep.key, i))
                    delta = -fs.grad_bytes(unit)
                    self.ledger.change(
                        now, rep.gpu, delta, MemCategory.GRADIENTS, f"fsdp rs {label}"
                    )
                if self._live.pop((*rep.key, i), ""):
                    delta = -fs.unsharded_bytes(unit)
                    self.ledger.change(
                        now, rep.gpu, delta, MemCategory.WEIGHTS, f"fsdp reshard {label}"
                    )
                if self._groups(rep, unit, AR):
                    self._pending.setdefault(rep.key, []).append(
                        self.env.process(self._collective(rep, i, label, AR, tags))
                    )
        pending = self._pending.pop(rep.key, [])
        if pending:
            yield from self.compute.wait(
                self.env.all_of(pending), rep.gpu, f"wait fsdp reduce {k}", **tags
            )


def _fs(rep: StageReplica) -> FsdpPlan:
    """``rep``'s FSDP units (the engine calls :class:`FsdpRuns` only for plans with them)."""
    fs = rep.plan.fsdp
    assert fs is not None
    return fs

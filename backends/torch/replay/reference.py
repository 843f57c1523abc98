"""The numerics check of a replay: the same model, seed and data in one process (the reference).

A replay (our runtime or torch's) writes, at every optimizer step, the gradient each rank
applies to each parameter, and every micro-batch's loss (:mod:`backends.torch.replay.dumps`).
:func:`check` rebuilds the model in one process
(:class:`~backends.torch.models.replay_model.ReplayModel`: the same function, seed and
micro-batches), trains it with the same SGD and compares.

The reference keeps the staleness of the schedule being replayed, from its action lists
(``sim.schedules``) and its :attr:`~sim.schedules.base.Schedule.weight_rule`: stage ``s``'s
forward of micro-batch ``i`` uses the weight version ``vF`` = the number of optimizer steps of
stage ``s`` before that forward in its rank's program, its backward ``vF`` again (``forward``:
GPipe, 1F1B and every flushed schedule, where ``vF`` is the iteration; PipeDream's stash), or
``vB`` = the steps before the backward (``latest``: PipeMare, the backward sees the updated
weights with the stashed activations), or ``W(k-1)`` for iteration ``k`` (``previous_iteration``:
PipeDream-2BW, ``W(k+1) = W(k) - lr grad f(W(k-1))``, Narayanan et al. ICML'21 §3.1); the
gradient goes into the stage's next step after the backward. Every layer runs through
``torch.func.functional_call`` on leaf tensors of its stage's version, so a parameter two stages
share (a tied embedding) may be at two versions in one micro-batch, and its gradient is the sum
over its holders, which is what the replay's tied all-reduce sums. Torch's runtimes flush, so
their versions are the iteration. Every step's gradient is summed in the replay's order
(:mod:`backends.torch.replay.accumulation`: each rank's backwards in its program order, then the
holders' sums in rank order), so reordered sums are not among the differences.

Tolerance (:func:`tolerance`): the replay runs the same operators on the same values and the
reference sums the gradients in the replay's order and runs with the replay's thread count
(:func:`check`); what may still differ is kernels (a stage module against one layer at a time,
gloo's ring over three or more holders), each a relative rounding of ``n u`` for an ``n``-term
sum with unit roundoff ``u`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
§4.2: ``u = 2^-24`` in fp32, ``2^-8`` in bf16, ``2^-11`` in fp16), compounded over the layers
and the steps. The error is relative to the largest entry of the reference gradient. A model
whose weights feed back on themselves (a head tied to its embedding) magnifies any
rounding difference from step to step, so the reference does the replay's arithmetic rather
than an equivalent one: before it did (``w - lr g`` against torch's fused update, micro-batch
order against the replay's per-holder sums), a 6-layer tied encoder's one-ulp differences grew
from 2e-6 after one step to 2.2e-4 after six, above the fp32 bound (issue 30, item 2); on one
CPU thread the two are now equal to the bit (``tests/test_numerics.py``). Errors are
``max |replay - reference| / max |reference|`` per gradient tensor (and per loss). A missing
tied all-reduce (half a gradient) or a wrong weight version gives errors orders of magnitude
above these bounds (``tests/test_numerics.py``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import torch
from torch.func import functional_call

from backends.torch.models.load import load_model
from backends.torch.models.replay_model import ReplayModel
from backends.torch.models.shared_params import canonical_names
from backends.torch.models.transformer import stage_ranges
from backends.torch.replay.accumulation import Position, accumulation, total
from backends.torch.replay.dumps import Dumps, load_dumps
from backends.torch.replay.job import ReplayJob
from backends.torch.replay.versions import sgd_update
from backends.torch.replay.worker import RankContext
from sim.parallel.partition import uniform_partition
from sim.schedules.action import STEP
from sim.schedules.registry import get_schedule

TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}
"""Largest relative error accepted per dtype: about ``1700 u`` (``u``: unit roundoff, module
docstring) for fp32, ``13 u`` / ``20 u`` for bf16 / fp16, whose few mantissa bits leave less room
between rounding and a real discrepancy. Correct CPU replays of the examples on one thread show
0 in fp32 (the reference does the replay's arithmetic, module docstring), with more threads
1e-7 to 1e-6 (100x below); a wrong weight version at the numerics run's learning rate shows 3e-3 or
more, a missing tied all-reduce above 0.1 (``tests/test_numerics.py``). The 16-bit bounds are
assumptions not yet measured (CPU runs here are fp32)."""
TINY = 1e-30


def tolerance(dtype: str) -> float:
    """The largest relative error a correct replay in ``dtype`` shows (:data:`TOLERANCE`)."""
    return TOLERANCE[dtype]


def versions(job: ReplayJob) -> tuple[dict, dict, dict, float]:
    """Per ``(stage, micro-batch)``: the forward's and the backward's weight version and the
    step its gradient goes into; and the scale of the loss before its backward (module
    docstring; 1 for torch's runtimes, which divide the summed gradient by ``m`` instead,
    :class:`~backends.torch.replay.accumulation.Accumulation`).

    Raises:
        ValueError: an action the reference cannot place (a split backward in our runtime).
    """
    sched = get_schedule(job.schedule)(job.stages, job.microbatches, job.virtual_stages)
    total, m = job.warmup_iterations + job.iterations, job.microbatches
    n = sched.num_stages
    if job.backend == "torch":  # torch's runtimes flush: everything at the iteration
        it = {(s, i): i // m for s in range(n) for i in range(total * m)}
        return it, dict(it), dict(it), 1.0
    v_f, v_b, into = {}, {}, {}
    for program in sched.program(total):
        steps: Counter[int] = Counter()
        for a in program:
            if a.op == STEP:
                steps[a.stage] += 1
            elif a.op == "F":
                v_f[(a.stage, a.microbatch)] = steps[a.stage]
            elif a.op == "B":
                v_b[(a.stage, a.microbatch)] = into[(a.stage, a.microbatch)] = steps[a.stage]
            else:
                raise ValueError(f"action {a}: the numerics reference runs F, B and STEP")
    rule = sched.weight_rule
    if rule == "previous_iteration":
        v_f = {k: max(k[1] // m - 1, 0) for k in v_f}
        v_b = dict(v_f)
    elif rule == "forward":
        v_b = dict(v_f)
    last = sched.program(total)[sched.stage_rank(n - 1)]
    backwards = sum(1 for a in last[: _first_step(last)] if a.op == "B")  # per step, as run
    return v_f, v_b, into, 1.0 / max(backwards, 1)


def _first_step(program: list) -> int:
    return next((i for i, a in enumerate(program) if a.op == STEP), len(program))


class Reference:
    """The one-process run (module docstring): losses per micro-batch, gradients per step.

    Args:
        job: the replayed job (model, partition, schedule, lr, iterations).
        model: its model, built here whole.
    """

    def __init__(self, job: ReplayJob, model: ReplayModel):
        self.job, self.model = job, model
        sched = get_schedule(job.schedule)(job.stages, job.microbatches, job.virtual_stages)
        self.chain = model.layers(range(model.n_layers))
        bounds = list(job.boundaries or uniform_partition(model.n_layers, sched.num_stages))
        ranges = stage_ranges(bounds[: sched.num_stages], model.n_layers)
        self.stage_of = [
            next(s for s, r in enumerate(ranges) if i in r) for i in range(len(self.chain))
        ]
        self.names = canonical_names(self.chain)
        self.v_f, self.v_b, self.into, self.scale = versions(job)
        self.order = accumulation(job)
        self.history: dict[str, list[torch.Tensor]] = {
            self.names[id(p)]: [p.detach().clone()]
            for layer in self.chain
            for p in layer.parameters()
        }
        self.grads: dict[tuple[int, str], torch.Tensor] = {}
        self.terms: dict[tuple[int, str], list[tuple[Position, torch.Tensor]]] = {}
        """Per ``(step, name)``: each backward's contribution and where the replay adds it."""
        self.parts: dict[tuple[int, int, str], torch.Tensor] = {}
        """Per ``(step, stage, name)``: one holder's share of a gradient, summed in micro-batch
        order and before torch's division by ``m`` (``grads`` sums the shares as the replay
        does)."""
        self.losses: dict[int, float] = {}
        self.pending: Counter[tuple[int, str]] = Counter()
        held = {s: self._stage_names(s) for s in set(self.stage_of)}
        for (s, _), j in self.into.items():
            for name in held.get(s, ()):
                self.pending[(j, name)] += 1

    def _stage_names(self, stage: int) -> set[str]:
        return {
            self.names[id(p)]
            for i, layer in enumerate(self.chain)
            if self.stage_of[i] == stage
            for p in layer.parameters()
        }

    def value(self, name: str, version: int) -> torch.Tensor:
        """Parameter ``name`` after ``version`` steps (SGD on the summed gradients, computed
        as the replay computes it: :func:`~backends.torch.replay.versions.sgd_update`).

        Raises:
            RuntimeError: a step it needs still waits for a backward (an order bug).
        """
        hist = self.history[name]
        while len(hist) <= version:
            j = len(hist) - 1
            if self.pending[(j, name)]:
                raise RuntimeError(f"version {j + 1} of {name} needs a backward not yet run")
            g = self.grads.get((j, name))
            hist.append(hist[-1] if g is None else sgd_update(hist[-1], g, self.job.lr))
        return hist[version]

    def run(self) -> None:
        """Every micro-batch of ``warmup + iterations`` iterations, in order."""
        total = (self.job.warmup_iterations + self.job.iterations) * self.job.microbatches
        for mb in range(total):
            self._microbatch(mb)

    def _microbatch(self, mb: int) -> None:
        inputs, target = self.model.batch(mb)
        dev = self.history[next(iter(self.history))][0].device
        inputs = tuple(t.to(dev) for t in inputs)
        leaves: dict[tuple[int, str], torch.Tensor] = {}
        xs: tuple[torch.Tensor, ...] = inputs
        for i, layer in enumerate(self.chain):
            s = self.stage_of[i]
            values = {}
            for local, p in layer.named_parameters():
                key = (s, self.names[id(p)])
                if key not in leaves:
                    version = self.v_f[(s, mb)]
                    leaves[key] = self.value(key[1], version).clone().requires_grad_()
                values[local] = leaves[key]
            xs = (functional_call(layer, values, xs),)
        loss = self.model.loss(xs[0], target)
        self.losses[mb] = float(loss.detach())
        for (s, name), leaf in leaves.items():  # PipeMare's backward sees newer weights
            if self.v_b[(s, mb)] != self.v_f[(s, mb)]:
                leaf.data.copy_(self.value(name, self.v_b[(s, mb)]))
        (loss * self.scale).backward()
        for (s, name), leaf in leaves.items():
            key = (self.into[(s, mb)], name)
            self.pending[key] -= 1
            g = leaf.grad
            if g is not None:
                self.terms.setdefault(key, []).append((self.order.position[(s, mb)], g))
                part = (key[0], s, name)
                prev = self.parts.get(part)
                self.parts[part] = g if prev is None else prev + g
            if not self.pending[key] and key in self.terms:  # the step's last contribution
                self.grads[key] = total(self.terms.pop(key), self.order.divisor)


def _finite(err: float) -> float:
    """``err``, or infinity when it is not a number (a NaN loss or gradient fails)."""
    return err if math.isfinite(err) else math.inf


def compare(dumps: Dumps, ref: Reference, tol: float) -> dict[str, Any]:
    """Relative errors of the replay's losses and gradients against the reference.

    Returns:
        ``numerics`` (``ok`` / ``FAILED``), ``loss_max_error``, ``grad_max_error``,
        ``grad_worst`` (step and parameter), ``loss_errors_by_iteration``,
        ``checked_steps``, ``checked_gradients``, ``missing`` (reference gradients the replay
        did not apply), ``tolerance``.
    """
    m = ref.job.microbatches
    by_iter: dict[int, float] = defaultdict(float)
    for mb, loss in dumps.losses.items():
        rl = ref.losses[mb]
        by_iter[mb // m] = max(by_iter[mb // m], _finite(abs(loss - rl) / max(abs(rl), TINY)))
    worst, where, checked, missing = 0.0, "", 0, []
    r: torch.Tensor
    for (j, name), r in sorted(ref.grads.items()):
        got = dumps.grads.get(j, {}).get(name)
        if not got:
            if float(r.abs().max()) > 0:
                missing.append(f"step {j} {name}")
            continue
        scale = max(float(r.abs().max()), TINY)
        for g in got:
            checked += 1
            err = _finite(float((g.float() - r.float()).abs().max()) / scale)
            if err > worst or not where:
                worst, where = err, f"step {j} {name}"
    loss_err = max(by_iter.values(), default=0.0)
    ok = not missing and worst <= tol and loss_err <= tol and bool(dumps.losses or ref.losses)
    return {
        "numerics": "ok" if ok else "FAILED",
        "loss_max_error": loss_err,
        "grad_max_error": worst,
        "grad_worst": where,
        "loss_errors_by_iteration": [by_iter[k] for k in sorted(by_iter)],
        "checked_steps": len(dumps.grads),
        "checked_gradients": checked,
        "missing": missing[:5],
        "tolerance": tol,
    }


def check(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function (one process, :func:`backends.torch.replay.launch.run_ranks`): build the
    reference of ``payload["job"]`` and compare it with the dumps in its ``dump_dir``."""
    job = ReplayJob.from_dict(payload["job"])
    model = load_model(job)
    if model.random_layers:
        return {
            "numerics": "skipped",
            "reason": f"random layers (dropout) in {model.random_layers[:3]}: a replay and a "
            "reference cannot draw the same numbers; set their probability to 0 to check",
        }
    torch.manual_seed(job.seed)
    for layer in model.layers(range(model.n_layers)):
        layer.to(ctx.device)
    ref = Reference(job, model)
    with torch.random.fork_rng(devices=[]):
        ref.run()
    return compare(load_dumps(str(job.dump_dir)), ref, tolerance(job.dtype))

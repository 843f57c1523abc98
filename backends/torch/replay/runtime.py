"""Our pipeline runtime: one rank executes its action list from the simulator, exactly.

:func:`run_rank` is the rank function :func:`backends.torch.replay.launch.replay` starts on every
rank (``backend="ours"``). It builds stage ``rank`` of the model, takes the program of
``sim.schedules.registry.get_schedule(name)(p, m).program(warmup + iterations)`` for its rank
and runs it in order:

* ``F mb``: receive the activation from rank ``s-1`` (blocking ``dist.recv``; stage 0 makes the
  micro-batch's token ids), run the forward on the version the schedule picks
  (:mod:`backends.torch.replay.versions`) under the memory policy, keep (input, output) for the
  backward, and send the output to rank ``s+1`` with ``dist.isend`` (the last stage computes the
  loss, divided by the micro-batches per step).
* ``B mb``: receive the output gradient from rank ``s+1`` (the last stage starts from its loss),
  run ``torch.autograd.backward``, send the input gradient to rank ``s-1`` with ``isend``.
* ``STEP k``: SGD step of the version policy, after waiting for outstanding sends; its time is
  recorded (after ``torch.cuda.synchronize`` on GPUs).

Messages are tagged with the micro-batch (gloo matches by tag; NCCL by order, which is the
same on both ends for every schedule here). Activations always have shape
``[b, seq_len, hidden]``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist

from backends.torch.models.attention import attention_kernel
from backends.torch.models.load import load_model
from backends.torch.models.replay_model import ReplayModel
from backends.torch.models.transformer import stage_ranges
from backends.torch.parallel.ties import Ties
from backends.torch.profile.layers import device_model_name
from backends.torch.profile.saved_bytes import SavedBytes, saved_context, tensor_bytes
from backends.torch.replay.cpu_memory import ResidentPeak, rehearse, stage_input
from backends.torch.replay.dumps import save_end, save_step
from backends.torch.replay.job import ReplayJob
from backends.torch.replay.memory import apply_policy, offloading
from backends.torch.replay.versions import make_versions
from backends.torch.replay.worker import RankContext
from sim.parallel.partition import uniform_partition
from sim.schedules.action import STEP, Action
from sim.schedules.registry import get_schedule


def stage_setup(
    job: ReplayJob, stages: list[int], distributed: bool
) -> tuple[ReplayModel, list[int], dict[int, Any], Ties]:
    """The model, the partition, this rank's stage modules (on CPU) and its tied
    all-reduces: what every runtime builds first.

    The model's other layers are dropped (:meth:`ReplayModel.release`); the boundaries are the
    job's, else the uniform partition of the ``p * v`` stages.
    """
    model = load_model(job)
    sched = get_schedule(job.schedule)(job.stages, job.microbatches, job.virtual_stages)
    n = sched.num_stages
    boundaries = list(job.boundaries or uniform_partition(model.n_layers, n))[:n]
    modules = {s: model.stage(boundaries, s) for s in stages}
    keep = {i for s in stages for i in stage_ranges(boundaries, model.n_layers)[s]}
    rank = sched.stage_rank(stages[0])
    ties = Ties(model.shared, boundaries, model.n_layers,
                [sched.stage_rank(s) for s in range(n)], rank, distributed)  # fmt: skip
    for s in range(n):  # the shapes crossing every boundary, while every layer is here
        if s:
            model.recv(boundaries, s)
    model.release(keep)
    return model, boundaries, modules, ties


def rank_program(job: ReplayJob, rank: int) -> list[Action]:
    """Rank ``rank``'s actions for ``warmup_iterations + iterations`` iterations."""
    schedule = get_schedule(job.schedule)(job.stages, job.microbatches)
    return schedule.program(job.warmup_iterations + job.iterations)[rank]


def expected_actions(job: ReplayJob, rank: int) -> Counter[str]:
    """What rank ``rank`` must execute, from the job alone (not from the program it runs).

    Every rank runs one forward and one backward of each micro-batch ``0 .. n-1``, ``n = (warmup
    + iterations) * m`` (``sim.schedules.action``: micro-batch indices are global), and the
    schedule's ``optimizer_steps(warmup + iterations)`` optimizer steps numbered from 0.

    Returns:
        Action strings (``"1F3"``, ``"1STEP0"``) with the number of times each must run.
    """
    total = job.warmup_iterations + job.iterations
    steps = get_schedule(job.schedule)(job.stages, job.microbatches).optimizer_steps(total)
    want = Counter(f"{rank}{op}{mb}" for mb in range(total * job.microbatches) for op in "FB")
    want.update(f"{rank}{STEP}{k}" for k in range(steps))
    return want


def action_tally(executed: Counter[str], expected: Counter[str]) -> tuple[dict, dict]:
    """``(counts, expected_counts)`` per op for :class:`ReplayResult`: equal only when
    ``executed`` is exactly ``expected`` (each action as often as it must run).

    ``counts`` has the executed actions per op plus ``wrong``: actions run that were not
    expected or more often than expected, and expected actions never run; ``expected_counts``
    has the expected per op and ``wrong: 0``.

    Example:
        >>> action_tally(Counter(["0F0", "0F0"]), Counter(["0F0", "0B0"]))
        ({'F': 2, 'wrong': 2}, {'B': 1, 'F': 1, 'wrong': 0})
    """

    def per_op(actions: Counter[str]) -> dict[str, int]:
        out: Counter[str] = Counter()
        for name, n in actions.items():
            out[Action.from_str(name).op] += n
        return dict(sorted(out.items()))

    wrong = sum(((executed - expected) + (expected - executed)).values())
    return {**per_op(executed), "wrong": wrong}, {**per_op(expected), "wrong": 0}


def _backwards_per_step(program: list[Action]) -> int:
    count = 0
    for a in program:
        if a.op == STEP:
            return max(count, 1)
        count += a.op in ("B", "W")
    return max(count, 1)


class StageRunner:
    """Executes one rank's program; see the module docstring.

    Args:
        job: the replay job.
        ctx: this rank's context.
    """

    def __init__(self, job: ReplayJob, ctx: RankContext):
        self.job, self.ctx = job, ctx
        # the pipeline stage; the process rank is ctx.rank (0 in a single-rank run)
        self.rank = ctx.rank if job.single_rank is None else job.single_rank
        self.last = self.rank == job.stages - 1
        self.dev = ctx.device
        self.model, boundaries, stages, self.ties = stage_setup(
            job, [self.rank], job.single_rank is None
        )
        module = stages[self.rank]
        self.names = self.model.names(module)
        self.param_bytes = tensor_bytes(module.parameters())
        self.peak = ResidentPeak(self.param_bytes + tensor_bytes(module.buffers()))
        module = module.to(self.dev)
        self.tracker = SavedBytes(module.parameters()) if self.dev.type == "cpu" else None
        self.policy = apply_policy(module, job.memory_policy, self.rank, job.stages, self.tracker)
        self.versions = make_versions(
            get_schedule(job.schedule),
            module,
            job.lr,
            job.microbatches,
            on_new=lambda m: self.tracker.exclude(m.parameters()) if self.tracker else None,
        )
        # stage 0 receives no activation, the last stage no gradient
        self.act_shape: Any = None
        self.act_dtype: Any = None
        self.out_shape: Any = None
        self.out_dtype: Any = None
        if self.rank > 0:
            self.act_shape, self.act_dtype = self.model.recv(boundaries, self.rank)
        if not self.last:
            self.out_shape, self.out_dtype = self.model.send(boundaries, self.rank)
        self.stash: dict[int, tuple[Any, torch.Tensor]] = {}
        self.pending: list[tuple[Any, torch.Tensor]] = []
        self.losses: list[tuple[int, torch.Tensor]] = []
        self.executed: Counter[str] = Counter()
        self.step_times: list[float] = []
        self.spans: list[tuple[str, float, float, float]] = []
        self.ready = 0.0  # when the running action's input had arrived
        self.scale = 1.0

    # --- communication -------------------------------------------------------------------
    def _tag(self, mb: int, backward: bool) -> int:
        return 2 * mb + int(backward) if self.dev.type == "cpu" else 0

    def _send(self, t: torch.Tensor, dst: int, tag: int) -> None:
        t = t.detach().contiguous()
        self.pending.append((dist.isend(t, dst, tag=tag), t))

    def _recv(self, src: int, tag: int, backward: bool = False) -> torch.Tensor:
        shape, dtype = (
            (self.out_shape, self.out_dtype) if backward else (self.act_shape, self.act_dtype)
        )
        buf = torch.empty(shape, dtype=dtype, device=self.dev)
        dist.recv(buf, src, tag=tag)
        self.ready = time.perf_counter()
        return buf

    def _wait_sends(self) -> None:
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()

    def _barrier(self) -> None:
        dist.barrier()

    # --- actions -------------------------------------------------------------------------
    def forward(self, mb: int) -> None:
        """Forward of micro-batch ``mb`` (see module docstring)."""
        module = self.versions.forward_module(mb)
        x: Any
        if self.rank == 0:
            x = tuple(t.to(self.dev) for t in self.model.batch(mb)[0])
        else:
            x = self._recv(self.rank - 1, self._tag(mb, False)).requires_grad_()
        with saved_context(self.tracker):
            y = module(*x) if isinstance(x, tuple) else module(x)
            if self.last:
                with offloading(self.tracker) if self.policy.swap_loss else nullcontext():
                    y = self._loss(y, mb)
        if self.last:
            self.losses.append((mb, y.detach()))
            y = y * self.scale
        else:
            self._send(y, self.rank + 1, self._tag(mb, False))
        self.stash[mb] = (x, y)

    def _loss(self, y: torch.Tensor, mb: int) -> torch.Tensor:
        """The last stage's loss of micro-batch ``mb`` (the model's)."""
        return self.model.loss(y, self.model.batch(mb)[1])

    def backward(self, mb: int) -> None:
        """Backward of micro-batch ``mb`` on the weights its graph holds."""
        x, y = self.stash.pop(mb)
        grad = None if self.last else self._recv(self.rank + 1, self._tag(mb, True), True)
        torch.autograd.backward(y, grad)
        self.versions.backward_done(mb)
        if self.rank > 0:
            assert x.grad is not None, "a received activation requires grad"
            self._send(x.grad, self.rank - 1, self._tag(mb, True))

    def step(self, index: int) -> None:
        """Optimizer step number ``index``: the tied all-reduce, then the update; records the
        time it finished.

        The all-reduce runs before this rank waits for its own sends: a send completes only
        when its receiver takes it, and the receiver may be another holder of the tied
        parameter, already waiting in the same all-reduce (PipeDream-2BW's stage 0 sends the
        next iteration's first activation before its step)."""
        grads = self.versions.gradients()
        self.ties.reduce(self.names, grads)
        self._wait_sends()
        if self.job.dump_dir:
            save_step(self.job.dump_dir, self.ctx.rank, index, self.names, grads)
        self.versions.step(grads)
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        self.step_times.append(time.perf_counter())

    def run(self, program: list[Action]) -> dict[str, Any]:
        """Execute ``program`` and return this rank's measurements (JSON-able)."""
        self.scale = 1.0 / _backwards_per_step(program)
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
        else:
            self._rehearse()
            self.peak.start()
        self._barrier()
        start = time.perf_counter()
        with attention_kernel(self.job.attention):
            self._execute(program)
        self._wait_sends()
        self._barrier()
        end = time.perf_counter()
        self.resident_peak = self.peak.stop() if self.dev.type == "cpu" else math.nan
        if self.job.dump_dir:
            self._dump()
        return self._stats(start, end)

    def sample(self) -> tuple[tuple[Any, ...], Callable[[Any], torch.Tensor] | None]:
        """``(inputs, loss)`` of one stand-alone run of this stage: micro-batch 0's inputs on
        the first stage, a random received activation elsewhere
        (:func:`backends.torch.replay.cpu_memory.stage_input`); ``loss`` maps the output to
        micro-batch 0's loss on the last stage, None elsewhere."""
        if self.rank == 0:
            x: tuple[Any, ...] = tuple(t.to(self.dev) for t in self.model.batch(0)[0])
        else:
            x = (stage_input(self.act_shape, self.act_dtype, self.dev),)
        return x, (lambda y: self._loss(y, 0)) if self.last else None

    def _rehearse(self) -> None:
        """The stage's forward and backward once before the resident baseline
        (:func:`backends.torch.replay.cpu_memory.rehearse`), outside saved-tensor counting."""
        rehearse(self.versions.newest(), *self.sample())

    def _execute(self, program: list[Action]) -> None:
        ops = {"F": self.forward, "B": self.backward, STEP: self.step}
        for action in program:
            if self.job.fail_on is not None and str(action) == self.job.fail_on:
                raise RuntimeError(f"injected failure at action {action} (ReplayJob.fail_on)")
            if action.op not in ops:
                raise ValueError(
                    f"action {action}: op {action.op!r} is not supported by this runtime"
                )
            t0 = self.ready = time.perf_counter()
            ops[action.op](action.microbatch)
            self.spans.append((str(action), t0, self.ready, time.perf_counter()))
            self.executed[str(action)] += 1

    def _dump(self) -> None:
        losses = [(mb, float(v)) for mb, v in self.losses]
        params = list(self.versions.newest().parameters())
        save_end(str(self.job.dump_dir), self.ctx.rank, losses, self.names, params)

    def _stats(self, start: float, end: float) -> dict[str, Any]:
        versions = self.versions.peak_versions
        memory: dict[str, float] = {
            "param_bytes": float(self.param_bytes),
            "versions": float(versions),
            "grad_bytes": float(self.param_bytes),
        }
        if self.tracker is not None:
            memory["act_peak_bytes"] = float(self.tracker.peak_bytes)
            memory["host_act_peak_bytes"] = float(self.tracker.host_peak_bytes)
            counted = self.param_bytes * (versions + 1) + self.tracker.peak_bytes
            memory["counted_peak_bytes"] = float(counted)
            memory["resident_peak_bytes"] = self.resident_peak
            peak = (
                counted
                if math.isnan(memory["resident_peak_bytes"])
                else memory["resident_peak_bytes"]
            )
        else:
            peak = torch.cuda.max_memory_allocated(self.dev)
            memory["cuda_max_allocated"] = float(peak)
            memory["cuda_max_reserved"] = float(torch.cuda.max_memory_reserved(self.dev))
        counts, expected = action_tally(self.executed, expected_actions(self.job, self.rank))
        return {
            "rank": self.rank,
            "counts": counts,
            "expected": expected,
            "start": start,
            "end": end,
            "step_times": self.step_times,
            "spans": self.spans,
            "losses": [float(v) for _, v in self.losses],
            "memory": memory,
            "peak_memory_bytes": float(peak),
            "device_name": device_model_name(self.dev),
            "notes": list(self.policy.notes),
        }


def run_rank(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function for :func:`backends.torch.replay.launch.run_ranks` (``backend="ours"``, every
    rank; one rank alone: :func:`backends.torch.replay.single_rank.run_rank`)."""
    job = ReplayJob.from_dict(payload)
    runner = StageRunner(job, ctx)
    return runner.run(rank_program(job, runner.rank))

"""The tensor-parallel replay: ``t`` ranks run one pipeline stage (``p = 1``) split t ways.

:func:`run_rank` is the rank function :func:`backends.torch.replay.launch.replay` starts on each of
the ``t`` ranks when ``ReplayJob.tensor_parallel > 1``. Every rank builds the whole model split
by :func:`backends.torch.parallel.tensor.tp_chain` over a 1-D ``DeviceMesh`` of all ranks (gloo
on CPU, NCCL on GPUs) and runs the same program, stage 0's actions of the simulator's schedule
(``0F0 .. 0B0 .. 0STEP0``): a forward makes micro-batch ``mb``'s ids (the same on every rank),
runs the chain and the vocabulary-parallel loss (``loss_parallel``), keeps the loss; a
backward runs ``autograd.backward`` of the loss / (micro-batches per step) under
``loss_parallel``; a step is SGD on the local shards. The collectives are torch's, inside the
modules. Each rank reports what :mod:`backends.torch.replay.runtime` reports, so
:func:`backends.torch.replay.job.collect_result` combines them the same way.

CPU memory: measured, the rank's resident peak over its start
(:mod:`backends.torch.replay.cpu_memory`); counted beside it: local parameter bytes x 2 (weights +
gradients) + peak live saved-for-backward bytes, a DTensor counted by its local shard
(:class:`LocalSavedBytes`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel

from backends.torch.models.transformer import as_spec, lm_loss, microbatch
from backends.torch.parallel.tensor import tp_chain
from backends.torch.profile.layers import device_model_name
from backends.torch.profile.saved_bytes import SavedBytes, saved_context, tensor_bytes
from backends.torch.replay.cpu_memory import ResidentPeak
from backends.torch.replay.job import ReplayJob
from backends.torch.replay.runtime import action_tally, expected_actions, rank_program
from backends.torch.replay.versions import SingleVersion
from backends.torch.replay.worker import RankContext
from sim.schedules.action import STEP, Action


def local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor; any other tensor itself."""
    return t.to_local() if isinstance(t, DTensor) else t


class _Local:
    """A saved DTensor, with its local shard's :class:`SavedBytes` holder (or None)."""

    __slots__ = ("held", "tensor")

    def __init__(self, held: object, tensor: torch.Tensor):
        self.held, self.tensor = held, tensor


class LocalSavedBytes(SavedBytes):
    """:class:`SavedBytes` that counts a saved DTensor by its local shard's storage."""

    def pack(self, t: torch.Tensor) -> object:
        if isinstance(t, DTensor):
            return _Local(super().pack(t._local_tensor), t)
        return super().pack(t)

    @staticmethod
    def unpack(obj: object) -> torch.Tensor:
        if isinstance(obj, _Local):
            return obj.tensor
        return SavedBytes.unpack(obj)


class TPRunner:
    """Executes stage 0's program on one of ``t`` tensor-parallel ranks (module docstring).

    Args:
        job: the replay job (``stages == 1``, ``tensor_parallel == nproc``).
        ctx: this rank's context.
    """

    def __init__(self, job: ReplayJob, ctx: RankContext):
        self.job, self.ctx, self.dev = job, ctx, ctx.device
        self.spec = as_spec(job.model)
        mesh = init_device_mesh(self.dev.type, (job.tensor_parallel,), mesh_dim_names=("tp",))
        self.chain = tp_chain(
            self.spec,
            mesh,
            sequence_parallel=job.sequence_parallel,
            seed=job.seed,
            dtype=job.dtype,
            device=self.dev,
        )
        params = [local(p) for p in self.chain.parameters()]
        self.param_bytes = tensor_bytes(params)
        self.peak = ResidentPeak(self.param_bytes)
        self.tracker = LocalSavedBytes(params) if self.dev.type == "cpu" else None
        self.versions = SingleVersion(self.chain, job.lr)
        self.stash: dict[int, torch.Tensor] = {}
        self.losses: list[float] = []
        self.executed: Counter[str] = Counter()
        self.step_times: list[float] = []
        self.spans: list[tuple[str, float, float, float]] = []
        self.scale = 1.0

    def forward(self, mb: int) -> None:
        """Forward and loss of micro-batch ``mb``; the scaled loss waits for its backward."""
        ids, targets = microbatch(self.spec, self.job.microbatch_size, self.job.seed, mb)
        with saved_context(self.tracker), loss_parallel():
            loss = lm_loss(self.chain(ids.to(self.dev)), targets.to(self.dev))
        whole = loss.full_tensor() if isinstance(loss, DTensor) else loss
        self.losses.append(float(whole.detach()))
        self.stash[mb] = loss * self.scale

    def backward(self, mb: int) -> None:
        """Backward of micro-batch ``mb`` (the vocabulary-parallel loss's, then the chain's)."""
        with loss_parallel():
            self.stash.pop(mb).backward()

    def step(self, index: int) -> None:
        """Optimizer step number ``index``; records the time it finished."""
        self.versions.step()
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        self.step_times.append(time.perf_counter())

    def run(self, program: list[Action]) -> dict[str, Any]:
        """Execute ``program`` and return this rank's measurements (JSON-able)."""
        per_step = sum(a.op == "B" for a in program[: [a.op for a in program].index(STEP)])
        self.scale = 1.0 / max(per_step, 1)
        ops = {"F": self.forward, "B": self.backward, STEP: self.step}
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
        else:
            self.peak.start()
        dist.barrier()
        start = time.perf_counter()
        for action in program:
            if self.job.fail_on is not None and str(action) == self.job.fail_on:
                raise RuntimeError(f"injected failure at action {action} (ReplayJob.fail_on)")
            if action.op not in ops:
                raise ValueError(f"action {action}: the tensor-parallel replay runs F, B, STEP")
            t0 = time.perf_counter()
            ops[action.op](action.microbatch)
            self.spans.append((str(action), t0, t0, time.perf_counter()))
            self.executed[str(action)] += 1
        dist.barrier()
        end = time.perf_counter()
        self.resident = self.peak.stop() if self.dev.type == "cpu" else math.nan
        return self._stats(start, end)

    def _note(self) -> str:
        sp = " with sequence parallelism" if self.job.sequence_parallel else ""
        return (
            f"tensor_parallel {self.job.tensor_parallel}{sp} by torch.distributed.tensor.parallel"
            "; a rank's action spans include its collectives"
        )

    def _stats(self, start: float, end: float) -> dict[str, Any]:
        memory: dict[str, float] = {
            "param_bytes": float(self.param_bytes),
            "versions": 1.0,
            "grad_bytes": float(self.param_bytes),
        }
        if self.tracker is not None:
            memory["act_peak_bytes"] = float(self.tracker.peak_bytes)
            memory["host_act_peak_bytes"] = 0.0
            memory["counted_peak_bytes"] = float(2 * self.param_bytes + self.tracker.peak_bytes)
            memory["resident_peak_bytes"] = self.resident
            peak = memory["counted_peak_bytes"] if math.isnan(self.resident) else self.resident
        else:
            peak = torch.cuda.max_memory_allocated(self.dev)
            memory["cuda_max_allocated"] = float(peak)
        counts, expected = action_tally(self.executed, expected_actions(self.job, 0))
        return {
            "rank": self.ctx.rank,
            "counts": counts,
            "expected": expected,
            "start": start,
            "end": end,
            "step_times": self.step_times,
            "spans": self.spans,
            "losses": self.losses,
            "memory": memory,
            "peak_memory_bytes": float(peak),
            "device_name": device_model_name(self.dev),
            "notes": [] if self.ctx.rank else [self._note()],
        }


def run_rank(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function for :func:`backends.torch.replay.launch.run_ranks` (``tensor_parallel > 1``)."""
    job = ReplayJob.from_dict(payload)
    return TPRunner(job, ctx).run(rank_program(job, 0))


def shard_report(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function: this rank's parameter shapes under :func:`tp_chain` (tests, debugging).

    Args:
        payload: ``model`` (spec dict), ``sequence_parallel``, ``seed``.

    Returns:
        ``shapes`` (name -> local shape), ``numel`` (local parameters), ``global`` (name ->
        whole shape).
    """
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("tp",))
    chain = tp_chain(
        payload["model"],
        mesh,
        sequence_parallel=payload.get("sequence_parallel", False),
        seed=payload.get("seed", 0),
        device=ctx.device,
    )
    named = dict(chain.named_parameters())
    return {
        "shapes": {n: list(local(p).shape) for n, p in named.items()},
        "global": {n: list(p.shape) for n, p in named.items()},
        "numel": sum(local(p).numel() for p in named.values()),
    }

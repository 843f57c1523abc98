"""Replay with torch.distributed.pipelining's own runtime, to validate ours against it.

:func:`run_rank` (``ReplayJob.backend="torch"``) wraps this rank's stage module(s) (the same
as our runtime's, :func:`backends.torch.replay.runtime.stage_setup`: GPT/BERT or a user's model) in
``PipelineStage`` objects and runs torch's ``ScheduleGPipe`` or ``Schedule1F1B``, or, with
``ReplayJob.torch_csv``, ``_PipelineScheduleRuntime`` loading our compute-only CSV (schedules.md
§4.2), which also runs the multi-stage schedules (``v`` stage chunks per rank; it infers the
stage -> rank map, loop or V, from the CSV). Each of the ``warmup + iterations`` steps is
followed by the tied all-reduce (:mod:`backends.torch.parallel.ties`) and the same SGD update as our
runtime. The micro-batches are ours: the rank holding stage 0 passes the concatenation of the
iteration's ``m`` micro-batches, which torch splits back along dim 0; the rank holding the last
stage passes the targets. Iteration times and memory are measured as in our runtime, so the
results are comparable.

gloo needs torch's ``_wait_batch_p2p`` fix
(:func:`backends.torch.replay.pipelining.has_gloo_p2p_fix`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

from backends.torch.models.replay_model import ReplayModel
from backends.torch.models.transformer import StageModule
from backends.torch.profile.layers import device_model_name
from backends.torch.profile.saved_bytes import SavedBytes, tensor_bytes
from backends.torch.replay.cpu_memory import ResidentPeak, rehearse, stage_input
from backends.torch.replay.dumps import save_end, save_step
from backends.torch.replay.job import ReplayJob
from backends.torch.replay.memory import apply_policy
from backends.torch.replay.pipelining import (
    WithPolicy,
    cat_inputs,
    count_actions,
    has_gloo_p2p_fix,
    sim_schedule,
    torch_schedule,
)
from backends.torch.replay.runtime import stage_setup
from backends.torch.replay.versions import sgd_update_
from backends.torch.replay.worker import RankContext


def loss_of(model: ReplayModel) -> Any:
    """torch's ``loss_fn(output, target)``: the model's loss (a model without a target gets
    placeholder targets from :func:`_targets`, ignored here)."""
    has_target = model.batch(0)[1] is not None
    return lambda output, target: model.loss(output, target if has_target else None)


def _targets(model: ReplayModel, first_mb: int, m: int, dev: torch.device) -> torch.Tensor:
    """The iteration's targets concatenated (torch splits them per micro-batch); zeros of one
    per sample for a model without a target."""
    batches = [model.batch(first_mb + i) for i in range(m)]
    if batches[0][1] is None:
        return torch.zeros(sum(int(x[0].shape[0]) for x, _ in batches), device=dev)
    return torch.cat([t for _, t in batches if t is not None]).to(dev)


def _unique(model: ReplayModel, modules: list[Any]) -> tuple[list[str], list[torch.Tensor]]:
    """This rank's parameters once each (stage chunks may share some), with their names."""
    names, params, seen = [], [], set()
    for mod in modules:
        for name, p in zip(model.names(mod), mod.parameters(), strict=True):
            if id(p) not in seen:
                seen.add(id(p))
                names.append(name)
                params.append(p)
    return names, params


def run_rank(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function for ``backend="torch"``; returns the same statistics as our runtime.

    Raises:
        RuntimeError: torch lacks the gloo p2p fix (CPU).
    """
    # Long: the rank's life in order; its parts are functions.
    job = ReplayJob.from_dict(payload)
    if ctx.device.type == "cpu" and not has_gloo_p2p_fix():
        raise RuntimeError(
            f"torch {torch.__version__} lacks the gloo _batch_p2p fix (pytorch#152938, torch >= "
            "2.8): torch.distributed.pipelining can hang on gloo; use backend='ours'"
        )
    dev, rank, sched = ctx.device, ctx.rank, sim_schedule(job)
    local, n = sched.rank_stages(rank), sched.num_stages
    model, boundaries, built, ties = stage_setup(job, local, True)
    names, params = _unique(model, list(built.values()))
    param_bytes = tensor_bytes(params)
    peak = ResidentPeak(param_bytes + sum(tensor_bytes(m.buffers()) for m in built.values()))
    modules = {s: built[s].to(dev) for s in local}
    tracker = SavedBytes(params) if dev.type == "cpu" else None
    stages, tallies, notes = _pipeline_stages(job, modules, n, tracker, dev)
    schedule = torch_schedule(job, stages, job.torch_csv, loss_of(model))
    first, last = 0 in local, (n - 1) in local
    total, m = job.warmup_iterations + job.iterations, job.microbatches
    step_times: list[float] = []
    losses: list[tuple[int, float]] = []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    else:
        target = model.batch(0)[1]
        for s in local:  # the process's one-time growth before the baseline (cpu_memory)
            x = (stage_input(*model.recv(boundaries, s), dev),) if s else model.batch(0)[0]
            loss = (lambda y: model.loss(y, target)) if s == n - 1 else None
            rehearse(modules[s], tuple(t.to(dev) for t in x), loss)
        peak.start()
    dist.barrier()
    start = time.perf_counter()
    for k in range(total):
        kwargs: dict[str, Any] = {}
        if last:
            kwargs = {"target": _targets(model, k * m, m, dev), "losses": []}
        inputs = [model.batch(k * m + i)[0] for i in range(m)] if first else []
        schedule.step(*(cat_inputs(inputs, dev) if first else ()), **kwargs)
        if last:
            losses += [(k * m + i, float(v)) for i, v in enumerate(kwargs["losses"])]
        _step(job, rank, k, names, params, ties)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        step_times.append(time.perf_counter())
    dist.barrier()
    end = time.perf_counter()
    resident = peak.stop() if dev.type == "cpu" else math.nan
    if job.dump_dir:
        save_end(job.dump_dir, rank, losses, names, params)
    memory, peaked = _memory(param_bytes, tracker, resident, dev)
    v = len(local)
    what = f"CSV runtime of {job.schedule}" if job.torch_csv else job.schedule
    return {
        "rank": rank,
        "counts": {**sum(tallies, Counter()), "STEP": total},
        "expected": {"F": total * m * v, "B": total * m * v, "STEP": total},
        "start": start,
        "end": end,
        "step_times": step_times,
        "losses": [v_ for _, v_ in losses],
        "memory": memory,
        "peak_memory_bytes": float(peaked),
        "device_name": device_model_name(dev),
        "notes": notes + [f"torch.distributed.pipelining {what}, stages {local}"] * (rank == 0),
    }


def _pipeline_stages(
    job: ReplayJob,
    modules: dict[int, StageModule],
    n: int,
    tracker: SavedBytes | None,
    dev: torch.device,
) -> tuple[list[PipelineStage], list[Counter], list[str]]:
    """torch's ``PipelineStage`` of each of this rank's ``modules`` (by stage index, of ``n``
    stages) under the job's memory policy, the counters of the actions each runs, and the
    policies' notes (each once)."""
    notes: list[str] = []
    stages, tallies = [], []
    for s, module in modules.items():
        policy = apply_policy(module, job.memory_policy, s, n, tracker)
        notes += [x for x in policy.notes if x not in notes]
        if policy.swap_loss and s == n - 1:
            notes.append(
                "cpu_swap: torch's schedule computes the loss outside the stage module, so "
                "the loss's saved tensors stay on the device"
            )
        stage = PipelineStage(WithPolicy(module, tracker), s, n, dev)
        tallies.append(count_actions(stage))
        stages.append(stage)
    return stages, tallies, notes


def _step(job: ReplayJob, rank: int, k: int, names: list[str], params: list, ties: Any) -> None:
    """Iteration ``k``'s optimizer step on this rank: each gradient averaged over the
    ``job.microbatches`` micro-batches, the tied parameters' gradients summed across their
    stages (``ties.reduce``), dumped where ``job.dump_dir`` asks, then plain SGD at ``job.lr``
    and the gradients cleared."""
    m = job.microbatches
    grads = [None if p.grad is None else p.grad.div_(m) for p in params]  # mean over m
    ties.reduce(names, grads)
    if job.dump_dir:
        save_step(job.dump_dir, rank, k, names, grads)
    for p, g in zip(params, grads, strict=True):
        if g is not None:
            sgd_update_(p.data, g, job.lr)
        p.grad = None


def _memory(
    param_bytes: int, tracker: SavedBytes | None, resident: float, dev: torch.device
) -> tuple[dict[str, float], float]:
    """The rank's memory statistics (bytes; one weight version, gradients as large as the
    weights) and its peak: on a CPU, weights + gradients + the peak of saved activations as
    ``tracker`` counted them, or the process's ``resident`` peak where it was measured; on a
    GPU, CUDA's ``max_memory_allocated``."""
    memory = {"param_bytes": float(param_bytes), "versions": 1.0, "grad_bytes": float(param_bytes)}
    if tracker is not None:  # weights + gradients + the peak of saved activations, counted
        memory["act_peak_bytes"] = float(tracker.peak_bytes)
        memory["host_act_peak_bytes"] = float(tracker.host_peak_bytes)
        memory["counted_peak_bytes"] = float(2 * param_bytes + tracker.peak_bytes)
        memory["resident_peak_bytes"] = resident
        return memory, memory["counted_peak_bytes"] if math.isnan(resident) else resident
    peaked = float(torch.cuda.max_memory_allocated(dev))
    memory["cuda_max_allocated"] = peaked
    memory["cuda_max_reserved"] = float(torch.cuda.max_memory_reserved(dev))
    return memory, peaked

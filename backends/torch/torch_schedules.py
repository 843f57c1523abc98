"""Replay with torch.distributed.pipelining's own runtime, to validate ours against it.

:func:`run_rank` (``ReplayJob.backend="torch"``) wraps the same stage module
(:func:`backends.torch.models.build_stage`) in a ``PipelineStage`` and runs torch's
``ScheduleGPipe`` or ``Schedule1F1B`` (or, with ``ReplayJob.torch_csv``,
``_PipelineScheduleRuntime`` loading our compute-only CSV, schedules.md §4.2) for ``warmup + iterations`` steps, each
followed by the same SGD update as :mod:`backends.torch.runtime`. The micro-batches are ours:
rank 0 passes the concatenation of the iteration's ``m`` micro-batches, which torch splits back
along dim 0. Iteration times and memory are measured exactly as in our runtime, so the two
results are comparable.

The multi-stage schedules (``v`` stage chunks per rank) go to :mod:`.torch_multi_stage`; what
both share is in :mod:`.pipelining` (gloo needs torch's ``_wait_batch_p2p`` fix:
:func:`backends.torch.pipelining.has_gloo_p2p_fix`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

from backends.torch.job import ReplayJob
from backends.torch.memory import SavedBytes, apply_policy, tensor_bytes
from backends.torch.models import as_spec, build_stage, lm_loss, microbatch
from backends.torch.pipelining import (
    WithPolicy,
    cat_inputs,
    count_actions,
    has_gloo_p2p_fix,
    sim_schedule,
    torch_schedule,
)
from backends.torch.profile import device_model_name
from backends.torch.runtime import user_stage
from backends.torch.torch_multi_stage import run_rank_multi
from backends.torch.user_spec import is_user_model
from backends.torch.worker import RankContext
from sim.partition import uniform_partition


def user_loss(user: Any) -> Any:
    """torch's ``loss_fn(output, target)`` for a user's model: its own loss of the output
    (every micro-batch has the same target, which the stage holds)."""
    return lambda output, target: user.loss(output)


def run_rank(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function for ``backend="torch"``; returns the same statistics as our runtime.

    ``payload`` is a :class:`ReplayJob` dict; ``torch_csv`` selects ``_PipelineScheduleRuntime``
    loading our compute-only CSV instead of torch's schedule class.
    """
    job = ReplayJob.from_dict(payload)
    csv = job.torch_csv
    if ctx.device.type == "cpu" and not has_gloo_p2p_fix():
        raise RuntimeError(
            f"torch {torch.__version__} lacks the gloo _batch_p2p fix (pytorch#152938, torch >= "
            "2.8): torch.distributed.pipelining can hang on gloo; use backend='ours'"
        )
    dev, rank = ctx.device, ctx.rank
    sched = sim_schedule(job)
    if sched.virtual_stages > 1:
        return run_rank_multi(job, ctx, sched)
    last = rank == job.stages - 1
    user = user_stage(job, rank) if is_user_model(job.model) else None
    if user is None:
        spec = as_spec(job.model)
        boundaries = job.boundaries or list(uniform_partition(spec.n_layers, job.stages))
        inner = build_stage(spec, boundaries, rank, job.seed, dtype=job.dtype).to(dev)
    else:
        inner = user.module.to(dev)
    tracker = SavedBytes(inner.parameters()) if dev.type == "cpu" else None
    policy = apply_policy(inner, job.memory_policy, rank, job.stages, tracker)
    module = WithPolicy(inner, tracker)
    notes = list(policy.notes)
    if policy.swap_loss and last:
        notes.append(
            "cpu_swap: torch's schedule computes the loss outside the stage module, so "
            "the loss's saved tensors stay on the device"
        )
    stage = PipelineStage(module, rank, job.stages, dev)
    action_counts = count_actions(stage)
    schedule = torch_schedule(job, [stage], csv, lm_loss if user is None else user_loss(user))
    total = job.warmup_iterations + job.iterations
    m, b = job.microbatches, job.microbatch_size
    step_times, losses, grads_log = [], [], []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    dist.barrier()
    start = time.perf_counter()
    for k in range(total):
        if user is None:
            batches = [microbatch(spec, b, job.seed, k * m + i) for i in range(m)]
        else:  # the user's sample for every micro-batch (and its target, or the sample)
            batches = [
                (user.sample, user.target if user.target is not None else user.sample[0])
            ] * m
        kwargs: dict[str, Any] = {}
        if last:
            kwargs = {"target": torch.cat([t for _, t in batches]).to(dev), "losses": []}
        args = cat_inputs([x for x, _ in batches], dev) if rank == 0 else ()
        schedule.step(*args, **kwargs)
        if last:
            losses += [float(v) for v in kwargs["losses"]]
        if job.dump_dir:
            grads_log.append(
                {
                    n: p.grad.detach().cpu().clone()
                    for n, p in inner.global_named_parameters().items()
                    if p.grad is not None
                }
            )
        for p in inner.parameters():
            if p.grad is not None:
                p.data.add_(p.grad, alpha=-job.lr)
            p.grad = None
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        step_times.append(time.perf_counter())
    dist.barrier()
    end = time.perf_counter()
    if job.dump_dir:
        params = {n: p.detach().cpu().clone() for n, p in inner.global_named_parameters().items()}
        torch.save({"grads": grads_log, "params": params}, Path(job.dump_dir) / f"rank{rank}.pt")
    param_bytes = tensor_bytes(inner.parameters())
    memory = {"param_bytes": float(param_bytes), "versions": 1.0, "grad_bytes": float(param_bytes)}
    if tracker is not None:
        memory["act_peak_bytes"] = float(tracker.peak_bytes)
        memory["host_act_peak_bytes"] = float(tracker.host_peak_bytes)
        peak = 2 * param_bytes + tracker.peak_bytes
    else:
        peak = torch.cuda.max_memory_allocated(dev)
        memory["cuda_max_allocated"] = float(peak)
    counts = {**action_counts, "STEP": total}
    return {
        "rank": rank,
        "counts": counts,
        "expected": {"F": total * m, "B": total * m, "STEP": total},
        "start": start,
        "end": end,
        "step_times": step_times,
        "losses": losses,
        "memory": memory,
        "peak_memory_bytes": float(peak),
        "device_name": device_model_name(dev),
        "notes": notes
        + (
            [f"torch.distributed.pipelining {'CSV runtime' if csv else job.schedule}"]
            if rank == 0
            else []
        ),
    }

"""Replay of the multi-stage schedules (v stage chunks per rank) with torch's runtime.

Each rank builds its ``v`` stage modules (:func:`backends.torch.models.build_stage` with
``p * v`` boundaries), wraps each in a ``PipelineStage`` (stage index, ``p * v`` stages) and runs
``_PipelineScheduleRuntime`` loading our compute-only CSV (schedules.md §4.2), which infers the
stage -> rank map (loop or V) from the CSV. The rank holding stage 0 feeds the inputs; the rank
holding the last stage (rank ``p-1`` for loop placement, rank 0 for V placement) computes the
loss. After each iteration the same SGD update as :mod:`backends.torch.torch_schedules` runs.
Only the ``none`` memory policy is supported here.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

from backends.torch.job import ReplayJob
from backends.torch.memory import SavedBytes, tensor_bytes
from backends.torch.models import as_spec, build_stage, lm_loss, microbatch
from backends.torch.pipelining import WithPolicy, cat_inputs, count_actions, torch_schedule
from backends.torch.profile import device_model_name
from backends.torch.worker import RankContext
from sim.partition import uniform_partition


def run_rank_multi(job: ReplayJob, ctx: RankContext, sched: Any) -> dict[str, Any]:
    """Rank function for a multi-stage schedule; returns the statistics of ``run_rank``.

    Args:
        job: the replay job (``backend="torch"``, ``torch_csv=True``).
        ctx: this rank's device and rank.
        sched: the :class:`sim.schedules.base.Schedule` (``v >= 2``).
    """
    dev, rank, n = ctx.device, ctx.rank, sched.num_stages
    spec = as_spec(job.model)
    boundaries = job.boundaries or list(uniform_partition(spec.n_layers, n))
    local = sched.rank_stages(rank)
    modules = {
        s: build_stage(spec, boundaries, s, job.seed, dtype=job.dtype).to(dev) for s in local
    }
    weights = [w for mod in modules.values() for w in mod.parameters()]
    tracker = SavedBytes(weights) if dev.type == "cpu" else None  # saved bytes on CPU ranks
    stages, tallies = [], []  # torch's F and B calls, per stage chunk
    for s in local:
        stage = PipelineStage(WithPolicy(modules[s], tracker), s, n, dev)
        tallies.append(count_actions(stage))
        stages.append(stage)
    schedule = torch_schedule(job, stages, True, lm_loss)
    first, last = 0 in local, (n - 1) in local
    total, m, b = job.warmup_iterations + job.iterations, job.microbatches, job.microbatch_size
    step_times: list[float] = []
    losses: list[float] = []
    grads_log: list[dict[str, torch.Tensor]] = []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    dist.barrier()
    start = time.perf_counter()
    for k in range(total):
        batches = [microbatch(spec, b, job.seed, k * m + i) for i in range(m)]
        kwargs: dict[str, Any] = {}
        if last:
            kwargs = {"target": torch.cat([t for _, t in batches]).to(dev), "losses": []}
        args = cat_inputs([x for x, _ in batches], dev) if first else ()
        schedule.step(*args, **kwargs)
        if last:
            losses += [float(v) for v in kwargs["losses"]]
        named = {
            n_: p for mod in modules.values() for n_, p in mod.global_named_parameters().items()
        }
        if job.dump_dir:
            grads_log.append(
                {n_: p.grad.detach().cpu().clone() for n_, p in named.items() if p.grad is not None}
            )
        for p in named.values():
            if p.grad is not None:
                p.data.add_(p.grad, alpha=-job.lr)
            p.grad = None
        step_times.append(time.perf_counter())
    dist.barrier()
    end = time.perf_counter()
    named = {n_: p for mod in modules.values() for n_, p in mod.global_named_parameters().items()}
    if job.dump_dir:
        params = {n_: p.detach().cpu().clone() for n_, p in named.items()}
        torch.save({"grads": grads_log, "params": params}, Path(job.dump_dir) / f"rank{rank}.pt")
    param_bytes = float(sum(tensor_bytes(mod.parameters()) for mod in modules.values()))
    v = len(local)
    memory = {"param_bytes": param_bytes, "versions": 1.0, "grad_bytes": param_bytes}
    if tracker is not None:  # weights + gradients + the peak of saved activations
        memory["act_peak_bytes"] = float(tracker.peak_bytes)
        peak = 2 * param_bytes + tracker.peak_bytes
    else:
        peak = float(torch.cuda.max_memory_allocated(dev))
        memory["cuda_max_allocated"] = peak
    return {
        "rank": rank,
        "counts": {**sum(tallies, Counter()), "STEP": total},
        "expected": {"F": total * m * v, "B": total * m * v, "STEP": total},
        "start": start,
        "end": end,
        "step_times": step_times,
        "losses": losses,
        "memory": memory,
        "peak_memory_bytes": float(peak),
        "device_name": device_model_name(dev),
        "notes": [f"torch _PipelineScheduleRuntime, CSV of {job.schedule}, stages {local}"],
    }

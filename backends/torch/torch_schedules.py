"""Replay with torch.distributed.pipelining's own runtime, to validate ours against it.

:func:`run_rank` (``ReplayJob.backend="torch"``) wraps the same stage module
(:func:`backends.torch.models.build_stage`) in a ``PipelineStage`` and runs torch's
``ScheduleGPipe`` or ``Schedule1F1B`` (or, with ``ReplayJob.torch_csv``,
``_PipelineScheduleRuntime`` loading our compute-only CSV, schedules.md §4.2) for ``warmup + iterations`` steps, each
followed by the same SGD update as :mod:`backends.torch.runtime`. The micro-batches are ours:
rank 0 passes the concatenation of the iteration's ``m`` micro-batches, which torch splits back
along dim 0. Iteration times and memory are measured exactly as in our runtime, so the two
results are comparable.

gloo: torch < 2.8 could hang in ``_batch_p2p`` (pytorch#132644, fixed by PR #152938, which
added ``_wait_batch_p2p``); :func:`has_gloo_p2p_fix` checks the installed torch
(schedules.md §4.5).
"""

from __future__ import annotations

import inspect
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from backends.torch.job import ReplayJob
from backends.torch.memory import SavedBytes, apply_policy, saved_context, tensor_bytes
from backends.torch.models import as_spec, build_stage, lm_loss, microbatch
from backends.torch.profile import device_model_name
from backends.torch.runtime import user_stage
from backends.torch.user_spec import is_user_model
from backends.torch.worker import RankContext
from sim.partition import uniform_partition


def has_gloo_p2p_fix() -> bool:
    """True when torch's pipelining waits on every gloo p2p work (``_wait_batch_p2p``)."""
    from torch.distributed.pipelining import schedules

    return "_wait_batch_p2p" in inspect.getsource(schedules)


class _WithPolicy(nn.Module):
    """Runs the stage's forward under the saved-bytes counter (the policy is set up on
    ``inner`` by :func:`backends.torch.memory.apply_policy`)."""

    def __init__(self, inner: nn.Module, tracker: SavedBytes | None):
        super().__init__()
        self.inner, self.tracker = inner, tracker

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        with saved_context(self.tracker):
            return self.inner(*xs)


def _count_actions(stage: Any) -> Counter[str]:
    """Count torch's F and B actions: calls of ``forward_one_chunk`` / ``backward_one_chunk``.

    (Calls of the module itself would also count the first step's shape-inference forward.)
    """
    counts: Counter[str] = Counter()
    for op, name in (("F", "forward_one_chunk"), ("B", "backward_one_chunk")):
        original = getattr(stage, name)

        def counted(*args: Any, _op: str = op, _orig: Any = original, **kwargs: Any) -> Any:
            counts[_op] += 1
            return _orig(*args, **kwargs)

        setattr(stage, name, counted)
    return counts


def _schedule(job: ReplayJob, stages: list[Any], csv: bool, loss_fn: Any = lm_loss) -> Any:
    """torch's schedule over this rank's ``stages`` (one, or ``v`` stage chunks); with ``csv``
    ``_PipelineScheduleRuntime`` loads our compute-only CSV and infers the stage -> rank map
    from it (``_validate_and_set_stage_mapping``, schedules.md §4.2)."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    if not csv:
        cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[job.schedule]
        return cls(stages[0], job.microbatches, loss_fn=loss_fn)
    from sim.schedules.csv_io import to_csv

    program = _sim_schedule(job).one_iteration()
    schedule = _PipelineScheduleRuntime(stages, job.microbatches, loss_fn=loss_fn)
    with tempfile.TemporaryDirectory() as tmp:
        to_csv(program, Path(tmp) / "schedule.csv")
        schedule._load_csv(str(Path(tmp) / "schedule.csv"), format="compute_only")
    return schedule


def _sim_schedule(job: ReplayJob) -> Any:
    from sim.schedules.registry import get_schedule

    return get_schedule(job.schedule)(job.stages, job.microbatches, job.virtual_stages)


def _cat_inputs(inputs: list[Any], dev: torch.device) -> tuple[torch.Tensor, ...]:
    """The iteration's micro-batches concatenated along dim 0 (torch splits them back)."""
    if isinstance(inputs[0], torch.Tensor):
        return (torch.cat(inputs).to(dev),)
    return tuple(torch.cat(parts).to(dev) for parts in zip(*inputs, strict=True))


def user_loss(user: Any) -> Any:
    """torch's ``loss_fn(output, target)`` for a user's model: its own loss of the output
    (every micro-batch has the same target, which the stage holds)."""
    return lambda output, target: user.loss(output)


def run_rank(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function for ``backend="torch"``; returns the same statistics as our runtime.

    ``payload`` is a :class:`ReplayJob` dict; ``torch_csv`` selects ``_PipelineScheduleRuntime``
    loading our compute-only CSV instead of torch's schedule class.
    """
    from torch.distributed.pipelining import PipelineStage

    job = ReplayJob.from_dict(payload)
    csv = job.torch_csv
    if ctx.device.type == "cpu" and not has_gloo_p2p_fix():
        raise RuntimeError(
            f"torch {torch.__version__} lacks the gloo _batch_p2p fix (pytorch#152938, torch >= "
            "2.8): torch.distributed.pipelining can hang on gloo; use backend='ours'"
        )
    dev, rank = ctx.device, ctx.rank
    sched = _sim_schedule(job)
    if sched.virtual_stages > 1:
        from backends.torch.torch_multi_stage import run_rank_multi

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
    module = _WithPolicy(inner, tracker)
    notes = list(policy.notes)
    if policy.swap_loss and last:
        notes.append(
            "cpu_swap: torch's schedule computes the loss outside the stage module, so "
            "the loss's saved tensors stay on the device"
        )
    stage = PipelineStage(module, rank, job.stages, dev)
    action_counts = _count_actions(stage)
    schedule = _schedule(job, [stage], csv, lm_loss if user is None else user_loss(user))
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
        args = _cat_inputs([x for x, _ in batches], dev) if rank == 0 else ()
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

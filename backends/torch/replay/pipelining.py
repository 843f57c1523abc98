"""What the replays with torch.distributed.pipelining
(:mod:`backends.torch.replay.torch_schedules`: one stage per rank, or ``v`` stage chunks per
rank) need around torch: the stage wrapper that counts saved bytes, torch's F/B call counter,
the schedule object (the torch class the schedule's class names, ``torch_class``, or
``_PipelineScheduleRuntime`` loading our compute-only CSV, schedules.md §4.2) and the inputs.

gloo: torch < 2.8 could hang in ``_batch_p2p`` (pytorch#132644, fixed by PR #152938, which
added ``_wait_batch_p2p``); :func:`has_gloo_p2p_fix` checks the installed torch
(schedules.md §4.5).
"""

from __future__ import annotations

import inspect
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed import pipelining
from torch.distributed.pipelining import schedules
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from backends.torch.models.transformer import lm_loss
from backends.torch.profile.saved_bytes import SavedBytes, saved_context
from backends.torch.replay.job import ReplayJob
from sim.schedules.base import Schedule
from sim.schedules.csv_io import to_csv
from sim.schedules.registry import get_schedule


def has_gloo_p2p_fix() -> bool:
    """True when torch's pipelining waits on every gloo p2p work (``_wait_batch_p2p``)."""
    return "_wait_batch_p2p" in inspect.getsource(schedules)


class WithPolicy(nn.Module):
    """Runs the stage's forward under the saved-bytes counter (the policy is set up on
    ``inner`` by :func:`backends.torch.replay.memory.apply_policy`) and hands torch a contiguous
    output: ``PipelineStage`` sends the output tensor as it is, and a send of a strided view
    (a layer ending in ``transpose``) fails in gloo and NCCL (our runtime sends
    ``.contiguous()`` copies too)."""

    def __init__(self, inner: nn.Module, tracker: SavedBytes | None):
        super().__init__()
        self.inner, self.tracker = inner, tracker

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        with saved_context(self.tracker):
            return self.inner(*xs).contiguous()


def count_actions(stage: Any) -> Counter[str]:
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


def torch_class(schedule: type[Schedule] | Schedule) -> type:
    """The class of ``torch.distributed.pipelining`` that ``schedule``'s class names
    (``torch_class``: ``ScheduleGPipe``, ``Schedule1F1B``).

    Raises:
        ValueError: the schedule names none, or a name this torch does not have.
    """
    name = schedule.torch_class
    cls = getattr(pipelining, name, None) if name else None
    if not isinstance(cls, type):
        raise ValueError(
            f"schedule {schedule.name!r}: torch.distributed.pipelining has no class "
            f"{name!r} to run it (its torch_class); replay it with backend 'ours'"
        )
    return cls


def torch_schedule(job: ReplayJob, stages: list[Any], csv: bool, loss_fn: Any = lm_loss) -> Any:
    """torch's schedule over this rank's ``stages`` (one, or ``v`` stage chunks); with ``csv``
    ``_PipelineScheduleRuntime`` loads our compute-only CSV and infers the stage -> rank map
    from it (``_validate_and_set_stage_mapping``, schedules.md §4.2).

    ``scale_grads=False``: torch would divide each stage's gradients by ``m``
    (``_PipelineStageBase.scale_grads``), twice for a parameter two stage chunks of the rank
    share (a tied embedding on the first and the last stage of a V schedule); the caller
    divides once."""
    if not csv:
        cls = torch_class(sim_schedule(job))
        return cls(stages[0], job.microbatches, loss_fn=loss_fn, scale_grads=False)
    program = sim_schedule(job).one_iteration()
    schedule = _PipelineScheduleRuntime(
        stages, job.microbatches, loss_fn=loss_fn, scale_grads=False
    )
    with tempfile.TemporaryDirectory() as tmp:
        to_csv(program, Path(tmp) / "schedule.csv")
        schedule._load_csv(str(Path(tmp) / "schedule.csv"), format="compute_only")
    return schedule


def sim_schedule(job: ReplayJob) -> Any:
    """The simulator's schedule of ``job`` (:class:`sim.schedules.base.Schedule`)."""
    return get_schedule(job.schedule)(job.stages, job.microbatches, job.virtual_stages)


def cat_inputs(inputs: list[Any], dev: torch.device) -> tuple[torch.Tensor, ...]:
    """The iteration's micro-batches concatenated along dim 0 (torch splits them back)."""
    if isinstance(inputs[0], torch.Tensor):
        return (torch.cat(inputs).to(dev),)
    return tuple(torch.cat(parts).to(dev) for parts in zip(*inputs, strict=True))

"""The torch implementation of the simulator's replay interface (:class:`sim.replay.Replayer`).

``sim validate`` describes each run as a :class:`sim.replay.ReplayRequest`; this module turns
it into a :class:`backends.torch.replay.job.ReplayJob` and runs it with
:func:`backends.torch.replay.launch.replay` (our runtime or torch's schedules on
``stages x tensor_parallel`` ranks, or one rank alone). What the replay can run is said by the job
itself (:meth:`ReplayJob.problems`: schedules, memory policies, tensor-parallel limits).

Importing this module does not import torch; a replay starts it in its rank processes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from backends.torch.devices import check_device
from backends.torch.replay.group import group_problems, is_group_request, replay_group
from backends.torch.replay.job import (
    ReplayJob,
    ReplayResult,
    needs_torch_csv,
    schedule_class,
    torch_runs,
)
from backends.torch.replay.launch import replay, run_ranks, scratch_dir
from sim.replay import ReplayProblem, ReplayRequest


def replay_job(request: ReplayRequest, *, check: bool = True) -> ReplayJob:
    """The job that runs ``request``; ``torch_csv`` for the multi-stage schedules
    (:func:`backends.torch.replay.job.needs_torch_csv`).

    Raises:
        ValueError: with ``check``, the job's :meth:`ReplayJob.problems`.
    """
    cls = schedule_class(request.schedule)
    return ReplayJob(
        model=dict(request.model),
        boundaries=list(request.boundaries),
        schedule=request.schedule,
        stages=request.stages,
        microbatches=request.microbatches,
        microbatch_size=request.microbatch_size,
        iterations=request.iterations,
        warmup_iterations=request.warmup_iterations,
        memory_policy=request.memory_policy,
        device=request.device,
        nproc=1 if request.single_rank is not None else None,
        backend=request.runtime,
        torch_csv=cls is not None and needs_torch_csv(cls),
        dtype=request.dtype,
        threads=request.threads,
        timeout_s=request.timeout_s,
        virtual_stages=request.virtual_stages,
        single_rank=request.single_rank,
        attention=request.attention,
        tensor_parallel=request.tensor_parallel,
        sequence_parallel=request.sequence_parallel,
        check=check,
    )


class TorchReplayer:
    """Replays with torch (gloo on CPU, NCCL on GPUs): :class:`sim.replay.Replayer`.

    Example (no process is started by ``problems``):
        >>> r = ReplayRequest({"layers": 2, "hidden": 32, "heads": 2, "seq_len": 8,
        ...     "vocab": 64}, (0, 2), "gpipe", 2, 4, 1, memory_policy="d2d_swap")
        >>> [p.field for p in TorchReplayer().problems(r)]
        ['memory_policy']
        >>> TorchReplayer().runtimes(r, builtin=True)
        ('ours', 'torch')
    """

    def check_device(self, device: str, nproc: int) -> None:
        """:func:`backends.torch.devices.check_device` (raises ``InputError``)."""
        check_device(device, nproc=nproc)

    def runtimes(self, request: ReplayRequest, *, builtin: bool) -> tuple[str, ...]:
        """Multi-stage schedules: torch's CSV runtime only; else ours, and with ``builtin``
        torch's own class where the schedule's class names one (``torch_class``:
        ``ScheduleGPipe``, ``Schedule1F1B``)."""
        if is_group_request(request):
            return ("ours",)
        cls = schedule_class(request.schedule)
        if cls is not None and needs_torch_csv(cls):
            return ("torch",)
        if builtin and cls is not None and torch_runs(cls) and request.single_rank is None:
            return ("ours", "torch")
        return ("ours",)

    def problems(self, request: ReplayRequest) -> list[ReplayProblem]:
        """Every field the job refuses; expert- and context-parallel requests:
        :func:`backends.torch.replay.group.group_problems`."""
        if is_group_request(request):
            return group_problems(request)
        out = []
        for text in replay_job(request, check=False).problems():
            field, _, reason = text.partition(": ")
            out.append(ReplayProblem(field, reason))
        return out

    def replay(self, request: ReplayRequest) -> ReplayResult:
        """Run ``request`` (:func:`backends.torch.replay.launch.replay`; expert- and
        context-parallel: :func:`backends.torch.replay.group.replay_group`) and measure it; with
        ``request.numerics``, run the same job again with every rank dumping its gradients and
        losses, and check them against the one-process reference
        (:func:`backends.torch.replay.reference.check`). The measured run writes nothing, so the
        dumps cost it no time and no memory.

        Raises:
            backends.torch.replay.launch.ReplayError: a rank failed or the run timed out.
        """
        if is_group_request(request):
            return replay_group(request)
        job = replay_job(request)
        result = replay(job)
        if request.numerics:
            result.numerics = check_numerics(job)
        return result


NUMERICS_LR = 1e-2
"""SGD learning rate of the numerics run (the measured run's, ``ReplayJob.lr``, is 1e-3; a
learning rate changes no time and no memory). A step of staleness moves a gradient by about
``lr`` times the loss's curvature, so at 1e-2 a wrong weight version shows as a relative error
of 3e-3 or more in the shipped tests' models (``tests/test_numerics.py``), 30x the fp32
tolerance, while rounding stays near 1e-6."""


def check_numerics(job: ReplayJob) -> dict[str, Any]:
    """Replay ``job`` again at :data:`NUMERICS_LR` with gradient dumps and compare them with
    the one-process reference in another process (:func:`backends.torch.replay.reference.check`'s
    summary).

    Raises:
        backends.torch.replay.launch.ReplayError: the replay or the reference failed.
    """
    with scratch_dir("numerics") as dump:
        dumped = dataclasses.replace(job, dump_dir=str(dump), lr=NUMERICS_LR)
        replay(dumped)
        return run_ranks(
            "backends.torch.replay.reference:check",
            {"job": dumped.to_dict()},
            nproc=1,
            device=job.device,
            timeout_s=job.timeout_s,
            threads=job.threads,
            process_group=False,
        )[0]

"""What ``sim validate`` is asked to do (:class:`ValidationSpec`) and the mode a point runs in.

Six modes, one pipeline (:mod:`sim.validate.pipeline`):

* ``pipeline``: every rank of a one-stage-per-rank pipeline (our runtime; torch's own
  ``ScheduleGPipe`` / ``Schedule1F1B`` beside it with ``torch_builtin``);
* ``tensor_parallel``: ``stages x tensor_parallel`` ranks, Megatron-style layers;
* ``multi_stage``: ``v`` stage chunks per rank (``interleaved_1f1b``, ``zbv_zero_bubble``, ...),
  replayed by torch's ``_PipelineScheduleRuntime`` from the simulator's CSV;
* ``single_rank``: one stage alone in one process, sends and receives replaced by local
  buffers (``rank`` set), compared with that GPU's predicted busy time and peak memory;
* ``expert_parallel``: ``ep`` ranks, each a data-parallel replica holding ``E/ep`` routed
  experts, tokens dispatched and combined by all-to-all; the losses are also computed by one
  process on the same data (``losses_match``);
* ``context_parallel``: ``cp`` ranks, each ``s/cp`` tokens of every sequence, attention by the
  configuration's ``context_parallel_comm``; losses checked the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sim.errors import InputError, expect_int, expect_number, expect_type
from sim.point.config import PointConfig
from sim.point.stages import check_schedule_name


class Mode(StrEnum):
    """How a configuration is replayed (the ``mode`` column of ``validation.csv``)."""

    PIPELINE = "pipeline"
    TENSOR_PARALLEL = "tensor_parallel"
    MULTI_STAGE = "multi_stage"
    SINGLE_RANK = "single_rank"
    EXPERT_PARALLEL = "expert_parallel"
    CONTEXT_PARALLEL = "context_parallel"


@dataclass(frozen=True)
class ValidationSpec:
    """What to replay and how (every field has the command line's default).

    Attributes:
        schedules: schedules to replay (default: the file's).
        microbatches: micro-batch counts to replay (default: the file's); the global batch
            follows as ``m * b * w``.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        nproc: ranks; must equal ``stages x tensor_parallel`` (``None``: that product).
        iterations: measured iterations (optimizer steps).
        warmup_iterations: iterations run before measuring.
        torch_builtin: also run torch's own ScheduleGPipe / Schedule1F1B where they apply.
        timeout_s: hard limit per replay, seconds.
        rank: run only this pipeline stage, alone (``single_rank`` mode; ``None``: all ranks).
        stages: with ``rank``, the pipeline depth ``P`` it belongs to (``None``: the file's;
            another depth cuts the layers by the uniform partition).
        virtual_stages: stage chunks per rank ``v`` for every replayed schedule (``None``: the
            file's where the schedule takes it, else the schedule's smallest).
        numerics: check every replay's losses and gradients against the same model run in one
            process (:attr:`sim.replay.Measurement.numerics`).
    """

    schedules: tuple[str, ...] = ()
    microbatches: tuple[int, ...] = ()
    device: str = "cpu"
    nproc: int | None = None
    iterations: int = 3
    warmup_iterations: int = 1
    torch_builtin: bool = False
    timeout_s: float = 600.0
    rank: int | None = None
    stages: int | None = None
    virtual_stages: int | None = None
    numerics: bool = True

    def check(self) -> None:
        """Check the options alone, before any file is read (messages name the options).

        Raises:
            InputError: an unknown schedule (``--schedule``); ``--stages`` without
                ``--single-rank``; a negative rank or depth; with ``--single-rank``,
                ``--nproc`` other than 1 or ``--torch-builtin``.

        Example:
            >>> ValidationSpec(rank=1, stages=2).check()
            >>> ValidationSpec(stages=2).check()
            Traceback (most recent call last):
            ...
            sim.errors.InputError: option '--stages': --stages sets the depth of a --single-rank run; add --single-rank R
        """
        for name in self.schedules:  # the message names the value, so which --schedule
            check_schedule_name(name, file="command line", field="--schedule")
        if self.virtual_stages is not None and self.virtual_stages < 1:
            raise InputError(f"{self.virtual_stages}: must be >= 1", field="--virtual-stages")
        if self.rank is None:
            if self.stages is not None:
                raise InputError("--stages sets the depth of a --single-rank run; add "
                                 "--single-rank R", field="--stages")  # fmt: skip
            return
        if self.rank < 0:
            raise InputError(f"rank {self.rank} must be >= 0", field="--single-rank")
        if self.stages is not None and self.stages < 1:
            raise InputError(f"{self.stages} stages: must be >= 1", field="--stages")
        if self.nproc not in (None, 1):
            raise InputError(f"a single-rank run is one process, not {self.nproc}", field="--nproc")
        if self.torch_builtin:
            raise InputError("torch's schedules run whole pipelines only", field="--torch-builtin")


def mode_of(point: PointConfig, spec: ValidationSpec, virtual_stages: int) -> Mode:
    """The mode ``point`` replays in (module docstring); ``virtual_stages`` is its resolved
    schedule's stage chunks per rank (``Schedule.virtual_stages``).

    Example:
        >>> p = PointConfig(model="g", schedule="1f1b", stages=2, dp_width=1,
        ...     microbatch_size=1, microbatches=4, global_batch=4, memory_policy="none")
        >>> mode_of(p, ValidationSpec(), 1), mode_of(p, ValidationSpec(rank=0), 1)
        (<Mode.PIPELINE: 'pipeline'>, <Mode.SINGLE_RANK: 'single_rank'>)
        >>> mode_of(p, ValidationSpec(), 2)
        <Mode.MULTI_STAGE: 'multi_stage'>
        >>> mode_of(p.model_copy(update={"context_parallel": 2}), ValidationSpec(), 1)
        <Mode.CONTEXT_PARALLEL: 'context_parallel'>
    """
    if spec.rank is not None:
        return Mode.SINGLE_RANK
    if point.expert_parallel > 1:
        return Mode.EXPERT_PARALLEL
    if point.context_parallel > 1:
        return Mode.CONTEXT_PARALLEL
    if point.tensor_parallel > 1:
        return Mode.TENSOR_PARALLEL
    if virtual_stages > 1:
        return Mode.MULTI_STAGE
    return Mode.PIPELINE


def check_arguments(args: dict[str, Any]) -> None:
    """The arguments of :func:`sim.api.validate` (its ``locals()``), by type and range.

    Raises:
        InputError: naming the argument.
    """
    replayer = args["replayer"]
    if not callable(getattr(replayer, "replay", None)):
        raise InputError(
            "expected a replayer such as backends.torch.replayer.TorchReplayer(), got "
            f"{type(replayer).__name__}",
            field="replayer",
        )
    expect_type(args["config"], (str, os.PathLike), "config", "a winner.yaml path")
    if args["out"] is not None:
        expect_type(args["out"], (str, os.PathLike), "out", "a folder path")
    for name in ("schedules", "microbatches"):
        expect_type(args[name], (tuple, list), name, "a list (e.g. ('1f1b',) or [4, 8])")
    for i, name in enumerate(args["schedules"]):
        expect_type(name, str, f"schedules.{i}", "a schedule name")
    for i, m in enumerate(args["microbatches"]):
        expect_int(m, f"microbatches.{i}", 1)
    expect_type(args["device"], str, "device", "'cpu' or 'cuda'")
    for name, low in (("nproc", 1), ("rank", 0), ("stages", 1), ("virtual_stages", 1)):
        if args[name] is not None:
            expect_int(args[name], name, low)
    expect_int(args["iterations"], "iterations", 1)
    expect_int(args["warmup"], "warmup", 0)
    expect_number(args["timeout_s"], "timeout_s")
    for name in ("torch_builtin", "numerics"):
        expect_type(args[name], bool, name, "True or False")
    if args["on_row"] is not None and not callable(args["on_row"]):
        raise InputError("expected a function of one row, or None", field="on_row")

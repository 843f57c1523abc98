"""One pipeline rank alone: stage ``R`` of a ``P``-stage pipeline in one process on one device.

:class:`SingleRankRunner` is :class:`backends.torch.replay.runtime.StageRunner` with the
rank-to-rank messages replaced by local buffers, so one GPU can run exactly the action list (and the
memory policy) rank ``R`` runs in a ``P``-GPU pipeline, without the other ranks:

* a **receive** (a forward's input on stages ``> 0``, a backward's output gradient on stages
  ``< P-1``) returns a new buffer of the message's shape ``[b, seq_len, hidden]`` and dtype,
  cloned from a source filled once with fixed values (``N(0, 1)`` activations, ``N(0, 1e-3)``
  gradients, seeded by ``ReplayJob.seed``); activations require grad, as a received activation
  does. The clone is what the real receive's write costs: one buffer per message, alive as long
  as the stash holds it.
* a **send** keeps the sent tensor alive until the next optimizer step, as the multi-rank
  runtime keeps an ``isend``'s buffer until it waits on it there, then drops it.

So the measured time is this rank's own work (compute, recompute, optimizer, its swaps) with no
wait on another rank, and the measured memory is this rank's. :func:`run_single_rank` runs a
job in this process (the GPU ground-truth driver runs many this way);
:func:`backends.torch.replay.launch.replay` runs it in one worker process with a hard timeout.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from backends.torch.replay.job import ReplayJob, ReplayResult, collect_result
from backends.torch.replay.runtime import StageRunner, rank_program
from backends.torch.replay.worker import RankContext

ACT_STD = 1.0
"""Standard deviation of a received activation's values (an embedding's output scale)."""
GRAD_STD = 1e-3
"""Standard deviation of a received gradient's values."""


class SingleRankRunner(StageRunner):
    """Runs stage ``job.single_rank`` alone (module docstring).

    Args:
        job: the replay job; ``job.single_rank`` is the stage.
        ctx: the process's context (rank 0 of 1).

    Example (CPU, a 2-stage tiny GPT, the last stage alone):
        >>> job = ReplayJob(model={"layers": 2, "hidden": 32, "heads": 2, "seq_len": 8,
        ...     "vocab": 64}, stages=2, microbatches=2, single_rank=1, iterations=1,
        ...     warmup_iterations=0)
        >>> run_single_rank(job).action_counts
        [{'B': 2, 'F': 2, 'STEP': 1, 'wrong': 0}]
    """

    def __init__(self, job: ReplayJob, ctx: RankContext):
        super().__init__(job, ctx)
        self._sources: dict[bool, torch.Tensor] = {}

    def _source(self, backward: bool) -> torch.Tensor:
        """The fixed values every receive of this kind is cloned from (made once)."""
        if backward not in self._sources:
            shape, dtype = (
                (self.out_shape, self.out_dtype) if backward else (self.act_shape, self.act_dtype)
            )
            gen = torch.Generator().manual_seed(self.job.seed * 7919 + int(backward))
            if dtype.is_floating_point:
                values = torch.randn(shape, generator=gen) * (GRAD_STD if backward else ACT_STD)
            else:
                values = torch.zeros(shape)
            self._sources[backward] = values.to(device=self.dev, dtype=dtype)
        return self._sources[backward]

    def _send(self, t: torch.Tensor, dst: int, tag: int) -> None:
        self.pending.append((None, t.detach().contiguous()))

    def _recv(self, src: int, tag: int, backward: bool = False) -> torch.Tensor:
        buf = self._source(backward).clone()
        self.ready = time.perf_counter()
        return buf

    def _wait_sends(self) -> None:
        self.pending.clear()  # the buffers of this step's sends are dropped

    def _barrier(self) -> None:
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)


def run_single_rank(job: ReplayJob) -> ReplayResult:
    """Run ``job`` (``job.single_rank`` set) in this process on ``job.device`` and measure it.

    On CUDA the peak statistics are reset first, and ``peak_memory_bytes`` is
    ``torch.cuda.max_memory_allocated`` during the run (``memory[0]["cuda_max_reserved"]``:
    ``max_memory_reserved``); call ``torch.cuda.empty_cache()`` between runs so that one run's
    cached blocks do not count in the next one's reserved peak.

    Raises:
        ValueError: ``job.single_rank`` is None.
        torch.cuda.OutOfMemoryError: the rank does not fit.
    """
    if job.single_rank is None:
        raise ValueError("run_single_rank needs job.single_rank")
    dev = torch.device(job.device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    with tempfile.TemporaryDirectory(prefix="pipesim-single-") as work:
        runner = SingleRankRunner(job, RankContext(0, 1, dev, Path(work)))
        stats = runner.run(rank_program(job, runner.rank))
    return collect_result(job, [stats])


def run_rank(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function for :func:`backends.torch.replay.launch.run_ranks` of a job with
    ``single_rank`` (one process, no process group)."""
    job = ReplayJob.from_dict(payload)
    runner = SingleRankRunner(job, ctx)
    return runner.run(rank_program(job, runner.rank))

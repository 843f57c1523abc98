"""What ``sim validate`` asks of a hardware replay, as an interface the simulator owns.

The simulator never imports a backend: :mod:`sim.validate` describes each run as a
:class:`ReplayRequest`, asks a :class:`Replayer` whether it can run it (:meth:`Replayer.problems`,
before any process starts) and then to run it (:meth:`Replayer.replay`), and reads the answer
through :class:`Measurement`. ``backends.torch.replay.replayer.TorchReplayer`` implements it with
torch (gloo on CPU, NCCL on GPUs); the command line (:mod:`sim.cli`, the only part of ``sim`` that
imports ``backends``) hands it in, as does a notebook::

    from backends.torch.replay.replayer import TorchReplayer
    sim.api.validate("results/x/winner.yaml", replayer=TorchReplayer())

Units: seconds and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sim.parallel.layout import ParallelLayout


class ReplayFailed(RuntimeError):
    """A replay started and failed: a rank raised or crashed, or the run timed out."""


@dataclass(frozen=True)
class ReplayProblem:
    """Why a replayer cannot run a request.

    Attributes:
        field: the :class:`ReplayRequest` field at fault (``memory_policy``, ``schedule``,
            ``stages``, ``model``, ``microbatch_size``, ``tensor_parallel`` ...).
        reason: one sentence, e.g. ``"memory_policy: 'd2d_swap' uses d2d_swap; the torch
            replay runs only none, recompute, cpu_swap"``.
    """

    field: str
    reason: str


@dataclass(frozen=True)
class ReplayRequest:
    """One configuration to run on real devices, as the simulator resolved it.

    Attributes:
        model: what to build: the trace's ``provenance.model`` (a GPT/BERT shape, or a
            user's model spec with ``kind: user``), written by ``sim profile``.
        boundaries: start layer of each stage (``sim.parallel.partition.Partition.boundaries``).
        schedule: schedule name (``sim.schedules.registry``).
        stages: pipeline depth ``p``.
        microbatches: micro-batches per iteration ``m``.
        microbatch_size: samples per micro-batch ``b``.
        memory_policy: the experiment's ``memory_policy`` string.
        dtype: ``fp32``, ``fp16`` or ``bf16``.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        iterations: measured iterations (optimizer steps).
        warmup_iterations: iterations run before measuring.
        runtime: ``ours`` (the simulator's action lists, exactly) or ``torch``
            (torch.distributed.pipelining's own schedules).
        tensor_parallel: ranks per stage ``t``.
        sequence_parallel: Megatron's sequence parallelism with ``t > 1``.
        dp_width: data-parallel replicas ``w`` (replayed with expert parallelism, whose
            ranks are also the replicas: ``w = ep``).
        expert_parallel: expert-parallel group size ``ep`` (routed experts split over it,
            tokens exchanged by all-to-all).
        context_parallel: context-parallel group size ``cp`` (each rank ``s/cp`` tokens of
            every sequence).
        context_parallel_comm: how attention gets the other ranks' keys and values:
            ``p2p`` (ring), ``all_gather`` or ``a2a`` (:mod:`sim.parallel.context`).
        virtual_stages: stage chunks per rank ``v``.
        single_rank: run only this stage, alone in one process (``None``: every rank).
        attention: force the attention kernel (``flash`` or ``math``; ``None``: the backend's
            choice).
        threads: CPU threads per rank (``None``: the backend's default).
        timeout_s: hard limit on the run, seconds.
        numerics: also check the replay's losses and gradients against the same model run in
            one process (:attr:`Measurement.numerics`).
    """

    model: dict[str, Any]
    boundaries: tuple[int, ...]
    schedule: str
    stages: int
    microbatches: int
    microbatch_size: int
    memory_policy: str = "none"
    dtype: str = "fp32"
    device: str = "cpu"
    iterations: int = 3
    warmup_iterations: int = 1
    runtime: str = "ours"
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    dp_width: int = 1
    expert_parallel: int = 1
    context_parallel: int = 1
    context_parallel_comm: str = "p2p"
    virtual_stages: int = 1
    single_rank: int | None = None
    attention: str | None = None
    threads: int | None = None
    timeout_s: float = 600.0
    numerics: bool = False

    @property
    def layout(self) -> ParallelLayout:
        """The request's parallel layout (:class:`~sim.parallel.layout.ParallelLayout`): its
        flat fields (the request's transport form, as in ``winner.yaml``) as the one record
        every layer asks."""
        return ParallelLayout.from_flat(self)

    @property
    def ranks(self) -> int:
        """Processes the run takes: 1 for a single rank, else ``stages x tensor_parallel x
        context_parallel x dp_width``.

        Example:
            >>> ReplayRequest({}, (0, 2), "1f1b", 2, 4, 1, tensor_parallel=2).ranks
            4
            >>> ReplayRequest({}, (0,), "1f1b", 1, 4, 1, dp_width=2, expert_parallel=2).ranks
            2
        """
        if self.single_rank is not None:
            return 1
        return self.layout.gpus


class Measurement(Protocol):
    """What a replay measured (seconds, bytes); one entry per rank in the lists."""

    iteration_time_s: float
    """Median seconds per measured iteration (``m`` micro-batches)."""
    iteration_times_s: list[float]
    peak_memory_bytes: list[float]
    memory: list[dict[str, float]]
    """Per rank, the parts of its memory (``cuda_max_reserved`` on GPUs ...)."""
    losses: list[float]
    reference_losses: list[float]
    """The same losses from one process on the same data, where the replay runs one (expert
    and context parallelism: the check that the parallel run computes the same model); empty
    otherwise."""
    notes: list[str]
    device_name: str
    action_spans: list[list[tuple[str, float, float, float]]]
    """Per rank, ``(action, start_s, ready_s, end_s)`` of every action (may be empty)."""
    numerics: dict[str, Any]
    """The numerics check: ``numerics`` (``ok``, ``FAILED`` or ``skipped`` with a
    ``reason``), ``loss_max_error``, ``grad_max_error`` (relative, worst over iterations and
    parameters), ``grad_worst``, ``tolerance``, ``checked_gradients`` (empty: not asked)."""

    @property
    def all_actions_done(self) -> bool:
        """Every rank ran exactly the actions of its program."""
        ...


class Replayer(Protocol):
    """A backend that runs :class:`ReplayRequest` on real devices."""

    def check_device(self, device: str, nproc: int) -> None:
        """Check that ``device`` can run ``nproc`` ranks here.

        Raises:
            sim.errors.InputError: naming ``--device`` (or ``--nproc``).
        """
        ...

    def runtimes(self, request: ReplayRequest, *, builtin: bool) -> tuple[str, ...]:
        """The runtimes that replay ``request``'s schedule, ours first; with ``builtin`` also
        the framework's own schedule where it has one."""
        ...

    def problems(self, request: ReplayRequest) -> list[ReplayProblem]:
        """Why ``request`` cannot be replayed (empty when it can). Starts nothing."""
        ...

    def replay(self, request: ReplayRequest) -> Measurement:
        """Run ``request`` and measure it.

        Raises:
            ReplayFailed: a rank failed or the run timed out (no process is left).
        """
        ...

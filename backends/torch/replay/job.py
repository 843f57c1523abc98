"""What a hardware replay is asked to do (:class:`ReplayJob`) and what it measured
(:class:`ReplayResult`).

Pure data: no torch import, so the CLI can build and validate a job without starting torch.

What the replay can run of a schedule is read from its class (``sim.schedules``), never from its
name: :func:`torch_runs` (torch's own class for it, ``torch_class``), :func:`needs_torch_csv`
(several stage chunks per rank), :func:`tp_runs`; the weight versions follow its
``version_rule`` (:mod:`backends.torch.replay.versions`). Likewise a memory policy's class says
whether it keeps everything (:func:`sim.memory.registry.keeps_everything`).
"""

from __future__ import annotations

import math
from dataclasses import InitVar, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from backends.torch.parallel.tensor_split import tp_problem
from sim.memory.registry import keeps_everything, replay_problems
from sim.schedules.base import VERSION_RULES, Schedule
from sim.schedules.registry import REGISTRY, get_schedule


def schedule_class(name: str) -> type[Schedule] | None:
    """The schedule class registered as ``name`` (aliases too), or None if there is none
    (:meth:`ReplayJob.problems` says so)."""
    try:
        return get_schedule(name)
    except KeyError:
        return None


def torch_runs(cls: type[Schedule]) -> bool:
    """Whether torch.distributed.pipelining runs ``cls`` with its own class (``torch_class``)
    from one stage per rank: the replay's ``backend="torch"`` without ``torch_csv``."""
    return cls.torch_class is not None


def needs_torch_csv(cls: type[Schedule]) -> bool:
    """Whether ``cls`` holds several stage chunks per rank (``min_virtual_stages > 1``), which
    only torch's ``_PipelineScheduleRuntime`` loading our CSV replays (``torch_csv``)."""
    return cls.min_virtual_stages > 1


def tp_runs(cls: type[Schedule]) -> bool:
    """Whether the tensor-parallel replay (:mod:`backends.torch.replay.tp`: one weight copy, F, B
    and STEP actions) runs ``cls``: flushed, one stage chunk per rank, backward not split."""
    return (
        cls.synchronous
        and cls.version_rule == "single"
        and cls.min_virtual_stages == 1
        and not cls.splits_backward
        and not cls.overlaps_pairs
    )


def names_where(test: Any) -> tuple[str, ...]:
    """The registered schedules ``test(cls)`` accepts, for messages."""
    return tuple(c.name for c in REGISTRY.classes() if test(c))


def policy_problems(text: str, stages: int) -> list[str]:
    """Why the replay cannot run memory policy ``text`` on ``stages`` stages (empty if it can).

    The string is read by the simulator's own parser, and each policy's class says whether the
    replay runs it (``sim.memory.registry.replay_problems``).
    """
    return replay_problems(text, stages)


def tp_problems(job: ReplayJob) -> list[str]:
    """Why the tensor-parallel replay cannot run ``job`` (``job.tensor_parallel > 1``)."""
    t, out = job.tensor_parallel, []
    cls = schedule_class(job.schedule)
    if job.stages != 1:
        out.append(f"stages: the tensor-parallel replay runs one stage, not {job.stages}")
    if job.nproc != job.stages * t:
        out.append(f"nproc: must be stages x tensor_parallel = {job.stages * t}")
    if job.backend != "ours" or cls is None or not tp_runs(cls):
        out.append(
            f"schedule: the tensor-parallel replay runs {names_where(tp_runs)} (backend ours)"
        )
    if not keeps_everything(job.memory_policy):
        out.append("memory_policy: the tensor-parallel replay runs 'none'")
    if isinstance(job.model, dict):
        # sizes the dict leaves out get ``t`` (divisible by ``t``): the spec built from it
        # is checked again by backends.torch.parallel.tensor with ModelSpec's defaults
        model = {"kind": "gpt", **dict.fromkeys(("heads", "hidden", "vocab", "seq_len"), t)}
        model.update(job.model)
        if problem := tp_problem(model, t, job.sequence_parallel):
            out.append(f"model: {problem}")
    return out


@dataclass
class ReplayJob:
    """One configuration to run on real devices (keyword-only; every field has a default).

    Attributes:
        model: the model: a dict of :class:`backends.torch.models.transformer.ModelSpec` fields, a
            ``ModelSpec``, or a ``sim.trace.model_presets.MODEL_PRESETS`` name.
        boundaries: start layer of each stage (as ``sim.parallel.partition.Partition.boundaries``);
            ``None`` splits the ``layers + 2`` chain evenly.
        schedule: ``gpipe``, ``1f1b``, ``pipedream_2bw``, ``pipedream`` or ``pipemare`` (any
            name ``sim.schedules.registry.get_schedule`` accepts).
        stages: pipeline depth ``p`` (ranks; one stage per rank unless ``virtual_stages``).
        microbatches: micro-batches per iteration ``m``.
        microbatch_size: samples per micro-batch ``b``.
        iterations: measured iterations (optimizer steps; ``m`` micro-batches each).
        warmup_iterations: iterations run before measuring.
        memory_policy: the simulator's ``memory_policy`` string using ``none``, ``recompute``
            and ``cpu_swap`` (``recompute:full:2``, ``cpu_swap:0.5``, ``none|recompute``); what
            the replay runs differently is in the result's notes.
        device: ``cpu`` (gloo) or ``cuda`` (NCCL, rank ``r`` on GPU ``r``).
        nproc: ranks; ``None`` means ``stages`` (the only supported layout).
        backend: ``ours`` (:mod:`backends.torch.replay.runtime`, every schedule) or ``torch``
            (torch's ``ScheduleGPipe`` / ``Schedule1F1B``).
        torch_csv: with ``backend="torch"``, run ``_PipelineScheduleRuntime`` loading our
            compute-only CSV (``sim.schedules.csv_io``) instead of torch's own schedule class;
            the only way to replay the multi-stage schedules (:func:`needs_torch_csv`).
        virtual_stages: stage chunks per rank ``v`` (None: the schedule's smallest, 1 or 2);
            ``boundaries`` then has ``p * v`` entries.
        seed: model and data seed.
        lr: SGD learning rate (no momentum, no weight decay).
        dtype: ``fp32``, ``fp16`` or ``bf16`` parameters and activations.
        threads: CPU threads per rank; ``None`` = cores // nproc (at least 1).
        timeout_s: hard limit on the whole run in seconds; then every rank is killed.
        pg_timeout_s: process-group timeout in seconds (a blocked send/recv fails after it).
        dump_dir: if set, every rank saves its gradients at each step and its final weights to
            ``dump_dir/rank<r>.pt`` (tests compare them with a single-process run).
        fail_on: testing aid: the rank executing this action (e.g. ``"1F0"``) raises.
        single_rank: run only stage ``single_rank`` (``0 .. stages-1``) of the ``stages``-stage
            pipeline, in one process on one device (:mod:`backends.torch.replay.single_rank`): sends
            and receives become local buffers of the right shape and dtype. ``nproc`` is 1.
        attention: force torch's scaled-dot-product attention kernel, ``flash`` or ``math``
            (:mod:`backends.torch.models.attention`); ``None`` lets torch choose.
        tensor_parallel: ranks per stage ``t``; ``t > 1`` runs
            :mod:`backends.torch.replay.tp` (one stage, ``nproc = t``, GPT, ``gpipe`` or
            ``1f1b``, memory policy ``none``).
        sequence_parallel: with ``t > 1``, Megatron's sequence parallelism.
        check: raise ``ValueError`` listing :meth:`problems` (``False``: build the job anyway,
            to ask it what is wrong; not a field, not in :meth:`to_dict`).
    """

    model: dict[str, Any] | str = field(default_factory=dict)
    boundaries: list[int] | None = None
    schedule: str = "gpipe"
    stages: int = 2
    microbatches: int = 4
    microbatch_size: int = 1
    iterations: int = 3
    warmup_iterations: int = 1
    memory_policy: str = "none"
    device: str = "cpu"
    nproc: int | None = None
    backend: str = "ours"
    torch_csv: bool = False
    seed: int = 0
    lr: float = 1e-3
    dtype: str = "fp32"
    threads: int | None = None
    timeout_s: float = 300.0
    pg_timeout_s: float = 60.0
    dump_dir: str | None = None
    fail_on: str | None = None
    virtual_stages: int | None = None
    single_rank: int | None = None
    attention: str | None = None
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    check: InitVar[bool] = True

    def __post_init__(self, check: bool) -> None:
        if not isinstance(self.model, (dict, str)):
            self.model = (
                self.model.to_dict() if hasattr(self.model, "to_dict") else asdict(self.model)
            )
        if self.nproc is None:
            self.nproc = 1 if self.single_rank is not None else self.stages * self.tensor_parallel
        if self.dump_dir is not None:
            self.dump_dir = str(Path(self.dump_dir).resolve())
        try:
            self.schedule = get_schedule(self.schedule).name
        except KeyError:
            pass  # reported by problems()
        problems = self.problems() if check else []
        if problems:
            raise ValueError("invalid replay job: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Every invalid field as ``'field: reason'``."""
        # Long: a flat list of independent field checks; no seam.
        out = []
        try:
            sched = get_schedule(self.schedule)(self.stages, self.microbatches, self.virtual_stages)
        except (KeyError, ValueError) as exc:
            out.append(f"schedule: {exc}")
            sched = None
        cls = type(sched) if sched is not None else schedule_class(self.schedule)
        if cls is not None and cls.version_rule not in VERSION_RULES:
            out.append(
                f"schedule: {self.schedule} declares version_rule {cls.version_rule!r}; the "
                f"replay keeps weights by {', '.join(VERSION_RULES)}"
            )
        multi = sched is not None and sched.virtual_stages > 1
        if multi and not (self.backend == "torch" and self.torch_csv):
            out.append(
                f"schedule: {self.schedule} (stage chunks per rank) replays only with "
                "backend 'torch' and torch_csv (torch's _PipelineScheduleRuntime)"
            )
        if multi and not keeps_everything(self.memory_policy):
            out.append("memory_policy: only 'none' with stage chunks per rank")
        n_stages = sched.num_stages if sched is not None else self.stages
        for name in ("stages", "microbatches", "microbatch_size", "iterations"):
            if getattr(self, name) < 1:
                out.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.warmup_iterations < 0:
            out.append(f"warmup_iterations: must be >= 0, got {self.warmup_iterations}")
        if self.single_rank is not None:
            if not 0 <= self.single_rank < self.stages:
                out.append(f"single_rank: must be in 0..{self.stages - 1}, got {self.single_rank}")
            if self.nproc != 1:
                out.append(f"nproc: a single-rank run is one process, got {self.nproc}")
            if self.backend != "ours":
                out.append("backend: a single-rank run needs our runtime ('ours')")
        if self.tensor_parallel < 1:
            out.append(f"tensor_parallel: must be >= 1, got {self.tensor_parallel}")
        if self.tensor_parallel > 1:
            out += tp_problems(self)
        elif self.single_rank is None and self.nproc != self.stages:
            out.append(f"nproc: one stage per rank, so nproc must equal stages ({self.stages})")
        if self.attention not in (None, "flash", "math"):
            out.append(f"attention: {self.attention!r} must be 'flash', 'math' or None")
        out += policy_problems(self.memory_policy, self.stages)
        if self.backend not in ("ours", "torch"):
            out.append(f"backend: {self.backend!r} must be 'ours' or 'torch'")
        if self.backend == "torch" and not (
            cls is not None and (torch_runs(cls) or (self.torch_csv and needs_torch_csv(cls)))
        ):
            out.append(
                f"schedule: backend 'torch' runs only {names_where(torch_runs)}, "
                f"not {self.schedule!r}"
            )
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            out.append(f"device: {self.device!r} must be 'cpu' or 'cuda'")
        if self.boundaries is not None and len(self.boundaries) not in (n_stages, n_stages + 1):
            out.append(
                f"boundaries: need one start layer per stage ({n_stages}), got {self.boundaries}"
            )
        for name in ("timeout_s", "pg_timeout_s"):
            if not getattr(self, name) > 0:
                out.append(f"{name}: must be > 0 seconds")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict; :meth:`from_dict` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayJob:
        """Build a job from a dict; unknown keys raise ``ValueError`` naming them."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown replay job fields {unknown}; known: {sorted(names)}")
        return cls(**data)


@dataclass
class ReplayResult:
    """Measurements of one replay.

    Attributes:
        iteration_time_s: median seconds per iteration (``m`` micro-batches) over the measured
            iterations; an iteration ends when the last rank finishes its optimizer step(s).
        iteration_times_s: every measured iteration, in order.
        peak_memory_bytes: per rank: ``torch.cuda.max_memory_allocated`` on GPUs; on CPU
            parameter bytes x peak weight versions + gradient bytes + peak live saved-tensor
            bytes (see ``memory``).
        memory: per rank, the parts: ``param_bytes``, ``versions``, ``grad_bytes``,
            ``act_peak_bytes``, ``host_act_peak_bytes`` (swapped), ``cuda_max_allocated``.
        action_counts: per rank, executed actions by op (``F``, ``B``, ``STEP``); our runtime
            adds ``wrong``, actions run that were not due plus due ones never run
            (``backends.torch.replay.runtime.action_tally``).
        expected_action_counts: per rank, the counts due, from the job alone (every
            micro-batch's F and B, the schedule's optimizer steps), not from the program run.
        losses: loss of every micro-batch in execution order (last stage), unscaled.
        notes: caveats of this measurement.
        job: the job, as a dict.
        device_name: what ran it (``cpu-rank`` or the GPU's name).
        wall_s: seconds from the first barrier to the last, measured on rank 0.
        reference_losses: the same losses from one process on the same data, where the replay
            runs one (:mod:`backends.torch.replay.group`); empty otherwise.
        action_spans: per rank, ``(action, start_s, ready_s, end_s)`` of every executed action
            (our runtime), seconds from the common start barrier: ``ready_s`` is when its
            input (received activation or gradient) had arrived, so ``end_s - ready_s`` is the
            action's own time and ``ready_s - start_s`` its wait.
        numerics: the numerics check against the one-process reference
            (:func:`backends.torch.replay.reference.compare`; ``{"numerics": "skipped", "reason":
            ...}`` when not run).
    """

    iteration_time_s: float
    iteration_times_s: list[float]
    peak_memory_bytes: list[float]
    memory: list[dict[str, float]]
    action_counts: list[dict[str, int]]
    expected_action_counts: list[dict[str, int]]
    losses: list[float]
    notes: list[str]
    job: dict[str, Any]
    device_name: str = ""
    wall_s: float = math.nan
    action_spans: list[list[tuple[str, float, float, float]]] = field(default_factory=list)
    numerics: dict[str, Any] = field(default_factory=dict)
    reference_losses: list[float] = field(default_factory=list)

    @property
    def throughput_samples_per_s(self) -> float:
        """Samples per second: ``m * b / iteration_time_s``."""
        return self.job["microbatches"] * self.job["microbatch_size"] / self.iteration_time_s

    @property
    def all_actions_done(self) -> bool:
        """True when every rank executed exactly the actions of its program."""
        return self.action_counts == self.expected_action_counts

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict, with throughput added."""
        return {**asdict(self), "throughput_samples_per_s": self.throughput_samples_per_s}


def _iteration_ends(step_times: list[float], iterations: int) -> list[float]:
    """Time each iteration ended on one rank: its last STEP of that iteration."""
    per = max(1, len(step_times) // iterations)
    return [step_times[(k + 1) * per - 1] for k in range(iterations)]


def collect_result(job: ReplayJob, ranks: list[dict[str, Any]]) -> ReplayResult:
    """Combine the ranks' statistics into a :class:`ReplayResult`.

    An iteration ends when the slowest rank finishes it; iteration ``k`` lasts from the end of
    iteration ``k-1`` (the common start barrier for ``k = 0``) to its end. Ranks run on one
    host, whose ``time.perf_counter`` (CLOCK_MONOTONIC) is shared by all processes.
    """
    total = job.warmup_iterations + job.iterations
    ends = [
        max(e) for e in zip(*(_iteration_ends(r["step_times"], total) for r in ranks), strict=True)
    ]
    starts = [max(r["start"] for r in ranks), *ends[:-1]]
    times = [e - s for s, e in zip(starts, ends, strict=True)][job.warmup_iterations :]
    ordered = sorted(times)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    notes = [n for r in ranks for n in r.get("notes", [])]
    if job.single_rank is not None:
        notes.append(
            f"single rank: stage {job.single_rank} of {job.stages} alone; receives are local "
            "buffers of fixed values, sends are held until the optimizer step"
        )
    cls = schedule_class(job.schedule)
    steps = cls(job.stages, job.microbatches, job.virtual_stages).optimizer_steps(1) if cls else 1
    if steps > 1 and steps == job.microbatches:
        notes.append(
            f"{job.schedule} steps after every micro-batch; an iteration is m micro-batches"
        )
    elif steps > 1:
        notes.append(
            f"{job.schedule} takes {steps} optimizer steps per iteration of m micro-batches"
        )
    if job.device.startswith("cpu"):
        notes.append(
            "CPU memory measured: the resident high-water mark over the run's start plus the "
            "stage's weights (backends.torch.replay.cpu_memory); counted_peak_bytes: parameter bytes "
            "x (peak versions + 1 gradient copy) + peak live saved-for-backward bytes"
        )
    return ReplayResult(
        iteration_time_s=median,
        iteration_times_s=times,
        peak_memory_bytes=[r["peak_memory_bytes"] for r in ranks],
        memory=[r["memory"] for r in ranks],
        action_counts=[r["counts"] for r in ranks],
        expected_action_counts=[r["expected"] for r in ranks],
        losses=next((r["losses"] for r in reversed(ranks) if r["losses"]), []),  # the loss rank
        notes=notes,
        job=job.to_dict(),
        device_name=ranks[0].get("device_name", ""),
        wall_s=max(r["end"] for r in ranks) - min(r["start"] for r in ranks),
        action_spans=[
            [
                (a, t0 - starts[0], tr - starts[0], t1 - starts[0])
                for a, t0, tr, t1 in r.get("spans", [])
            ]
            for r in ranks
        ],
    )

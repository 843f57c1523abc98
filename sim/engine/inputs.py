"""What the engine runs: a resolved configuration (:class:`SimInput`) and its parts.

:class:`StageCost` is one stage's per-micro-batch compute and boundary sizes;
:class:`StageReplica` is one (replica, stage) as the engine runs it: its GPU, host, memory plan,
cost and action list, so that processes pass one record instead of ``(r, s, gpu, plan)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from sim.hardware.topology import Topology
from sim.memory.plan import StagePlan
from sim.schedules.action import Action, Program, flatten
from sim.trace.schema import LayerProfile

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket, ``bucket_cap_mb=25`` (MiB; torch.nn.parallel.
DistributedDataParallel docs)."""


DEFAULT_INPUT_SHARE = 0.5
"""Share of a backward that is its input gradient (I) when a trace lacks ``bwd_input_s`` /
``bwd_weight_s``: an assumption. A transformer layer's input-gradient and weight-gradient GEMMs
have the same FLOPs (each equals the forward's), and Zero Bubble's schedules are designed for
``T_I = T_W`` (Qi et al. ICLR'24 §2; schedules.md §2.7)."""


@dataclass(frozen=True)
class StageCost:
    """Per-micro-batch compute and boundary sizes of one stage.

    Attributes:
        fwd_s: forward seconds.
        bwd_s: backward seconds (B, or I + W).
        out_bytes: bytes of the activation this stage sends to the next one.
        in_bytes: bytes of the activation it receives (the gradient it sends back).
        tp_fwd: tensor-parallel collectives of a forward, ``(kind, bytes each, count)``
            (:func:`sim.tensor.megatron.aggregate`); empty without tensor parallelism.
        tp_bwd: the same for a backward (B, or I).
        bwd_input_s: seconds of the input-gradient part I of a split backward; None when the
            trace does not split it (then :attr:`input_s` assumes half of ``bwd_s``).
        bwd_weight_s: seconds of the weight-gradient part W; None likewise.
    """

    fwd_s: float
    bwd_s: float
    out_bytes: float
    in_bytes: float
    tp_fwd: tuple[tuple[str, float, int], ...] = ()
    tp_bwd: tuple[tuple[str, float, int], ...] = ()
    bwd_input_s: float | None = None
    bwd_weight_s: float | None = None

    @property
    def input_s(self) -> float:
        """Seconds of an I action: ``bwd_input_s``, or the assumption ``bwd_s / 2``
        (:data:`DEFAULT_INPUT_SHARE`) when the trace lacks the split."""
        return self.bwd_s * DEFAULT_INPUT_SHARE if self.bwd_input_s is None else self.bwd_input_s

    @property
    def weight_s(self) -> float:
        """Seconds of a W action: ``bwd_weight_s``, or ``bwd_s - input_s``."""
        return self.bwd_s - self.input_s if self.bwd_weight_s is None else self.bwd_weight_s

    @property
    def has_split(self) -> bool:
        """Whether I and W times come from the trace (not the default assumption)."""
        return self.bwd_input_s is not None and self.bwd_weight_s is not None

    @classmethod
    def from_layers(cls, layers: tuple[LayerProfile, ...], in_bytes: float) -> StageCost:
        """Sum of the layers' forward and backward seconds; the last layer's output bytes.

        The I/W split is summed when every layer has both ``bwd_input_s`` and
        ``bwd_weight_s``; otherwise it is left None (the default assumption applies)."""
        split = all(x.bwd_input_s is not None and x.bwd_weight_s is not None for x in layers)
        return cls(
            sum(x.fwd_s for x in layers),
            sum(x.bwd_s for x in layers),
            layers[-1].out_bytes,
            in_bytes,
            bwd_input_s=sum(x.bwd_input_s or 0.0 for x in layers) if split else None,
            bwd_weight_s=sum(x.bwd_weight_s or 0.0 for x in layers) if split else None,
        )


STEP_BARRIERS = ("none", "before_update", "after_update")
"""Where the stage replicas of one pipeline replica wait for each other at the optimizer step
(:attr:`PipelineRuntime.step_barrier`)."""


@dataclass(frozen=True)
class PipelineRuntime:
    """What the training framework's pipeline engine does around the actions (engine-level:
    :mod:`sim.framework` sets it; the default is torch pipelining as ``sim validate`` replays).

    Attributes:
        blocking_p2p: stage-boundary sends are exchanged at action boundaries, as NCCL
            ``send``/``recv`` that the rank waits on: a send starts only once the receiving
            rank has reached the action that consumes it (posted its receive), and the sending
            rank's next action waits until the send is complete. False: a send starts when its
            action ends and nothing waits for it (torch pipelining's ``isend``).
        sync_after_p2p: the host synchronizes with the device after every exchange of sends and
            receives (a host/device sync point before the next action).
        sync_before_forward: the host synchronizes with the device before every forward.
        sync_resume_s: seconds the device idles after a host sync point until the host has
            issued the next kernel (a placeholder for the host model, which refines it).
        tied_grad_bytes: gradient bytes all-reduced between the first and the last stage of a
            replica (per tensor rank) at each optimizer step (a word embedding kept on both
            ends); 0: none.
        tied_after_dp: the tied all-reduce runs after the data-parallel gradient reduction
            (else before it).
        tied_groups: further gradients kept equal across stages, ``((stages, bytes), ...)``:
            parameters several layers of the model share whose holders sit on several ranks
            (``sim.trace.shared.place_shared``), all-reduced between those stages' GPUs at each
            optimizer step like ``tied_grad_bytes``.
        step_barrier: ``"before_update"``: every stage replica of a pipeline replica waits for
            all of them before its optimizer update (a global norm or overflow all-reduce);
            ``"after_update"``: after it (a loss broadcast over the pipeline); ``"none"``.
        step_transient: GPU bytes the optimizer step allocates per gradient byte while it
            runs (fp32 gradient copies of a mixed-precision optimizer), freed after it.
    """

    blocking_p2p: bool = False
    sync_after_p2p: bool = False
    sync_before_forward: bool = False
    sync_resume_s: float = 0.0
    tied_grad_bytes: float = 0.0
    tied_after_dp: bool = False
    tied_groups: tuple[tuple[tuple[int, ...], float], ...] = ()
    step_barrier: str = "none"
    step_transient: float = 0.0

    def __post_init__(self) -> None:
        if self.step_barrier not in STEP_BARRIERS:
            raise ValueError(
                f"step_barrier must be one of {STEP_BARRIERS}, not {self.step_barrier!r}"
            )
        if min(self.sync_resume_s, self.tied_grad_bytes, self.step_transient) < 0:
            raise ValueError("sync_resume_s, tied_grad_bytes and step_transient must be >= 0")
        if any(len(set(st)) < 2 or size < 0 for st, size in self.tied_groups):
            raise ValueError("tied_groups: each needs two stages or more and bytes >= 0")

    def all_tied(self, stages: int) -> tuple[tuple[tuple[int, ...], float], ...]:
        """Every tied all-reduce as ``(stages, bytes)``: the word embedding between the first
        and the last stage (``tied_grad_bytes``), then :attr:`tied_groups`.

        Example:
            >>> PipelineRuntime(tied_grad_bytes=8.0, tied_groups=(((1, 2), 4.0),)).all_tied(4)
            (((0, 3), 8.0), ((1, 2), 4.0))
        """
        word = (((0, stages - 1), self.tied_grad_bytes),) if self.tied_grad_bytes > 0 else ()
        return word + self.tied_groups

    @property
    def syncs(self) -> bool:
        """Whether the host synchronizes with the device anywhere in the pipeline."""
        return self.sync_after_p2p or self.sync_before_forward


@dataclass(frozen=True)
class SimInput:
    """One configuration, fully resolved.

    Attributes:
        topology: the server.
        costs: per stage (``p * v`` stages with ``v`` stage chunks per rank).
        program: per-rank action lists, STEP included (rank = stage when ``v = 1``).
        microbatches: micro-batches per iteration (m).
        placement: GPU index per ``[replica][stage]``; the stages of one rank share a GPU.
        plans: memory plan per ``[replica][stage]``.
        dp_bucket_bytes: size of the gradient buckets whose all-reduce overlaps the backward
            that ends an optimizer step (PyTorch DDP's ``bucket_cap_mb=25`` default: 25 MiB);
            0 reduces all gradients at the step, after the backward.
        tensor_groups: GPU index per ``[replica][stage][tensor rank]`` with tensor
            parallelism (rank 0's is ``placement``); empty without.
        tensor_plans: memory plan per ``[replica][stage][tensor rank]`` (rank 0's is
            ``plans``); empty without tensor parallelism.
        runtime: what the framework's pipeline engine does around the actions
            (:class:`PipelineRuntime`).
    """

    topology: Topology
    costs: tuple[StageCost, ...]
    program: Program
    microbatches: int
    placement: tuple[tuple[int, ...], ...]
    plans: tuple[tuple[StagePlan, ...], ...]
    dp_bucket_bytes: float = DDP_BUCKET_BYTES
    tensor_groups: tuple[tuple[tuple[int, ...], ...], ...] = ()
    tensor_plans: tuple[tuple[tuple[StagePlan, ...], ...], ...] = ()
    runtime: PipelineRuntime = PipelineRuntime()

    @cached_property
    def stages(self) -> int:
        return len(self.costs)

    @cached_property
    def dp_width(self) -> int:
        return len(self.placement)

    @cached_property
    def tensor_parallel(self) -> int:
        """Tensor-parallel size ``t`` (1 without ``tensor_groups``)."""
        return len(self.tensor_groups[0][0]) if self.tensor_groups else 1

    def gpu_index(self, r: int, s: int, k: int = 0) -> int:
        """GPU of tensor rank ``k`` of stage ``s`` of replica ``r``."""
        return self.tensor_groups[r][s][k] if self.tensor_groups else self.placement[r][s]

    @cached_property
    def stage_ranks(self) -> tuple[int, ...]:
        """The rank (index into :attr:`program`) that runs each stage.

        Raises:
            ValueError: a stage appears on no rank or on two.
        """
        owner: dict[int, int] = {}
        for rank, actions in enumerate(self.program):
            for a in flatten(actions):
                if owner.setdefault(a.stage, rank) != rank:
                    raise ValueError(
                        f"stage {a.stage} appears on ranks {owner[a.stage]} and {rank}"
                    )
        missing = [s for s in range(self.stages) if s not in owner]
        if missing:
            raise ValueError(f"stages {missing} appear on no rank of the program")
        return tuple(owner[s] for s in range(self.stages))

    def replicas(self) -> list[StageReplica]:
        """Every (replica, stage, tensor rank), replica-major, then stage."""
        return [
            StageReplica.of(self, r, s, k)
            for r in range(self.dp_width)
            for s in range(self.stages)
            for k in range(self.tensor_parallel)
        ]


@dataclass(frozen=True, slots=True)
class StageReplica:
    """Stage ``stage`` of pipeline replica ``replica`` as the engine runs it.

    Attributes:
        replica: data-parallel replica index r.
        stage: pipeline stage s.
        gpu: node name of its GPU (``gpu3``).
        host: node name of that GPU's host socket (``cpu0``).
        plan: its memory plan.
        cost: its per-micro-batch compute and boundary sizes.
        order: its rank's action list (STEP included; other stages' actions too when the
            rank holds several).
        first: whether it is stage 0 (receives no activation).
        last: whether it is the last stage (receives no gradient).
        tp_rank: its rank in the stage replica's tensor-parallel group (0 without).
    """

    replica: int
    stage: int
    gpu: str
    host: str
    plan: StagePlan
    cost: StageCost
    order: tuple[Action, ...]
    first: bool
    last: bool
    tp_rank: int = 0

    @classmethod
    def of(cls, inp: SimInput, r: int, s: int, k: int = 0) -> StageReplica:
        g = inp.gpu_index(r, s, k)
        return cls(
            r,
            s,
            f"gpu{g}",
            inp.topology.gpu(g).host,
            inp.tensor_plans[r][s][k] if inp.tensor_plans else inp.plans[r][s],
            inp.costs[s],
            tuple(inp.program[inp.stage_ranks[s]]),
            s == 0,
            s == inp.stages - 1,
            k,
        )

    @property
    def key(self) -> tuple[int, int, int]:
        """``(replica, stage, tp_rank)``: what identifies it among the run's processes."""
        return (self.replica, self.stage, self.tp_rank)

    def tags(self, microbatch: int | None, iteration: int | None) -> dict:
        """The keyword fields every :class:`~sim.events.Event` of this replica carries."""
        return dict(
            stage=self.stage, microbatch=microbatch, iteration=iteration, replica=self.replica
        )

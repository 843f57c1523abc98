"""What the engine runs: a resolved configuration (:class:`SimInput`) and its parts.

:class:`StageCost` is one stage's per-micro-batch compute and boundary sizes;
:class:`StageReplica` is one (replica, stage) as the engine runs it: its GPU, host, memory plan,
cost and action list, so that processes pass one record instead of ``(r, s, gpu, plan)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from sim.engine.host import DEFAULT_SYNCS, SYNC_POINTS, Part
from sim.engine.step_host import StepHost
from sim.hardware.host_ops import HostOverhead
from sim.hardware.topology import Topology
from sim.memory.plan import StagePlan
from sim.parallel.layout import ParallelLayout
from sim.parallel.ops import GroupOp
from sim.parallel.tp_overlap import OverlapOp
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
            (:func:`sim.parallel.megatron.aggregate`); empty without tensor parallelism.
        tp_bwd: the same for a backward (B, or I).
        tp_recompute: the same for the recompute before a backward: the collectives of the
            fully checkpointed layers' forwards (Megatron's ``CheckpointFunction.backward``
            re-runs the forward, its ``all_reduce``s included); set from the memory plan.
        bwd_input_s: seconds of the input-gradient part I of a split backward; None when the
            trace does not split it (then :attr:`input_s` assumes half of ``bwd_s``).
        bwd_weight_s: seconds of the weight-gradient part W; None likewise.
        group_fwd: expert- and context-parallel exchanges of a forward
            (:class:`~sim.parallel.ops.GroupOp`, :mod:`sim.engine.groups`); empty without.
        group_bwd: the same for a backward (B, or I).
        expert_grad_share: fraction of the stage's gradients that belong to routed experts:
            reduced over the expert-data-parallel group only (:mod:`sim.parallel.expert`).
        fwd_ops: ops the host issues for a forward (the layers' ``fwd_ops``; 0 if unknown).
        bwd_ops: ops the autograd engine dispatches for a backward (``bwd_ops``); an I and a
            W get shares of them in proportion to their seconds (an assumption).
        fwd_layers: ``(seconds, ops, module calls, Function applies)`` of each layer's
            forward, in order, so that the host model summarises a forward layer by layer
            (:meth:`forward_parts`); empty: one summary of the whole stage.
        bwd_layers: ``(seconds, ops, Python backward nodes)`` of each layer's backward, in
            forward order.
        param_tensors: ``(vectors, matrices)``: parameter tensors of the stage as one tensor
            rank holds them (biases and norm weights; weight matrices and embeddings), for a
            step that checks them one by one (:attr:`PipelineRuntime.overflow_check_ops`).
        tp_fwd_overlap: tensor-parallel collectives of a forward that run beside their GEMMs
            (:class:`~sim.parallel.tp_overlap.OverlapOp`: a framework's TP overlap), not in
            ``tp_fwd``; empty without.
        tp_bwd_overlap: the same for a backward (B, or I).
        tp_recompute_overlap: the same for the recompute before a backward.
    """

    fwd_s: float
    bwd_s: float
    out_bytes: float
    in_bytes: float
    tp_fwd: tuple[tuple[str, float, int], ...] = ()
    tp_bwd: tuple[tuple[str, float, int], ...] = ()
    tp_recompute: tuple[tuple[str, float, int], ...] = ()
    bwd_input_s: float | None = None
    bwd_weight_s: float | None = None
    group_fwd: tuple[GroupOp, ...] = ()
    group_bwd: tuple[GroupOp, ...] = ()
    expert_grad_share: float = 0.0
    fwd_ops: float = 0.0
    bwd_ops: float = 0.0
    fwd_layers: tuple[tuple[float, float, float, float], ...] = ()
    bwd_layers: tuple[tuple[float, float, float], ...] = ()
    param_tensors: tuple[int, int] = (0, 0)
    tp_fwd_overlap: tuple[OverlapOp, ...] = ()
    tp_bwd_overlap: tuple[OverlapOp, ...] = ()
    tp_recompute_overlap: tuple[OverlapOp, ...] = ()

    def forward_parts(self, checkpointed: tuple[int, ...]) -> tuple[Part, ...]:
        """``(seconds, ops, ops without autograd)`` of each layer's forward, in issue order;
        the ``checkpointed`` layers (indices in the stage) run without autograd recording."""
        full = set(checkpointed)
        return tuple(
            (sec, ops, ops if i in full else 0.0, mods, fns)
            for i, (sec, ops, mods, fns) in enumerate(self.fwd_layers)
        )

    def recompute_parts(self, checkpointed: tuple[int, ...]) -> tuple[Part, ...]:
        """The forwards of the ``checkpointed`` layers, run again before a backward, in forward
        order (Megatron recomputes each layer when the backward reaches it; their issue order
        does not change the max-plus summary's host and device sums, only its span)."""
        return tuple(
            (sec, ops, 0.0, mods, fns)
            for sec, ops, mods, fns in (self.fwd_layers[i] for i in sorted(checkpointed))
        )

    def backward_parts(self) -> tuple[Part, ...]:
        """Each layer's backward, in the order autograd runs them (last layer first)."""
        return tuple((sec, ops, 0.0, 0.0, nodes) for sec, ops, nodes in reversed(self.bwd_layers))

    def backward_ops(self, op: str) -> float:
        """Backward ops of a ``B``, ``I`` or ``W`` action (I and W: shares of ``bwd_ops`` in
        proportion to their seconds)."""
        if op == "B" or self.bwd_s <= 0:
            return self.bwd_ops if op == "B" else self.bwd_ops / 2
        share = self.input_s if op == "I" else self.weight_s
        return self.bwd_ops * share / self.bwd_s

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
            fwd_ops=sum(x.fwd_ops or 0.0 for x in layers),
            bwd_ops=sum(x.bwd_ops or 0.0 for x in layers),
            fwd_layers=tuple(
                (x.fwd_s, x.fwd_ops or 0.0, x.fwd_modules or 0.0, x.fwd_functions or 0.0)
                for x in layers
            ),
            bwd_layers=tuple((x.bwd_s, x.bwd_ops or 0.0, x.fwd_functions or 0.0) for x in layers),
        )


STEP_BARRIERS = ("none", "before_update", "after_update")
"""Where the stage replicas of one pipeline replica wait for each other at the optimizer step
(:attr:`PipelineRuntime.step_barrier`)."""


PARAM_GATHERS = ("step", "forward", "aligned", "optimizer")
"""When a sharded optimizer's parameter all-gather runs (:attr:`PipelineRuntime.param_gather`)."""


@dataclass(frozen=True)
class MicrobatchLoad:
    """What a framework's host does, blocking, to load each micro-batch on the stages that
    read data (the first: tokens; the last: labels), right before its forward: ops issued
    without autograd, host-device copies it waits for, and tiny broadcasts over the stage's
    tensor-parallel group it waits for (:meth:`Exchanges.load
    <sim.engine.exchanges.Exchanges.load>`). The first copy synchronizes the stream, so the
    device is idle for all of it. A rank whose stage is both first and last loads once.

    Attributes:
        ops: ops on any loading stage (the framework's batch function).
        first_ops: more ops on the first stage (its inputs).
        last_ops: more ops on the last stage (its labels).
        copies: blocking host-device copies of a few bytes (their ops are in ``ops``).
        broadcasts: broadcasts of ``broadcast_bytes`` over the tensor-parallel group that the
            host waits for (none with ``t = 1``).
        broadcast_bytes: bytes of each.
    """

    ops: int = 0
    first_ops: int = 0
    last_ops: int = 0
    copies: int = 0
    broadcasts: int = 0
    broadcast_bytes: float = 0.0

    def __post_init__(self) -> None:
        if min(self.ops, self.first_ops, self.last_ops, self.copies, self.broadcasts) < 0:
            raise ValueError("a micro-batch load's counts must be >= 0")
        if self.broadcast_bytes < 0:
            raise ValueError("broadcast_bytes must be >= 0")

    def ops_on(self, first: bool, last: bool) -> int:
        """Ops of a stage that is ``first`` and/or ``last``; 0 for a middle stage."""
        if not (first or last):
            return 0
        return self.ops + (self.first_ops if first else 0) + (self.last_ops if last else 0)


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
        overlap_p2p: with ``blocking_p2p``, a rank waits for its backwards' sends before its
            next backward, not before its next forward (Megatron-Core's ``overlap_p2p_comm``
            under the interleaved schedule: ``send_prev`` handles waited one backward later;
            a forward's ``send_next`` is waited at once, :mod:`sim.engine.exchanges`).
        sync_after_p2p: the host synchronizes with the device after every exchange of sends and
            receives (its clock waits for the device before it issues the next action's ops:
            :meth:`sim.engine.host.HostThreads.wait`).
        sync_before_forward: the host synchronizes with the device before every forward.
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
        overflow_check_ops: host ops the step issues per parameter tensor before reading one
            value of it back to the host (a blocking device-to-host copy), tensor after tensor
            (DeepSpeed's serial overflow check,
            :meth:`sim.hardware.host_ops.HostOverhead.serial_reads_s`); 0: no such reads.
        microbatch_load: the host's blocking work loading each micro-batch on the first and
            the last stage (:class:`MicrobatchLoad`); the default: none.
        step_host: the host's work once per iteration around the optimizer step, the device
            idle (:class:`~sim.engine.step_host.StepHost`); the default: none.
        loss_reads: blocking reads of the loss after each forward of the last stage (a NaN
            check: the host waits for the forward, then reads); 0: none.
        bucket_stages: which stage chunks reduce their gradients in buckets of
            ``SimInput.dp_bucket_bytes`` during their last backward (:mod:`sim.engine.buckets`):
            ``"all"``, or ``"first"``: stage 0 only (Megatron-Core buckets only pipeline rank 0's
            first model chunk), every other chunk in one bucket launched as its last backward
            ends; ``"none"``: every chunk in one bucket so launched.
        param_gather: when a sharded optimizer's parameter all-gather runs
            (:data:`PARAM_GATHERS`, :mod:`sim.engine.param_gather`): ``"step"`` after the
            update; ``"forward"`` in buckets under the next iteration's first forward of the
            chunk, each bucket launched when the previous one is done and the forward has
            reached it (Megatron's ``overlap_param_gather`` pre-hooks); ``"aligned"``: the
            buckets of a rank's first two chunks launched right after the step, those of chunk
            ``c`` when chunk ``c - 1``'s first forward starts (``align_param_gather``);
            ``"optimizer"``: each chunk's launched as its update ends, beside the rest of the
            step (``overlap_param_gather_with_optimizer_step``).
        delay_wgrad: in an overlapped forward/backward pair (:mod:`sim.engine.overlap`), the
            backward's weight-gradient part runs while its own exchanges are in flight
            (Megatron's ``delay_wgrad_compute``).
        comm_sms: SMs the expert-parallel exchanges of an overlapped pair take from its compute
            (:func:`sim.engine.overlap.slowdown`); None: DeepSeek-V3's 20.
        dispatcher: what moves the expert-parallel all-to-alls: ``"alltoall"`` (NCCL,
            :mod:`sim.comm.alltoall`), ``"deepep"`` or ``"hybridep"`` (their kernels on
            ``comm_sms`` SMs, :mod:`sim.comm.ep_dispatch`).
    """

    blocking_p2p: bool = False
    overlap_p2p: bool = False
    sync_after_p2p: bool = False
    sync_before_forward: bool = False
    tied_grad_bytes: float = 0.0
    tied_after_dp: bool = False
    tied_groups: tuple[tuple[tuple[int, ...], float], ...] = ()
    step_barrier: str = "none"
    step_transient: float = 0.0
    overflow_check_ops: int = 0
    microbatch_load: MicrobatchLoad = MicrobatchLoad()
    bucket_stages: str = "all"
    param_gather: str = "step"
    delay_wgrad: bool = False
    comm_sms: int | None = None
    dispatcher: str = "alltoall"
    step_host: StepHost = StepHost()
    loss_reads: int = 0

    def __post_init__(self) -> None:
        if self.loss_reads < 0:
            raise ValueError("loss_reads must be >= 0")
        if self.bucket_stages not in ("all", "first", "none"):
            raise ValueError(
                f"bucket_stages must be all, first or none, not {self.bucket_stages!r}"
            )
        if self.param_gather not in PARAM_GATHERS:
            raise ValueError(
                f"param_gather must be one of {PARAM_GATHERS}, not {self.param_gather!r}"
            )
        if self.step_barrier not in STEP_BARRIERS:
            raise ValueError(
                f"step_barrier must be one of {STEP_BARRIERS}, not {self.step_barrier!r}"
            )
        if min(self.tied_grad_bytes, self.step_transient, self.overflow_check_ops) < 0:
            raise ValueError("tied_grad_bytes, step_transient and overflow_check_ops must be >= 0")
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
        return self.sync_after_p2p or self.sync_before_forward or self.loads

    @property
    def loads(self) -> bool:
        """Whether the host does blocking work to load micro-batches."""
        return self.microbatch_load != MicrobatchLoad()


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
        layout: the parallel layout (:class:`~sim.parallel.layout.ParallelLayout`): its ``cp``
            (the replicas are ``dp * cp`` data- and context-parallel ranks, context rank
            innermost, :mod:`sim.engine.groups`) and ``ep`` (consecutive replicas forming an
            expert-parallel group; divides the replicas) are what the engine asks; the
            replicas, stages and tensor ranks it runs come from :attr:`placement` and
            :attr:`tensor_groups`.
        overlap_pairs: run an ``OVERLAP_F_B`` pair's two actions as interleaved chains, one's
            exchanges under the other's compute (DualPipe, :mod:`sim.engine.overlap`); False:
            one after the other, as torch's runtime does by default.
        runtime: what the framework's pipeline engine does around the actions
            (:class:`PipelineRuntime`).
        host: what issuing an op costs every rank's host thread (:mod:`sim.hardware.host_ops`),
            overriding the topology's hosts (e.g. a framework that runs under CUDA graphs);
            None: each GPU's host socket's ``overhead``.
        host_syncs: where the host blocks until the device is done
            (:data:`sim.engine.host.SYNC_POINTS`).
        mirrored: simulate replica 0 and tensor rank 0 only (:mod:`sim.engine.symmetry`):
            the other replicas and tensor ranks run the same program on GPUs and links alike,
            so their events would repeat these; collectives still run on every member's
            links and wait for the simulated members only. Set it through
            :func:`~sim.engine.symmetry.mirrored`, which checks that it is valid.
        stragglers: ``(GPU index, factor)`` pairs: that GPU's forwards, backwards, recomputes
            and optimizer steps take ``factor`` times as long (a slow or throttled GPU).
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
    layout: ParallelLayout = ParallelLayout()
    overlap_pairs: bool = False
    runtime: PipelineRuntime = PipelineRuntime()
    host: HostOverhead | None = None
    host_syncs: frozenset[str] = DEFAULT_SYNCS
    mirrored: bool = False
    stragglers: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.host_syncs) - set(SYNC_POINTS))
        if unknown:
            raise ValueError(f"unknown host sync points {unknown}; use {sorted(SYNC_POINTS)}")
        w, lay = len(self.placement), self.layout
        checks = [("context_parallel", lay.cp)]
        checks += [("expert_parallel", lay.ep)] if lay.etp is None else []
        for name, n in checks:
            if n < 1 or w % n:
                raise ValueError(f"{name} {n} must divide the {w} replicas")
        if lay.etp is not None and (w * lay.tp) % (lay.ep * lay.expert_tp):
            raise ValueError(
                f"expert_parallel x expert_tensor_parallel {lay.ep * lay.expert_tp} must "
                f"divide the {w} replicas x tensor_parallel {lay.tp}"
            )
        if any(f <= 0 for _, f in self.stragglers):
            raise ValueError(f"straggler factors must be > 0, got {self.stragglers}")

    def host_overhead(self, gpu: str) -> HostOverhead:
        """The host overhead of the process driving ``gpu`` (node name): :attr:`host`, else
        its host socket's."""
        if self.host is not None:
            return self.host
        return self.topology.host(self.topology.gpu(int(gpu.removeprefix("gpu"))).host).overhead

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

    @cached_property
    def simulated_replicas(self) -> int:
        """Replicas the engine runs: 1 when :attr:`mirrored`, else :attr:`dp_width`."""
        return 1 if self.mirrored else self.dp_width

    @cached_property
    def simulated_tensor_ranks(self) -> int:
        """Tensor ranks of each group the engine runs: 1 when :attr:`mirrored`, else ``t``."""
        return 1 if self.mirrored else self.tensor_parallel

    @cached_property
    def simulated_gpus(self) -> frozenset[str]:
        """Node names of the GPUs the engine runs ranks on."""
        return frozenset(rep.gpu for rep in self.replicas())

    def slowdown(self, gpu: int) -> float:
        """The :attr:`stragglers` factor of GPU ``gpu`` (1 for every other GPU)."""
        return dict(self.stragglers).get(gpu, 1.0)

    def replicas(self) -> list[StageReplica]:
        """Every simulated (replica, stage, tensor rank), replica-major, then stage."""
        return [
            StageReplica.of(self, r, s, k)
            for r in range(self.simulated_replicas)
            for s in range(self.stages)
            for k in range(self.simulated_tensor_ranks)
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
        plan = inp.tensor_plans[r][s][k] if inp.tensor_plans else inp.plans[r][s]
        cost, factor = inp.costs[s], inp.slowdown(g)
        if factor != 1.0:
            cost, plan = _slowed(cost, factor), _slowed_plan(plan, factor)
        return cls(
            r,
            s,
            f"gpu{g}",
            inp.topology.gpu(g).host,
            plan,
            cost,
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


def _slowed(cost: StageCost, factor: float) -> StageCost:
    """``cost`` on a GPU ``factor`` times slower: every compute time scaled."""

    def scale(x: float | None) -> float | None:
        return None if x is None else x * factor

    return replace(
        cost,
        fwd_s=cost.fwd_s * factor,
        bwd_s=cost.bwd_s * factor,
        bwd_input_s=scale(cost.bwd_input_s),
        bwd_weight_s=scale(cost.bwd_weight_s),
        fwd_layers=tuple((s * factor, o, m, f) for s, o, m, f in cost.fwd_layers),
        bwd_layers=tuple((s * factor, o, n) for s, o, n in cost.bwd_layers),
    )


def _slowed_plan(plan: StagePlan, factor: float) -> StagePlan:
    """``plan`` on a GPU ``factor`` times slower: its recompute and optimizer step scaled."""
    return replace(
        plan, recompute_s=plan.recompute_s * factor, optimizer_s=plan.optimizer_s * factor
    )

"""What the engine runs: a resolved configuration (:class:`SimInput`) and what the framework's
pipeline engine does around the actions (:class:`PipelineRuntime`, :class:`MicrobatchLoad`).

A stage's costs are :class:`~sim.engine.stage_cost.StageCost`; the records the engine's
processes pass are :class:`~sim.engine.replicas.StageReplica`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from sim.engine.host import DEFAULT_SYNCS, SYNC_POINTS
from sim.engine.stage_cost import StageCost
from sim.engine.step_host import StepHost
from sim.hardware.host_ops import HostOverhead
from sim.hardware.topology import Topology
from sim.memory.plan import StagePlan
from sim.parallel.layout import ParallelLayout
from sim.schedules.action import Program, flatten

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket, ``bucket_cap_mb=25`` (MiB; torch.nn.parallel.
DistributedDataParallel docs)."""


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
        overlap_p2p: with ``blocking_p2p``, a rank waits for a steady-state backward's sends
            only after its next backward (Megatron-Core's ``overlap_p2p_comm`` under the
            interleaved schedule: ``send_prev`` handles waited one backward later; a forward's
            ``send_next`` is waited at once, :mod:`sim.engine.exchanges`).
        eager_send_bytes: with ``blocking_p2p``, a send of at most this many bytes completes
            without its receive posted: NCCL's sender copies it into the connection's FIFO,
            which holds ``p2pChunkSize * NCCL_STEPS`` bytes per channel (NVIDIA/nccl
            ``src/init.cc`` ``computeBuffSizes``; "ncclSend needs to wait for ncclRecv ...
            especially if the size is larger than the internal buffer size", NVIDIA/nccl#1025),
            and it arrives without the receiver; 0: every send waits for its receive.
        batched_p2p: with ``blocking_p2p``, each exchange is one ``batch_isend_irecv`` on the
            pipeline group's NCCL communicator (Megatron's ``batch_p2p_comm``), whose ranks cap
            NCCL's channels per network peer (:func:`sim.comm.p2p_net.group_channels_per_peer`);
            False: lone sends on PyTorch's two-rank communicator of the pair.
        sync_after_p2p: the host synchronizes with the device after every exchange of sends and
            receives (its clock waits for the device before it issues the next action's ops:
            :meth:`sim.engine.host.HostThreads.wait`).
        sync_before_forward: the host synchronizes with the device before every forward.
        tied_grad_bytes: gradient bytes all-reduced between the first and the last stage of a
            replica (per tensor rank) at each optimizer step (a word embedding kept on both
            ends); 0: none.
        tied_after_dp: the tied all-reduce runs after the data-parallel gradient reduction
            (else before it).
        tied_fsdp_shard: a stage under FSDP (its plan's :attr:`~sim.memory.plan.StagePlan.fsdp`)
            all-reduces only its shard of the tied gradients, ``1/shard`` of their bytes
            (Megatron FSDP's ``grad._local_tensor``); False: the whole gradient.
        tp_grad_elem_bytes: bytes per element of the gradients of
            :attr:`~sim.engine.stage_cost.StageCost.tp_summed_params`, which each rank
            all-reduces over its tensor group once per optimizer step, after the data-parallel
            reduction (Megatron-Core's ``finalize_model_grads``,
            :mod:`sim.parallel.finalize_grads`; the ``main_grad`` dtype); 0: no such all-reduce.
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
        dp_serial_bucket_bytes: the data-parallel all-reduce at the step (not overlapped with
            the backward) runs in buckets of at most this many bytes, one after another
            (:func:`sim.engine.buckets.serial_bucket_bytes`: DeepSpeed's
            ``allreduce_no_retain``); 0: one collective.
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
    eager_send_bytes: float = 0.0
    batched_p2p: bool = False
    sync_after_p2p: bool = False
    sync_before_forward: bool = False
    tied_grad_bytes: float = 0.0
    tied_after_dp: bool = False
    tied_fsdp_shard: bool = False
    tp_grad_elem_bytes: float = 0.0
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
    dp_serial_bucket_bytes: float = 0.0

    def __post_init__(self) -> None:
        if self.loss_reads < 0:
            raise ValueError("loss_reads must be >= 0")
        if self.dp_serial_bucket_bytes < 0:
            raise ValueError("dp_serial_bucket_bytes must be >= 0")
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
        if self.tp_grad_elem_bytes < 0:
            raise ValueError("tp_grad_elem_bytes must be >= 0")
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
        combined_pairs: ``program`` is the schedule's with each backward paired with the
            forward after it (Megatron's combined 1F1B, :func:`sim.schedules.combined.
            combine_pairs`); a shorter run of the schedule (:mod:`sim.engine.periodic`) is
            paired the same way.
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
    combined_pairs: bool = False
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
        return frozenset(
            f"gpu{self.gpu_index(r, s, k)}"
            for r in range(self.simulated_replicas)
            for s in range(self.stages)
            for k in range(self.simulated_tensor_ranks)
        )

    def slowdown(self, gpu: int) -> float:
        """The :attr:`stragglers` factor of GPU ``gpu`` (1 for every other GPU)."""
        return dict(self.stragglers).get(gpu, 1.0)

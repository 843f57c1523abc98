"""What a memory policy decides for one stage: a :class:`StagePlan` the engine executes.

The engine knows nothing about policies; it only executes plans: bytes kept per micro-batch,
bytes swapped out after a forward and back in before the backward (over real links),
recompute time placed before the backward, static model-state bytes on the GPU and on the
host, and transfers done at the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.memory.fsdp_units import FsdpPlan

SwapParts = tuple[tuple[str, float], ...]
"""``((node, bytes), ...)``: where the swapped bytes of one micro-batch go."""


@dataclass(frozen=True)
class Transfer:
    """A copy done at a fixed point of the program: ``nbytes`` from node ``src`` to ``dst``."""

    src: str
    dst: str
    nbytes: float
    label: str = ""


@dataclass(frozen=True)
class StagePlan:
    """A stage's memory plan, per micro-batch and per optimizer step.

    Attributes:
        act_bytes: activation bytes one micro-batch would stash with no policy.
        resident_act_bytes: bytes of the stash that stay on the GPU between F and B.
        swap_bytes: bytes copied to ``swap_target`` after F and back before B.
        swap_target: node that holds swapped bytes (``cpu0`` or ``gpu5``); None if no swap.
        swap_targets: striped swap, ``((node, bytes), ...)``: the swapped bytes of a
            micro-batch split over several nodes (peer GPUs, a host), each part copied in
            parallel on its own route. Overrides ``swap_target``; ``swap_bytes`` is their sum.
        recompute_s: seconds of recompute placed on the compute stream before each B.
        recompute_ops: forward ops the host re-issues for that recompute (the recomputed
            layers' ``fwd_ops``; :mod:`sim.hardware.host_ops`).
        recompute_regions: checkpointed regions re-entered per micro-batch (one per
            checkpointed layer).
        recompute_layers: indices (within the stage) of the fully checkpointed layers, whose
            whole forward, tensor-parallel collectives included, runs again.
        weight_bytes: GPU bytes of weights (all versions).
        grad_bytes: GPU bytes of gradient buffers.
        optimizer_bytes: GPU bytes of optimizer state.
        host_bytes: bytes of model state parked in host DRAM for this stage.
        optimizer_s: seconds of the optimizer step on the GPU compute stream.
        host_optimizer_s: seconds of the optimizer step on the host CPU.
        host_optimizer_pool: the CPU-Adam pool the host step runs in (``server<i>``: every
            socket of the GPU's server, shared by its ranks; :mod:`sim.memory.host_adam`);
            None: the GPU's host socket.
        host_optimizer_thread_share: the share of the pool's threads the rank's host step
            runs on, beside the other ranks' (each process its own OpenMP team: PatrickStar's
            ``OMP_NUM_THREADS = cores / GPU_NUM``, :mod:`sim.memory.chunked`), at that share of
            the pool's rate and without queueing; 1.0: the pool's whole rate, in turn with the
            other ranks' steps (FIFO).
        host_step_tiles: the host step updates the state in this many tiles and copies each
            tile's result to the GPU (``step_transfers_after``, split evenly) while the next
            tile updates (DeepSpeedCPUAdam's two pinned tiles at the ZeRO-Offload release,
            :mod:`sim.memory.deepspeed`); 0: the copies start when the whole step is done.
        host_step_chunks: the host step runs chunk by chunk on the rank's one host thread:
            for each of this many chunks its share of ``step_transfers_before``, its CPU Adam
            (``host_optimizer_s`` split evenly) and its share of ``step_transfers_after``, one
            after another, after the GPU step (PatrickStar's ``FP16Adam.fp16_chunk_adam_ops``,
            :mod:`sim.memory.chunked`). 0: whole-state copies before and after one host step.
        step_transfers_before: copies done at the step before the host optimizer runs.
        step_transfers_after: copies done at the step after it.
        fetch_bytes: bytes fetched to the GPU before each F and each B (chunks on demand).
        fetch_source: node fetched from.
        fetch_live_bytes: bytes of fetched chunks on the GPU at once while an action runs
            (chunks stream through a staging area); None means all of ``fetch_bytes``.
        transient_bytes: bytes of the dropped (recomputed) activations live at once, during
            F and during the recompute before B; None means all of :attr:`recompute_bytes`
            (stage-granular checkpointing). Per-layer checkpointing rebuilds one layer at a
            time: its largest layer's dropped bytes.
        writeback_bytes: bytes copied from the GPU to ``fetch_source`` after each B (or W):
            gradients of chunks that do not stay on the GPU. The optimizer step waits for them.
        grad_stream_bytes: the backward's reduce-scatter and write-back go out in buckets of
            this many write-back bytes as the backward produces them, on a side stream
            (DeepSpeed's ``overlap_comm``: each reduce bucket is reduced and copied to the host
            while the backward goes on); 0: once the backward has ended.
        blocking_moves: the framework issues its collectives and host copies on the compute
            stream and waits for them (PatrickStar's ``async_op=False`` NCCL calls and chunk
            moves; DeepSpeed's gradient copies without ``overlap_comm``): nothing is fetched or
            gathered ahead, and an action's gradient reduce-scatter and write-back end before
            the next action starts.
        dp_sharded: with data parallelism, gradients are reduce-scattered before the optimizer
            step and the updated parameters all-gathered after it (ZeRO-style sharding of
            optimizer state), instead of one all-reduce before it.
        dp_grad_bytes: bytes of the data-parallel gradient reduction (default ``grad_bytes``).
        step_grad_share: the fraction of ``grad_bytes`` the optimizer step reads as its own
            (its fp32 copy, :mod:`sim.memory.step_moment`): the rank's shard with the
            optimizer state sharded (Megatron's distributed optimizer: ``(1 - f)/w + f/w_e``,
            ``f`` the routed experts' share, :mod:`sim.memory.dist_opt`); 1: every gradient.
        dp_gather_bytes: bytes of the parameter all-gather after a sharded step
            (``dp_sharded``); None: the reduction's bytes. Less with parameters kept in a
            low-precision format (Megatron's ``--fp8-param-gather``: :mod:`sim.memory.precision`).
        step_gather: with data parallelism, the gradients are all-reduced whole before the step
            (not ``dp_sharded``) but each replica updates its partition of the parameters and
            the updated parameters are all-gathered after it, ``dp_grad_bytes`` (else
            ``grad_bytes``) of them (DeepSpeed's ``BF16_Optimizer``:
            :mod:`sim.framework.deepspeed_bf16`).
        gather_bytes: 16-bit parameter bytes all-gathered over the data-parallel group before
            each F and each B/I (parameters partitioned over the replicas: ZeRO-3, PatrickStar's
            chunk groups); each replica holds ``1/w`` of them. 0: parameters are replicated.
        gather_live_bytes: GPU bytes of gathered parameters live at once during an action
            (they are gathered layer by layer or chunk group by chunk group and freed after
            use); None means all of ``gather_bytes``.
        scatter_bytes: gradient bytes reduce-scattered over the data-parallel group after each
            B (or W) (ZeRO-2/3, PatrickStar); the step then runs no gradient collective and,
            with ``gather_bytes``, no parameter all-gather either.
        grad_bucket_bytes: bytes of the gradient reduction buffer besides ``grad_bytes``
            (ZeRO's reduce bucket); None: DDP's copy of the GPU gradients
            (:func:`sim.memory.reserve.ddp_bucket_bytes`).
        reserve_bytes: the process's runtime reserve on the GPU (CUDA context, cuBLAS
            workspace, NCCL buffers; :mod:`sim.memory.reserve`).
        allocator_bytes: the share of the GPU lost to the caching allocator.
        working_bytes: backward working memory, pipeline output cache and DDP buckets.
        framework_bytes: GPU bytes the training framework keeps out of its own tensors'
            reach (PatrickStar's ``1 - overall_gpu_mem_ratio``, :mod:`sim.memory.memtracer`).
        framework_buffer_bytes: the framework's persistent buffers on the GPU: gradient
            buckets, Transformer Engine's weight-gradient buffers, GEMM workspaces
            (:func:`sim.memory.rank_memory.framework_buffer_bytes`).
        reduce_bucket_bytes: the largest flat bucket the GPU's gradient reduction after the
            backward allocates and frees (DeepSpeed's: :func:`sim.memory.flat_reduce.
            reduce_bucket_bytes`), held while the chunk's gradients are reduced; on the GPU's
            first chunk (0 on the others and without it).
        host_framework_bytes: host bytes the framework allocates besides the model states
            (pinned staging buffers: DeepSpeed's, :mod:`sim.memory.deepspeed`) or keeps out
            of its own reach (PatrickStar's ``1 - overall_cpu_mem_ratio``).
        fsdp: the stage's FSDP units (:mod:`sim.memory.fsdp`): parameters all-gathered and
            gradients reduce-scattered per unit over the shard group (:mod:`sim.engine.fsdp`);
            None: no FSDP.
        layer_shares: each layer's fraction of the stash (:func:`sim.memory.overlapped.
            layer_shares`) where the stage runs Megatron's combined 1F1B step, whose forward
            and backward hold their stashes layer by layer (:mod:`sim.memory.overlapped`);
            empty otherwise.
        offload_fwd_stall_s: seconds each forward waits for activation offloads to the host
            (Transformer Engine's offload schedule, :mod:`sim.memory.offload_schedule`).
        offload_bwd_stall_s: seconds each backward waits for their reloads.
        notes: what the policy chose and why (shown to the user).
    """

    act_bytes: float
    resident_act_bytes: float
    swap_bytes: float = 0.0
    swap_target: str | None = None
    recompute_s: float = 0.0
    recompute_ops: float = 0.0
    recompute_regions: int = 0
    recompute_layers: tuple[int, ...] = ()
    weight_bytes: float = 0.0
    grad_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    host_bytes: float = 0.0
    optimizer_s: float = 0.0
    host_optimizer_s: float = 0.0
    host_optimizer_pool: str | None = None
    host_optimizer_thread_share: float = 1.0
    host_step_tiles: int = 0
    host_step_chunks: int = 0
    step_transfers_before: tuple[Transfer, ...] = ()
    step_transfers_after: tuple[Transfer, ...] = ()
    fetch_bytes: float = 0.0
    fetch_source: str | None = None
    fetch_live_bytes: float | None = None
    swap_targets: SwapParts = ()
    transient_bytes: float | None = None
    writeback_bytes: float = 0.0
    grad_stream_bytes: float = 0.0
    blocking_moves: bool = False
    dp_sharded: bool = False
    dp_grad_bytes: float | None = None
    step_grad_share: float = 1.0
    dp_gather_bytes: float | None = None
    step_gather: bool = False
    gather_bytes: float = 0.0
    gather_live_bytes: float | None = None
    scatter_bytes: float = 0.0
    grad_bucket_bytes: float | None = None
    reserve_bytes: float = 0.0
    allocator_bytes: float = 0.0
    working_bytes: float = 0.0
    framework_bytes: float = 0.0
    framework_buffer_bytes: float = 0.0
    reduce_bucket_bytes: float = 0.0
    host_framework_bytes: float = 0.0
    fsdp: FsdpPlan | None = None
    layer_shares: tuple[float, ...] = ()
    offload_fwd_stall_s: float = 0.0
    offload_bwd_stall_s: float = 0.0
    notes: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.step_grad_share <= 1.0:
            raise ValueError(f"step_grad_share must be in (0, 1], got {self.step_grad_share}")
        if not 0.0 < self.host_optimizer_thread_share <= 1.0:
            raise ValueError(
                f"host_optimizer_thread_share must be in (0, 1], got {self.host_optimizer_thread_share}"
            )
        if self.swap_targets:
            total = sum(b for _, b in self.swap_targets)
            if self.swap_bytes and abs(total - self.swap_bytes) > 1e-6 * max(total, 1.0):
                raise ValueError(f"swap_bytes {self.swap_bytes} != sum of swap_targets {total}")
            object.__setattr__(self, "swap_bytes", total)

    @property
    def off_gpu(self) -> bool:
        """Whether the plan moves or keeps bytes off its GPU (host offload, swaps, chunk
        fetches, write-backs, step copies, host DRAM): it then names a host or a peer GPU."""
        return bool(
            self.swap_bytes > 0
            or self.fetch_bytes > 0
            or self.writeback_bytes > 0
            or self.host_bytes > 0
            or self.host_framework_bytes > 0
            or self.host_optimizer_s > 0
            or self.step_transfers_before
            or self.step_transfers_after
        )

    @property
    def swap_parts(self) -> SwapParts:
        """Where one micro-batch's swapped bytes go: ``swap_targets`` or ``swap_target``."""
        if self.swap_targets:
            return tuple((n, b) for n, b in self.swap_targets if b > 0)
        if self.swap_bytes > 0 and self.swap_target:
            return ((self.swap_target, self.swap_bytes),)
        return ()

    @property
    def recompute_bytes(self) -> float:
        """Bytes dropped after F and rebuilt by recompute before B."""
        return max(0.0, self.act_bytes - self.resident_act_bytes - self.swap_bytes)

    @property
    def rebuild_bytes(self) -> float:
        """Dropped bytes live at once during F and the recompute (see ``transient_bytes``)."""
        if self.transient_bytes is None:
            return self.recompute_bytes
        return min(self.transient_bytes, self.recompute_bytes)

    @property
    def fetch_live(self) -> float:
        """Bytes of fetched chunks on the GPU during an action."""
        return self.fetch_bytes if self.fetch_live_bytes is None else self.fetch_live_bytes

    @property
    def gather_live(self) -> float:
        """Bytes of gathered parameters on the GPU during an action."""
        return self.gather_bytes if self.gather_live_bytes is None else self.gather_live_bytes

    @property
    def fwd_alloc_bytes(self) -> float:
        """Bytes a forward allocates: the kept and swapped stash plus the transient."""
        return self.act_bytes - self.recompute_bytes + self.rebuild_bytes

    @property
    def static_gpu_bytes(self) -> float:
        """Model-state bytes on the GPU (weights, gradients, optimizer state)."""
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes

    @property
    def overhead_bytes(self) -> float:
        """Runtime reserve + allocator margin + working memory + the framework's share and
        buffers."""
        return (
            self.reserve_bytes
            + self.allocator_bytes
            + self.working_bytes
            + self.framework_bytes
            + self.framework_buffer_bytes
        )

    @property
    def host_total_bytes(self) -> float:
        """Host bytes held for the whole run: model states and the framework's buffers."""
        return self.host_bytes + self.host_framework_bytes

    def overhead_charges(self) -> tuple[tuple[str, float], ...]:
        """``(ledger category, bytes)`` the engine charges at t = 0 besides model states."""
        return (
            ("reserve", self.reserve_bytes),
            ("allocator", self.allocator_bytes),
            ("working", self.working_bytes),
            ("framework", self.framework_bytes + self.framework_buffer_bytes),
        )

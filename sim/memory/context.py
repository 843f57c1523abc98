"""What a memory policy sees of one stage replica: :class:`StageContext`.

Built per ``[replica][stage]`` by the point's resolution (:func:`sim.point.stages.stage_contexts`)
and handed to every policy (:mod:`sim.memory.base`); the plan helpers
(:mod:`sim.memory.compose`, :mod:`sim.memory.reserve`, :mod:`sim.memory.estimate`) read it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.hardware.topology import Topology
from sim.memory.framework_memory import PIPESIM_MEMORY, FrameworkMemory
from sim.memory.layer_work import LayerWork, generic_work
from sim.memory.states import StateBytes
from sim.trace.schema import LayerProfile


@dataclass(frozen=True)
class StageContext:
    """Everything a policy may look at for one stage replica.

    Attributes:
        stage: stage index (0 = first).
        stages: pipeline depth p.
        replica: data-parallel replica index.
        dp_width: data-parallel width w.
        gpu: node name of the GPU running it.
        host: node name of that GPU's host socket.
        layers: the stage's layers, scaled to the micro-batch size.
        in_flight: peak micro-batches whose stash is live at once on this stage (from the
            schedule's program).
        weight_versions: weight versions the schedule keeps on this stage.
        state: model-state bytes per parameter.
        dtype_bytes: bytes per element of the training dtype.
        capacity_bytes: the GPU's memory capacity.
        topology: the server.
        input_bytes: bytes of the activation the stage receives per micro-batch (0 on stage 0).
        microbatches: micro-batches per iteration (m).
        order: the stage's ops (``"F"``, ``"B"``, ``"I"``, ``"W"``) in program order over one
            iteration, for policies that plan by access order (chunks).
        host_sharers: GPUs of the configuration whose route to their host crosses the same
            bottleneck link as this GPU's (2 on DGX-1 when both GPUs behind one PCIe switch
            run stages); planning assumes their host copies split it.
        version_bytes: bytes per parameter of each weight version beyond the first
            (:func:`sim.memory.states.version_bytes_per_param`); None: ``state.weight``.
        expert_share: fraction of the stage's parameters that are routed experts
            (:mod:`sim.parallel.expert`): their replicas are ``dp_width / expert_parallel``.
        expert_parallel: expert-parallel size ``ep``.
        tensor_parallel: tensor-parallel size ``tp`` (its NCCL group).
        context_parallel: context-parallel size ``cp`` (its NCCL group; ``dp_width``
            counts its ranks as replicas).
        optimizer: the training optimizer (``adam``, ``sgd``, ``sgd_momentum``), for a
            measured step cost (:meth:`sim.hardware.parts.GPU.step_cost`).
        param_tensors: parameter tensors of the stage (copies of shared ones included), each
            stepped on its own (:func:`sim.memory.states.measured_step_s`).
        framework: how the framework lays out memory
            (:class:`~sim.memory.framework_memory.FrameworkMemory`).
        work: each layer's transients and weights (:class:`~sim.memory.layer_work.LayerWork`,
            aligned with ``layers``); empty: :func:`~sim.memory.layer_work.generic_work`.
        rank_order: ``(stage, op, micro-batch)`` of every action of the stage's rank (all its
            stage chunks) over the program, in program order; empty: ``order`` on this stage
            alone.
        overlapped: positions in :attr:`ops` of the forwards that open a combined step with
            the backward right after them (Megatron's combined 1F1B, :mod:`sim.memory.
            overlapped`); empty: none.
        layer_expert_bytes: routed-expert parameter bytes of each of :attr:`layers` (empty:
            none), for FSDP's expert shards (:mod:`sim.memory.fsdp`).
        expert_dp: ranks holding the same routed experts (the expert-data-parallel group,
            :attr:`~sim.parallel.layout.ParallelLayout.expert_dp`, folded mesh included); 0:
            ``dp_width / expert_parallel``.
    """

    stage: int
    stages: int
    replica: int
    dp_width: int
    gpu: str
    host: str
    layers: tuple[LayerProfile, ...]
    in_flight: int
    weight_versions: int
    state: StateBytes
    dtype_bytes: int
    capacity_bytes: float
    topology: Topology
    input_bytes: float = 0.0
    microbatches: int = 1
    order: tuple[str, ...] = ()
    host_sharers: int = 1
    version_bytes: float | None = None
    expert_share: float = 0.0
    expert_parallel: int = 1
    tensor_parallel: int = 1
    context_parallel: int = 1
    optimizer: str = ""
    param_tensors: float = 0.0
    framework: FrameworkMemory = PIPESIM_MEMORY
    work: tuple[LayerWork, ...] = ()
    rank_order: tuple[tuple[int, str, int], ...] = ()
    overlapped: frozenset[int] = frozenset()
    layer_expert_bytes: tuple[float, ...] = ()
    expert_dp: int = 0

    @property
    def expert_replicas(self) -> int:
        """Ranks that hold the same routed experts (:attr:`expert_dp`)."""
        return self.expert_dp or max(1, self.dp_width // self.expert_parallel)

    @property
    def params(self) -> float:
        """Parameter count of the stage."""
        return sum(layer.param_bytes for layer in self.layers) / self.dtype_bytes

    @property
    def trainable_params(self) -> float:
        """Parameters of the stage an optimizer updates (LoRA: the adapters only,
        :attr:`~sim.trace.schema.LayerProfile.trainable_bytes`); the gradients and optimizer
        state are theirs."""
        return sum(layer.trainable for layer in self.layers) / self.dtype_bytes

    @property
    def act_bytes(self) -> float:
        """Activation bytes one micro-batch stashes on this stage."""
        return sum(layer.act_bytes for layer in self.layers)

    @property
    def fwd_s(self) -> float:
        return sum(layer.fwd_s for layer in self.layers)

    @property
    def bwd_s(self) -> float:
        return sum(layer.bwd_s for layer in self.layers)

    @property
    def out_bytes(self) -> float:
        """Bytes sent to the next stage per micro-batch (0 on the last stage)."""
        return self.layers[-1].out_bytes if self.stage < self.stages - 1 else 0.0

    @property
    def layer_inputs(self) -> tuple[float, ...]:
        """Bytes of each layer's input: the stage input, then each layer's predecessor's output."""
        return (self.input_bytes,) + tuple(x.out_bytes for x in self.layers[:-1])

    @property
    def gpu_index(self) -> int:
        return int(self.gpu[3:])

    @property
    def layer_work(self) -> tuple[LayerWork, ...]:
        """``work``, or :func:`~sim.memory.layer_work.generic_work` of every layer."""
        return self.work or tuple(generic_work(x) for x in self.layers)

    @property
    def ops(self) -> tuple[tuple[int, str, int], ...]:
        """``rank_order``, or this stage's ``order`` alone (micro-batches numbered in order of
        their forwards)."""
        if self.rank_order:
            return self.rank_order
        out, f, b = [], 0, 0
        for op in self.order:
            if op == "F":
                out.append((self.stage, op, f))
                f += 1
            else:
                out.append((self.stage, op, b))
                b += op in ("B", "W")
        return tuple(out)

"""The memory-policy interface: from what a stage holds to a :class:`StagePlan`.

A policy sees every stage at once (:meth:`MemoryPolicy.plan_all`), because some decisions are
cross-stage (MPress places one GPU's activations in another GPU's spare memory). Most policies
only override :meth:`MemoryPolicy.plan` for one stage.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from sim.hardware.topology import Topology
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes, optimizer_step_s
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

    @property
    def params(self) -> float:
        """Parameter count of the stage."""
        return sum(layer.param_bytes for layer in self.layers) / self.dtype_bytes

    @property
    def act_bytes(self) -> float:
        """Activation bytes one micro-batch stashes on this stage."""
        return sum(layer.act_bytes for layer in self.layers)

    @property
    def fwd_s(self) -> float:
        return sum(layer.fwd_s for layer in self.layers)

    def resident_plan(self, **changes) -> StagePlan:
        """The plan with everything on the GPU (policy ``none``), with ``changes`` applied."""
        p = self.params
        gpu = self.topology.gpu(int(self.gpu[3:]))
        base = dict(
            act_bytes=self.act_bytes,
            resident_act_bytes=self.act_bytes,
            weight_bytes=p * self.state.weight * self.weight_versions,
            grad_bytes=p * self.state.grad,
            optimizer_bytes=p * self.state.optimizer,
            optimizer_s=optimizer_step_s(p, gpu.hbm_bandwidth_Bps, self.state),
        )
        base.update(changes)
        return StagePlan(**base)


class MemoryPolicy(ABC):
    """A memory-saving policy. Subclasses live one per file and register by ``name``."""

    name: ClassVar[str]
    description: ClassVar[str] = ""

    def plan_all(self, contexts: list[StageContext]) -> list[StagePlan]:
        """Plans for every stage replica, in the order of ``contexts``."""
        return [self.plan(ctx) for ctx in contexts]

    @abstractmethod
    def plan(self, ctx: StageContext) -> StagePlan:
        """The plan for one stage replica."""

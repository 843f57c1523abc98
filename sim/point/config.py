"""One point of the grid (:class:`PointConfig`): what ``results.csv``, the row cache and
``winner.yaml`` store of a configuration, and the typed schedule and memory policy it names.

The strings ``schedule``, ``memory_policy`` and ``framework`` are the data (as written, so the
files round-trip); :attr:`PointConfig.schedule_class`, :attr:`PointConfig.policy` and
:attr:`PointConfig.framework_profile` are the classes and objects the simulator, the planner's
bounds and the replay ask. The policy string is parsed once per process
(:func:`sim.memory.registry.parse_policy` shares one object per string), so no code below reads
the strings again.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict

from sim.framework.base import Framework
from sim.framework.registry import get_framework
from sim.memory.base import MemoryPolicy
from sim.memory.registry import parse_policy
from sim.parallel.layout import ParallelLayout
from sim.schedules.base import Schedule
from sim.schedules.registry import get_schedule


class PointConfig(BaseModel):
    """One fully specified configuration (a point of the grid).

    Attributes:
        model: the model's name (``models[].name``).
        schedule: the schedule's name as written (any name the registry accepts).
        stages, dp_width, tensor_parallel: pipeline depth ``p``, data-parallel width ``w`` and
            tensor-parallel size ``t``.
        sequence_parallel: Megatron sequence parallelism (with ``t > 1``).
        microbatch_size, microbatches, global_batch: ``b``, ``m`` and samples per step.
        memory_policy: the memory policy spec as written (``"recompute:full:4"``).
        virtual_stages: stage chunks per rank ``v``.
        expert_parallel, context_parallel: expert- and context-parallel sizes ``ep``, ``cp``.
        context_parallel_comm: how context parallelism exchanges keys and values (``p2p``...).
        routing: how tokens are routed to experts (``balanced``...).
        ep_overlap: expert-parallel all-to-alls overlapped with compute.
        framework: the framework profile's name (the experiment's ``framework:``).
        dp_shard: data-parallel ranks of ``dp_width`` that shard parameters, gradients and
            optimizer state as FSDP does (``dp_width / dp_shard`` replicate them: HSDP;
            :mod:`sim.memory.fsdp`); 1: no FSDP.
        expert_tensor_parallel: the experts' tensor-parallel size ``etp`` (MoE parallel
            folding, :mod:`sim.parallel.folding`); None: ``tensor_parallel``.
        precision: the linear layers' low-precision recipe (``fp8-delayed``...); ``""``: every
            GEMM in the training dtype (:mod:`sim.compute.precision`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    schedule: str
    stages: int
    dp_width: int
    microbatch_size: int
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    microbatches: int
    memory_policy: str
    global_batch: int
    virtual_stages: int = 1
    expert_parallel: int = 1
    context_parallel: int = 1
    context_parallel_comm: str = "p2p"
    routing: str = "balanced"
    ep_overlap: bool = False
    framework: str = "pipesim"
    dp_shard: int = 1
    expert_tensor_parallel: int | None = None
    precision: str = ""

    @property
    def layout(self) -> ParallelLayout:
        """The point's parallel layout (:class:`~sim.parallel.layout.ParallelLayout`): the one
        record every layer below asks for ``p, v, w, t, sp, cp, ep``."""
        return ParallelLayout.from_flat(self)

    def key(self) -> str:
        """A stable short hash of the point."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    @property
    def schedule_class(self) -> type[Schedule]:
        """The schedule class ``schedule`` names.

        Raises:
            KeyError: an unknown name (the message lists the valid ones).
        """
        return get_schedule(self.schedule)

    @property
    def policy(self) -> MemoryPolicy:
        """The memory policy ``memory_policy`` names (shared by every point with the string).

        Raises:
            KeyError: an unknown policy name; ValueError: bad parameters.
        """
        return parse_policy(self.memory_policy)

    @property
    def sp_regather(self) -> bool:
        """Whether the framework gathers the column-parallel layers' saved inputs again in
        the backward (:meth:`~sim.framework.base.Framework.regathers_sp_input`), with
        sequence parallelism over ``t > 1`` ranks."""
        lay = self.layout
        return lay.sp and lay.tp > 1 and self.framework_profile.regathers_sp_input()

    @property
    def framework_profile(self) -> Framework:
        """The framework profile ``framework`` names (one shared object per name).

        Raises:
            KeyError: an unknown name (the message lists the valid ones).
        """
        return get_framework(self.framework)

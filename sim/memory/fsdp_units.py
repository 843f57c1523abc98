"""The units of FSDP on one stage (:class:`FsdpPlan`), what a :class:`~sim.memory.plan.
StagePlan` carries for the engine (:mod:`sim.engine.fsdp`); made by :mod:`sim.memory.fsdp`,
whose module doc gives the sources."""

from __future__ import annotations

from dataclasses import dataclass

Reshard = bool | int
"""``reshard_after_forward``: True, False, or the world size to reshard to."""


@dataclass(frozen=True)
class FsdpUnit:
    """One ``fully_shard`` unit of a stage on one rank, before FSDP's sharding.

    Attributes:
        layers: indices (within the stage) of its layers.
        params: dense parameters (elements) on the rank (after tensor parallelism).
        expert_params: routed-expert parameters (elements) on the rank (after EP and ETP).
        reshard: ``reshard_after_forward``.
    """

    layers: tuple[int, ...]
    params: float
    expert_params: float = 0.0
    reshard: Reshard = True

    @property
    def elements(self) -> float:
        """Parameters (elements) the unit gathers on the rank."""
        return self.params + self.expert_params


@dataclass(frozen=True)
class FsdpPlan:
    """A stage's FSDP: its units and how they are gathered and reduced.

    Attributes:
        units: the units in forward order.
        param_bytes: bytes per gathered element.
        reduce_bytes: bytes per reduced element.
        shard: ranks of the dense shard group (``dp_shard x cp``).
        expert_shard: ranks of the experts' shard group.
        accumulate: gradients kept unsharded across micro-batches, reduced at the step.
        copy_Bps: bytes per second of the copies FSDP2 runs on the compute stream (the GPU's
            memory-bound rate; 0: not timed): after a unit's all-gather its output is copied
            out into the unsharded parameters (``split_with_sizes_copy``: reads and writes
            :meth:`unsharded_bytes`), and before its reduce-scatter the gradients are copied
            in, cast to ``reduce_dtype`` (``_chunk_cat``: reads ``param_bytes``, writes
            ``reduce_bytes`` per element), both on the current stream (torch 2.13
            ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: the copy-out after
            ``current_stream().wait_event(all_gather_event)`` in
            ``foreach_all_gather_copy_out``, lines 431-489; the copy-in
            ``foreach_reduce_scatter_copy_in`` before ``reduce_scatter_stream.wait_stream
            (current_stream)`` in ``foreach_reduce``, lines 592-607). The all-gather's
            copy-in (the cast of the shard to ``param_dtype`` and its copy into the
            all-gather input) runs on its own stream (lines 336-362) and is not timed; at a
            shard world of one it runs on the current stream (:meth:`copy_out_bytes`).
        shard_bytes: bytes per element of the sharded parameter (torchtitan's fp32 shards:
            4); 0: ``param_bytes`` (no cast).
    """

    units: tuple[FsdpUnit, ...]
    param_bytes: float
    reduce_bytes: float
    shard: int
    expert_shard: int = 1
    accumulate: bool = False
    copy_Bps: float = 0.0
    shard_bytes: float = 0.0

    def copy_out_s(self, unit: FsdpUnit) -> float:
        """Seconds of ``unit``'s all-gather copy-out on the compute stream (``copy_Bps``,
        :meth:`copy_out_bytes`)."""
        return self.copy_out_bytes(unit) / self.copy_Bps if self.copy_Bps else 0.0

    def copy_out_bytes(self, unit: FsdpUnit) -> float:
        """Bytes read and written on the compute stream to unshard ``unit``, for its dense
        parameters over :attr:`shard` ranks and its experts' over :attr:`expert_shard` (each
        its own ``fully_shard`` group). torch 2.13 ``torch/distributed/fsdp/_fully_shard/``:

        * a world of ``> 1``: ``foreach_all_gather_copy_out``'s ``split_with_sizes_copy``
          reads and writes each unsharded element in ``param_dtype`` (``_fsdp_collectives.py``
          431-489): ``2 x param_bytes``; the shard's cast to ``param_dtype`` (``_foreach_copy_``,
          lines 415-425) and the all-gather input copy (``all_gather_copy_in``, 264-275) run
          on the all-gather copy-in stream (336-362), not here;
        * a world of 1 (``_fsdp_param_group.py`` 437-460, from ``pre_forward`` and
          ``pre_backward``, 551-552, 582-583: no all-gather): ``fsdp_param.all_gather_inputs``
          casts the shard, the whole parameter, to ``param_dtype`` (``_fsdp_param.py`` 896-901,
          ``_fsdp_common.py`` 173-178 ``_to_dtype_if_needed``: reads ``shard_bytes``, writes
          ``param_bytes``; nothing when they are equal), then ``tensor.copy_`` copies it into
          the unsharded parameter (line 459: ``2 x param_bytes``), both on the current stream.
          torchtitan's fp32 shards with bf16 ``param_dtype``: 4 + 2 + 2 + 2 = 10 B per
          element instead of 4.

        Returns:
            bytes (read plus written) on the rank.
        """
        copy = 2 * self.param_bytes  # into the unsharded parameter
        shard_b = self.shard_bytes or self.param_bytes
        cast = shard_b + self.param_bytes if shard_b != self.param_bytes else 0.0
        groups = ((unit.params, self.shard), (unit.expert_params, self.expert_shard))
        return sum(n * (copy + (cast if world <= 1 else 0.0)) for n, world in groups)

    def copy_in_s(self, unit: FsdpUnit) -> float:
        """Seconds of ``unit``'s reduce-scatter copy-in on the compute stream."""
        b = unit.elements * (self.param_bytes + self.reduce_bytes)
        return b / self.copy_Bps if self.copy_Bps else 0.0

    def unsharded_bytes(self, unit: FsdpUnit) -> float:
        """Bytes of ``unit``'s unsharded parameters (and of its all-gather output)."""
        return unit.elements * self.param_bytes

    def held_bytes(self, unit: FsdpUnit) -> float:
        """Bytes of ``unit``'s parameters kept between its forward and its backward:
        all of them (``reshard`` False), ``1/k`` of them (an int ``k``), or none."""
        if unit.reshard is True:
            return 0.0
        if unit.reshard is False:
            return self.unsharded_bytes(unit)
        return self.unsharded_bytes(unit) / unit.reshard

    def grad_bytes(self, unit: FsdpUnit) -> float:
        """Bytes of ``unit``'s reduce-scatter input (``reduce_dtype``), and of its
        accumulated unsharded gradients with :attr:`accumulate`."""
        return unit.elements * self.reduce_bytes

    def gathers(self, unit: FsdpUnit, op: str, first: bool) -> bool:
        """Whether ``unit`` is all-gathered before an action ``op`` (``F`` or ``B``);
        ``first``: the stage's first forward (or backward) of the step."""
        if self.accumulate:
            return op == "F" and first
        return op == "F" or unit.reshard is not False

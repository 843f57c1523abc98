"""Megatron-LM tensor parallelism: per-rank layer costs and communication
(:mod:`~sim.parallel.megatron`), a trace sharded over ``t`` ranks (:mod:`~sim.parallel.shard`)
and the placement of tensor-parallel groups inside one server (:mod:`~sim.parallel.groups`)."""

from sim.parallel.megatron import CommOp, LayerComm
from sim.parallel.shard import ShardedTrace, model_shape, shard_trace

__all__ = ["CommOp", "LayerComm", "ShardedTrace", "model_shape", "shard_trace"]

"""Megatron-LM tensor parallelism: per-rank layer costs and communication
(:mod:`~sim.tensor.megatron`), a trace sharded over ``t`` ranks (:mod:`~sim.tensor.shard`)
and the placement of tensor-parallel groups inside one server (:mod:`~sim.tensor.groups`)."""

from sim.tensor.megatron import CommOp, LayerComm
from sim.tensor.shard import ShardedTrace, model_shape, shard_trace

__all__ = ["CommOp", "LayerComm", "ShardedTrace", "model_shape", "shard_trace"]

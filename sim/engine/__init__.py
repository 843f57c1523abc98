"""The discrete-event engine: one resolved configuration in, one event log out.

Composed of one concept per module: :mod:`~sim.engine.inputs` (what it runs, the
:class:`StageReplica` record), :mod:`~sim.engine.links` (link resources and transfers, with the
one transfer-time formula), :mod:`~sim.engine.streams` (compute spans and stalls),
:mod:`~sim.engine.traffic` (the memory policy's copies), :mod:`~sim.engine.sends` (stage to
stage sends), :mod:`~sim.engine.collectives` (data-parallel rings), :mod:`~sim.engine.buckets`
(DDP's overlapped buckets), :mod:`~sim.engine.partitioned` (ZeRO-3 gathers and scatters),
:mod:`~sim.engine.tensor_collectives` (Megatron's), :mod:`~sim.engine.drains` (collectives a
host sync waits for), :mod:`~sim.engine.parts` (one run's composed parts),
:mod:`~sim.engine.actions` (a forward, a backward, a recompute), :mod:`~sim.engine.pairs`
(overlapped F/B pairs) and :mod:`~sim.engine.pipeline` (the stage replicas' processes,
:func:`simulate`).
"""

from sim.engine.inputs import DDP_BUCKET_BYTES, SimInput
from sim.engine.pipeline import simulate
from sim.engine.replicas import StageReplica
from sim.engine.stage_cost import StageCost

__all__ = ["DDP_BUCKET_BYTES", "SimInput", "StageCost", "StageReplica", "simulate"]

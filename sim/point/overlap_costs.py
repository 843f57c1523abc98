"""A point's stage costs as its framework's overlap options change them.

* tensor-parallel collectives beside their GEMMs (:mod:`sim.parallel.tp_overlap`): each
  stage's ``tp_fwd`` / ``tp_bwd`` / ``tp_recompute`` keep the collectives that stay exposed,
  and ``tp_*_overlap`` get the others (:meth:`~sim.framework.base.Framework.tp_overlap`);
* CUDA graphs (:mod:`sim.framework.cuda_graphs`): the host work of the captured layers goes
  (:meth:`~sim.framework.base.Framework.host_captured`).
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder_shape import kind_of
from sim.engine.stage_cost import StageCost
from sim.framework.base import Framework
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.megatron import aggregate
from sim.parallel.shard import ShardedTrace
from sim.parallel.tp_overlap import Implementation, merge, split_comm


def with_tp_overlap(
    costs: tuple[StageCost, ...],
    sharded: ShardedTrace | DecoderShard,
    boundaries,
    plans,
    impl: Implementation,
    spec: ComputeSpec,
) -> tuple[StageCost, ...]:
    """``costs`` with each stage's tensor-parallel collectives split by ``impl`` (module doc);
    ``plans``: the memory plans (replica 0's say which layers a stage recomputes)."""
    layers = sharded.trace.layers
    if not sharded.partners:
        return costs
    edges = [*boundaries, len(layers)]
    t, dtype = sharded.tensor_parallel, sharded.trace.dtype
    splits = [
        split_comm(c, p, impl, spec, dtype, t)
        for c, p in zip(sharded.comm, sharded.partners, strict=True)
    ]
    out = []
    for s, cost in enumerate(costs):
        lo, hi = edges[s], edges[s + 1]
        fwd, bwd = [splits[i][0] for i in range(lo, hi)], [splits[i][1] for i in range(lo, hi)]
        rec = [splits[lo + i][0] for i in plans[0][s].recompute_layers]
        out.append(
            replace(
                cost,
                tp_fwd=aggregate([op for e, _ in fwd for op in e]),
                tp_fwd_overlap=merge([op for _, h in fwd for op in h]),
                tp_bwd=aggregate([op for e, _ in bwd for op in e]),
                tp_bwd_overlap=merge([op for _, h in bwd for op in h]),
                tp_recompute=aggregate([op for e, _ in rec for op in e]),
                tp_recompute_overlap=merge([op for _, h in rec for op in h]),
            )
        )
    return tuple(out)


def with_framework(
    costs: tuple[StageCost, ...],
    sharded: ShardedTrace | DecoderShard,
    boundaries,
    plans,
    framework: Framework,
    spec: ComputeSpec | None,
) -> tuple[StageCost, ...]:
    """``costs`` as ``framework``'s options change them (module doc).

    Raises:
        ValueError: the options do not apply to this layout (the framework refuses them).
    """
    impl = framework.tp_overlap(sharded.tensor_parallel, sharded_sp(sharded))
    if impl is not None and spec is not None:
        costs = with_tp_overlap(costs, sharded, boundaries, plans, impl, spec)
    trace = sharded.trace
    names = trace.provenance.get("layer_kinds") or [kind_of(x.name) for x in trace.layers]
    edges = [*boundaries, len(names)]
    kinds = [list(names[edges[s] : edges[s + 1]]) for s in range(len(costs))]
    if spec is not None:
        t = sharded.tensor_parallel
        costs = tuple(
            framework.stage_device_work(c, k, trace.layers[lo:hi], trace, t, spec)
            for c, k, lo, hi in zip(costs, kinds, edges[:-1], edges[1:], strict=True)
        )
    return tuple(framework.host_captured(c, k) for c, k in zip(costs, kinds, strict=True))


def sharded_sp(sharded: ShardedTrace | DecoderShard) -> bool:
    """Whether the shard runs with sequence parallelism."""
    if isinstance(sharded, DecoderShard):
        return sharded.layout.sp
    return sharded.sequence_parallel

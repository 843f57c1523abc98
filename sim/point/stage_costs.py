"""Each stage's cost for the engine (:class:`~sim.engine.stage_cost.StageCost`): its layers'
compute, boundary bytes and parameter tensors, its tensor-parallel collectives (and those its
recompute re-runs), and a decoder's expert- and context-parallel exchanges."""

from __future__ import annotations

from dataclasses import replace

from sim.compute.megatron_ops import stage_tensors
from sim.engine.stage_cost import StageCost
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.finalize_grads import layer_tp_summed_params
from sim.parallel.megatron import aggregate
from sim.parallel.ops import aggregate as aggregate_groups
from sim.parallel.router_bias import layer_router_experts
from sim.parallel.shard import ShardedTrace, model_shape
from sim.trace.schema import dtype_bytes, layer_kind
from sim.trace.t5 import is_t5, stage_tensors_t5


def stage_costs(sharded: ShardedTrace | DecoderShard, boundaries) -> tuple[StageCost, ...]:
    """Each stage's compute, boundary bytes, tensor-parallel collectives and (decoder traces)
    expert- and context-parallel exchanges and expert share of its gradients."""
    layers = sharded.trace.layers
    edges = list(boundaries) + [len(layers)]
    shape = model_shape(sharded.trace)
    d = dtype_bytes(sharded.trace.dtype)
    norm_bytes = 2 * int(shape["hidden"]) * d if shape else float("inf")
    summed = layer_tp_summed_params(sharded)  # finalize_model_grads' tensor-group all-reduce
    routers = layer_router_experts(sharded)  # and its router expert-bias update
    out = []
    for s in range(len(boundaries)):
        lo, hi = edges[s], edges[s + 1]
        cost = StageCost.from_layers(layers[lo:hi], layers[lo - 1].out_bytes if s > 0 else 0.0)
        comm = sharded.comm[lo:hi]
        kinds = [(layer_kind(x.name), x.param_bytes) for x in layers[lo:hi]]
        t5 = is_t5(sharded.trace)  # a T5 layer's tensors are its kind's (sim.compute.t5_ops)
        cost = replace(
            cost,
            param_tensors=stage_tensors_t5(sharded.trace, lo, hi)
            if t5
            else stage_tensors(kinds, norm_bytes),
            tp_fwd=aggregate([op for c in comm for op in c.fwd]),
            tp_bwd=aggregate([op for c in comm for op in c.bwd]),
            tp_fwd_layers=tuple(tuple((op.kind, op.nbytes) for op in c.fwd) for c in comm),
            tp_summed_params=sum(summed[lo:hi]),
            router_bias_experts=tuple(e for e in routers[lo:hi] if e > 0),
        )
        if isinstance(sharded, DecoderShard):
            ops = sharded.group[lo:hi]
            params = sum(x.param_bytes for x in layers[lo:hi])
            cost = replace(
                cost,
                group_fwd=aggregate_groups(op for f, _ in ops for op in f),
                group_bwd=aggregate_groups(op for _, b in ops for op in b),
                expert_grad_share=sum(sharded.expert_bytes[lo:hi]) / params if params else 0.0,
                fwd_syncs=sharded.fwd_syncs[lo:hi],
                grouped_ops=sharded.grouped_ops[lo:hi],
                attn_ops=sharded.attn_ops[lo:hi],
            )
        out.append(cost)
    return tuple(out)


def with_recompute_comm(
    costs: tuple[StageCost, ...], sharded: ShardedTrace | DecoderShard, boundaries, plans
) -> tuple[StageCost, ...]:
    """Each stage's cost with the tensor-parallel collectives its recompute re-runs: those of
    the layers its memory plan (replica 0's) checkpoints fully (:attr:`StageCost.tp_recompute`)."""
    if sharded.tensor_parallel < 2:
        return costs
    out = []
    for s, cost in enumerate(costs):
        lo = boundaries[s]
        ops = [op for i in plans[0][s].recompute_layers for op in sharded.comm[lo + i].fwd]
        out.append(replace(cost, tp_recompute=aggregate(ops)) if ops else cost)
    return tuple(out)


def with_recompute_syncs(
    costs: tuple[StageCost, ...], sharded: ShardedTrace | DecoderShard, boundaries, policy
) -> tuple[StageCost, ...]:
    """Each stage's cost with the host syncs of its layers' ``moe_act`` recompute in their
    backward (:attr:`StageCost.bwd_syncs`, :attr:`DecoderShard.recompute_syncs`), where the
    stage's memory ``policy`` recomputes ``moe_act`` (Megatron-Core's ``--recompute-modules``;
    alone or under the distributed optimizer)."""
    if not isinstance(sharded, DecoderShard) or not sharded.recompute_syncs:
        return costs
    out, edges = [], [*boundaries, len(sharded.trace.layers)]
    for s, cost in enumerate(costs):
        stage = policy.for_stage(s, len(costs))
        choice = getattr(stage, "choice", None) or stage
        if "moe_act" in getattr(choice, "modules", frozenset()):
            cost = replace(cost, bwd_syncs=sharded.recompute_syncs[edges[s] : edges[s + 1]])
        out.append(cost)
    return tuple(out)

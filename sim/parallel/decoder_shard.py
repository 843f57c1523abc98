"""A decoder trace as one rank runs it under tensor, expert and context parallelism.

:func:`shard_decoder` is :func:`sim.parallel.shard.shard_trace` for the decoder models of
:mod:`sim.trace.decoder` (``model_shape.kind == "decoder"``), with two more dimensions:

* **time**: each phase (forward, input gradient, weight gradient) of each layer is scaled by
  the compute model's ratio ``model(rank) / model(one GPU)`` (:mod:`sim.compute.decoder`):
  GEMMs at their tensor-split sizes over ``b*s/cp`` tokens, the attention core's ``1/cp``
  share of the scores, and in a MoE block the rows the **busiest** expert-parallel rank's
  experts compute (:mod:`sim.parallel.expert`; it sets the layer's pace, the others wait for it
  in the combine all-to-all); with ``cp > 1`` an attention layer's forward and input gradient
  also run the copies and merges Transformer Engine's context parallelism adds
  (:mod:`sim.parallel.context_kernels`); a Mamba layer's conv and scan run the whole sequence
  for ``1/cp`` of its heads between Megatron-Core's all-to-alls and their copies, which add host
  ops too (:mod:`sim.compute.mamba_cp`). A generated trace's times become ``model(rank)`` exactly;
* **memory**: dense parameters ``/ t`` but for the norms, router, MLA down projections and
  row-parallel biases every tensor rank keeps whole (:mod:`sim.parallel.decoder_whole`),
  routed-expert parameters ``/ (ep*t)``; activations as
  the model counts them on the rank (:func:`~sim.compute.decoder.layer_act_bytes`, the busiest
  EP rank's rows), in the ratio to the one-GPU count for a measured trace; ``out_bytes /
  (t*cp)`` (each tensor rank sends its share, as :mod:`sim.parallel.shard`);
* **collectives**: the tensor-parallel ones as Megatron runs them with sequence parallelism,
  as :class:`~sim.parallel.megatron.LayerComm`; the expert- and context-parallel ones as
  :class:`~sim.parallel.ops.GroupOp` (:mod:`sim.parallel.decoder_comm` says which);
* **host ops**: each tensor-parallel collective adds one op to its layer's count, as on the GPT
  and T5 paths (:func:`~sim.parallel.megatron.with_comm_ops`: Transformer Engine's linear
  layers issue one ``torch.distributed`` call per collective, none on one rank).

Every MoE block of a stage is assumed to route the same shares (one :class:`Routing`). A layer's
kind is its name's (:func:`~sim.compute.decoder_shape.kind_of`: ``embedding``, ``block.i``,
``moe_block.i``, ``swa_block.i``, ``mamba.i``, ``attention.i``, ``mlp.i``, ``moe.i``,
``mtp.j``, ``head``), or ``provenance.layer_kinds`` for a profiled Hugging Face chain (``sim
profile --model config.json``: ``embed``, ``layer<i>``, ``norm``, ``lm_head``). A Mamba-2 layer
under tensor parallelism with sequence parallelism all-gathers its input and reduce-scatters
its output like the other mixers (Megatron-Core ``MambaMixer``: column-parallel ``in_proj``,
row-parallel ``out_proj``). With LoRA the trainable bytes (the adapters) split like the dense
parameters and the frozen experts have no gradients to reduce.

The pieces: :mod:`sim.parallel.decoder_split` (whether a layout fits, a rank's attention
widths), :mod:`sim.parallel.decoder_scale` (one layer kind's ratios and layer scaling),
:mod:`sim.parallel.decoder_comm` (its collectives), :mod:`sim.parallel.low_params` (its
low-precision parameters); this module walks the trace's layers with them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.compute.decoder import tokens
from sim.compute.decoder_shape import kind_of
from sim.compute.precision_rules import LowPrecision
from sim.compute.quantize import layer_index
from sim.compute.routing import Routing
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.host_ops import HostOverhead
from sim.parallel.decoder_scale import kind_shard, scale_layer
from sim.parallel.decoder_split import decoder_problem
from sim.parallel.expert import expert_plan
from sim.parallel.layer_host import (
    attention_host_ops,
    grouped_host_ops,
    rank_expert_ops,
    with_mamba_cp_ops,
)
from sim.parallel.layout import ParallelLayout
from sim.parallel.low_params import low_precision_params
from sim.parallel.megatron import LayerComm, with_comm_ops
from sim.parallel.ops import GroupOp
from sim.parallel.tp_overlap import Partners
from sim.trace.decoder import decoder_shape, trace_precision
from sim.trace.schema import Trace, dtype_bytes


@dataclass(frozen=True)
class DecoderShard:
    """A decoder trace on one rank.

    Attributes:
        trace: the per-rank layers.
        comm: tensor-parallel collectives per layer.
        group: expert- and context-parallel exchanges per layer, ``(forward, backward)``.
        expert_bytes: routed-expert parameter bytes per layer on the rank (their gradients are
            reduced over the expert-data-parallel group only).
        layout: the parallel layout (:class:`~sim.parallel.layout.ParallelLayout`).
        routing: shares of routed tokens per expert.
        partners: the GEMMs beside each layer's tensor-parallel collectives
            (:func:`~sim.parallel.tp_overlap.partners`; with sequence parallelism only).
        low_params: per layer, the parameters on the rank whose GEMMs run in low precision
            (:func:`~sim.parallel.low_params.low_precision_params`; empty without a recipe).
        precision: the trace's low-precision recipe, or None.
        fwd_syncs: per layer, the shares of its forward's seconds before each of its host
            syncs (a MoE layer's, :func:`~sim.parallel.layer_host.sync_shares`), empty without one.
        grouped_ops: per layer, ``(forward ops, backward ops)`` of its grouped experts'
            per-expert host work (:func:`~sim.parallel.layer_host.grouped_host_ops`), counted
            in the layer's ``fwd_ops`` / ``bwd_ops`` too; ``(0, 0)`` for other layers, empty for
            none. A CUDA graph takes it off only when it captures the experts
            (:func:`sim.framework.cuda_graphs.captured`).
        attn_ops: per layer, ``(forward ops, backward ops)`` of the host work inside its
            attention module that the generic counts lack
            (:func:`~sim.parallel.layer_host.attention_host_ops`), counted in the layer's ops
            too; empty for none. A CUDA graph of the attention takes it whole.
        recompute_syncs: per layer, the share of its backward's seconds before the host sync
            of a ``moe_act`` recompute (:func:`~sim.parallel.layer_host.recompute_sync_share`;
            0.0 for a layer without one), empty for none; in force only where the memory
            policy recomputes ``moe_act`` (:func:`sim.point.stage_costs.with_recompute_syncs`).
    """

    trace: Trace
    comm: tuple[LayerComm, ...]
    group: tuple[tuple[tuple[GroupOp, ...], tuple[GroupOp, ...]], ...]
    expert_bytes: tuple[float, ...]
    layout: ParallelLayout
    routing: Routing = Routing()
    partners: tuple[Partners, ...] = ()
    low_params: tuple[float, ...] = ()
    precision: LowPrecision | None = None
    fwd_syncs: tuple[tuple[float, ...], ...] = ()
    grouped_ops: tuple[tuple[float, float], ...] = ()
    attn_ops: tuple[tuple[float, float], ...] = ()
    recompute_syncs: tuple[float, ...] = ()

    @property
    def tensor_parallel(self) -> int:
        """``t``, the tensor-parallel size (as :attr:`ShardedTrace.tensor_parallel`)."""
        return self.layout.tp


def shard_decoder(
    trace: Trace,
    par: ParallelLayout,
    spec: ComputeSpec,
    routing: Routing = Routing(),
    regather: bool = False,
    host: HostOverhead | None = None,
) -> DecoderShard:
    """``trace`` (a decoder trace at its micro-batch size, on ``spec``) on one rank of
    layout ``par`` with tokens routed as ``routing`` (module doc); ``regather``: the
    backward gathers the column-parallel layers' saved inputs again
    (:func:`~sim.parallel.decoder_comm.tp_comm`); ``host``: the rank's host, whose figures price
    the grouped experts' host work per kind (:func:`~sim.parallel.layer_host.grouped_host_ops`;
    None: the reference host's).

    Raises:
        ValueError: the trace records no decoder shape, or
            :func:`~sim.parallel.decoder_split.decoder_problem`.
    """
    m = decoder_shape(trace)
    why = decoder_problem(m, par)
    if why:
        raise ValueError(why)
    b, d, dt = trace.microbatch_size, dtype_bytes(trace.dtype), trace.dtype
    t, r = tokens(m, b, par.tp, par.sp, par.cp)
    plan = expert_plan(m.moe, routing, r, par.ep, par.expert_tp, d) if m.moe is not None else None
    rows = plan.rows[plan.busiest] if plan is not None else ()
    low = trace_precision(trace)
    cache: dict[tuple[str, bool], tuple] = {}
    layers, comm, group, expert, pairs, lows, syncs, grouped = [], [], [], [], [], [], [], []
    attn: list[tuple[float, float]] = []
    rsyncs: list[float] = []
    kinds = trace.provenance.get("layer_kinds") or [kind_of(x.name) for x in trace.layers]
    for layer, kind in zip(trace.layers, kinds, strict=True):
        runs_low = low is not None and low.layer_low(kind, layer_index(layer.name), m.layers)
        lp = low if runs_low else None
        key = (kind, lp is not None)
        if key not in cache:
            cache[key] = kind_shard(kind, m, b, d, dt, par, spec, rows, plan, lp, regather)
        ratios, act, share, tpc, ops, pair, parts, (sync, rsync) = cache[key]
        syncs.append(sync)
        rsyncs.append(rsync)
        scaled = scale_layer(layer, ratios, act, share[0] + share[1], par, parts)
        grouped.append(grouped_host_ops(scaled, kind, m, par, lp, host))
        attn.append(attention_host_ops(scaled, kind, m))
        scaled = with_mamba_cp_ops(rank_expert_ops(scaled, kind, m, par, grouped[-1]), kind, par)
        layers.append(with_comm_ops(scaled, tpc))
        comm.append(tpc)
        pairs.append(pair)
        group.append(ops)
        expert.append(0.0 if m.lora else layer.param_bytes * share[1])
        held = layer.param_bytes > 0  # none: a shared MTP depth's (sim.trace.decoder)
        lows.append(low_precision_params(kind, m, par, lp) if lp is not None and held else 0.0)
    prov = {**trace.provenance, "parallel": _describe(par, routing)}
    shared = tuple(
        replace(g, param_bytes=g.param_bytes / par.shards("dense_params")) for g in trace.shared
    )  # a tied word embedding, split over the vocabulary like its layers
    out = replace(trace, layers=tuple(layers), provenance=prov, profiles={}, shared=shared)
    with_pairs = tuple(pairs) if par.sp and par.tp > 1 else ()
    return DecoderShard(
        out,
        tuple(comm),
        tuple(group),
        tuple(expert),
        par,
        routing,
        with_pairs,
        tuple(lows) if low is not None else (),
        low,
        tuple(syncs),
        tuple(grouped) if any(f or b for f, b in grouped) else (),
        tuple(attn) if any(f or b for f, b in attn) else (),
        tuple(rsyncs) if any(rsyncs) else (),
    )


def _describe(par: ParallelLayout, routing: Routing) -> str:
    parts = [f"t={par.tp}{'+sp' if par.sp else ''}", f"cp={par.cp} ({par.cp_comm})"]
    parts.append(f"ep={par.ep} ({routing.label()})")
    return ", ".join(parts)

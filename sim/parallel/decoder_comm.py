"""A decoder layer's collectives on one rank: the tensor-parallel ones (:func:`tp_comm`) and the
expert- and context-parallel exchanges (:func:`group_ops`).

The tensor-parallel ones as Megatron runs them with sequence parallelism (an all-gather and a
reduce-scatter of ``b*s/cp*h*d`` around the attention and around each MLP: dense, shared
experts; and of the routed rows around the experts, expert tensor parallelism; under a
per-tensor Transformer Engine recipe the amax all-reduces of :mod:`sim.parallel.amax_reduce`), as
:class:`~sim.parallel.megatron.LayerComm`; the expert- and context-parallel ones as
:class:`~sim.parallel.ops.GroupOp` (two all-to-alls per MoE block and direction, and before the
forward's dispatch the all-gather of the token counts of a dropless layer, :data:`COUNT_BYTES`,
or with HybridEP of the routing map, :func:`~sim.compute.hybridep.routing_map_bytes`, whose
dispatch carries each token's probabilities, :func:`~sim.compute.hybridep.dispatch_payload`; the
attention's exchanges, ring steps hiding under ``1/cp`` of the attention core; a Mamba layer's
all-to-alls, :mod:`sim.compute.mamba_cp`). Split from
:mod:`sim.parallel.decoder_shard`, which calls both per layer kind
(:mod:`sim.parallel.decoder_scale`).
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder import ATTN, DecoderShape, tokens
from sim.compute.decoder_shape import base_kind
from sim.compute.hybridep import dispatch_payload, routing_map_bytes
from sim.compute.mamba_cp import alltoall_bytes
from sim.compute.precision_rules import LowPrecision
from sim.events import EventKind
from sim.parallel.amax_reduce import amax_ops
from sim.parallel.context import context_comm
from sim.parallel.decoder_split import attention_dims
from sim.parallel.layout import ParallelLayout
from sim.parallel.megatron import CommOp, LayerComm, embedding_comm, head_comm
from sim.parallel.ops import GroupOp
from sim.trace.decoder import MOE_KINDS

AG, RS, AR = EventKind.ALL_GATHER.value, EventKind.REDUCE_SCATTER.value, EventKind.ALLREDUCE.value
COUNT_BYTES = 8
"""int64 token counts per expert, all-gathered over the EP group before the dispatch of a
dropless (or unpadded) MoE layer (Megatron ``MoEAlltoAllTokenDispatcher.preprocess``:
``gather_from_sequence_parallel_region(num_local_tokens_per_expert, group=tp_ep_group)``)."""


def tp_comm(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    par: ParallelLayout,
    rows: float,
    gather_elem: float | None = None,
    regather: bool = False,
    low: LowPrecision | None = None,
) -> LayerComm:
    """The layer's tensor-parallel collectives; ``gather_elem``: bytes per element of the
    sequence-parallel all-gathers of a mixer's or MLP's input (``d``, or a quantized input's:
    Transformer Engine quantizes a linear layer's input before gathering it,
    NVIDIA/TransformerEngine@d0067d0 ``module/layernorm_linear.py:285-312``,
    ``linear.py:378-418``); ``regather``: the backward gathers each dense column-parallel
    input again (:mod:`sim.parallel.megatron`; not the routed experts' rows); ``low``: the
    recipe the layer runs, whose per-tensor amaxes Transformer Engine all-reduces over the
    group, last in each phase (:func:`sim.parallel.amax_reduce.amax_ops`: after the pairs, so
    :func:`sim.parallel.tp_overlap.partners` pairs the same collectives)."""
    t, s, h = par.tp, m.seq_len // par.cp, m.hidden
    if t == 1:
        return LayerComm()
    if kind == "embedding":
        return embedding_comm(b, s, h, d, t, par.sp)
    if kind == "head":
        return head_comm(b, s, h, d, t, par.sp, regather, m.cross_entropy_fusion)
    x = float(b * s * h * d)
    base = base_kind(kind)
    mixers = 2 if base in ("block", "moe_block", "mtp") else 1
    if not par.sp:
        return LayerComm((CommOp(AR, x),) * mixers, (CommOp(AR, x),) * mixers)
    q = x * (gather_elem if gather_elem is not None else d) / d  # gathered quantized
    pairs = [(q, x)] if base in ("block", "moe_block", "attention", "mamba", "mtp") else []
    moe = base in MOE_KINDS and m.moe is not None
    if base in ("block", "mlp") or (moe and m.moe is not None and m.moe.shared_ffn):
        pairs.append((q, x))
    again = tuple(CommOp(AG, ag) for ag, _ in pairs) if regather else ()
    if moe and par.expert_tp == t:  # the routed rows over the tensor group (expert TP = TP)
        pairs.append((rows * h * d, rows * h * d))
    ops = tuple(op for ag, rs in pairs for op in (CommOp(AG, ag), CommOp(RS, rs)))
    amax_f, amax_b = amax_ops(kind, m, t, par.sp, low)
    return LayerComm(ops + amax_f, ops + again + amax_b)


def group_ops(
    kind: str, m: DecoderShape, b: int, d: int, par: ParallelLayout, core: tuple[float, float], plan
) -> tuple[tuple[GroupOp, ...], tuple[GroupOp, ...]]:
    """The layer's expert- and context-parallel exchanges: the CP exchange of a layer with
    attention (:data:`~sim.compute.decoder.ATTN`), the six all-to-alls each way of a Mamba
    layer's context parallelism (:func:`sim.compute.mamba_cp.alltoall_bytes`: synchronous,
    nothing hides them), the EP dispatch and combine of a layer
    with routed experts (``plan``: a dense block's, a MoE block's, a hybrid model's ``moe``
    layer's or an MTP depth's)."""
    fwd: list[GroupOp] = []
    bwd: list[GroupOp] = []
    if par.cp > 1 and base_kind(kind) in ATTN:
        t, _ = tokens(m, b, par.tp, par.sp, par.cp)
        cc = context_comm(attention_dims(m, par.tp), t, par.cp, d, par.cp_comm)
        for out, ops, hide in ((fwd, cc.fwd, core[0]), (bwd, cc.bwd, core[1])):
            for coll, nb, n in ops:
                hidden = hide / par.cp if coll == "ring" else 0.0
                out.append(GroupOp("cp", coll, nb, n, hidden_s=hidden))
    if par.cp > 1 and base_kind(kind) == "mamba":
        assert m.mamba is not None
        t, _ = tokens(m, b, par.tp, par.sp, par.cp)
        mf, mb = alltoall_bytes(m.mamba, t, par.tp, par.cp, d)
        fwd += [GroupOp("cp", "alltoall", nb) for _, nb in mf]
        bwd += [GroupOp("cp", "alltoall", nb) for _, nb in mb]
    if plan is not None and 1 < par.expert_tp != par.tp:  # folded expert TP (sim.parallel.folding)
        nb = float(sum(plan.rows[plan.busiest])) * m.hidden * d
        etp = (GroupOp("etp", "all_gather", nb), GroupOp("etp", "reduce_scatter", nb))
        fwd += etp
        bwd += etp
    if plan is not None and par.ep > 1:
        assert m.moe is not None
        routed = plan.routed
        a2a = (
            GroupOp("ep", "alltoall", 0.0, pairs=plan.dispatch, routed=routed),
            GroupOp("ep", "alltoall", 0.0, pairs=plan.combine, routed=routed),
        )
        if m.moe.hybridep:  # HybridEP gathers the routing map instead (sim.compute.hybridep)
            _, r = tokens(m, b, par.tp, par.sp, par.cp)
            cols = m.moe.experts * par.expert_tp  # replicated over the expert-tensor ranks
            nb = routing_map_bytes(r, cols, par.ep * par.expert_tp)
            fwd.append(GroupOp("ep", "all_gather", nb))
            scale = dispatch_payload(m.moe.row_width * d, cols, m.moe.hybridep_domains)
            pairs = tuple(tuple(x * scale for x in row) for row in plan.dispatch)
            a2a = (replace(a2a[0], pairs=pairs), a2a[1])  # with the domain's probabilities
        elif not (m.moe.capacity_factor is not None and m.moe.pad_to_capacity):
            fwd.append(GroupOp("ep", "all_gather", float(COUNT_BYTES * m.moe.experts * par.ep)))
        fwd += a2a
        bwd += a2a[::-1]
    return tuple(fwd), tuple(bwd)

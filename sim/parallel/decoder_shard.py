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
  (:mod:`sim.parallel.context_kernels`). A generated trace's times become ``model(rank)`` exactly;
* **memory**: dense parameters ``/ t``, routed-expert parameters ``/ (ep*t)``; activations as
  the model counts them on the rank (:func:`~sim.compute.decoder.layer_act_bytes`, the busiest
  EP rank's rows), in the ratio to the one-GPU count for a measured trace; ``out_bytes /
  (t*cp)`` (each tensor rank sends its share, as :mod:`sim.parallel.shard`);
* **collectives**: the tensor-parallel ones as Megatron runs them with sequence parallelism
  (an all-gather and a reduce-scatter of ``b*s/cp*h*d`` around the attention and around each
  MLP: dense, shared experts; and of the routed rows around the experts, expert tensor
  parallelism), as :class:`~sim.parallel.megatron.LayerComm`; the expert- and
  context-parallel ones as :class:`~sim.parallel.ops.GroupOp` (two all-to-alls per MoE block and
  direction, and before the forward's dispatch the all-gather of the token counts of a
  dropless layer, :data:`COUNT_BYTES`, or with HybridEP of the routing map,
  :func:`~sim.compute.hybridep.routing_map_bytes`; the attention's exchanges, ring steps hiding under
  ``1/cp`` of the attention core).

Every MoE block of a stage is assumed to route the same shares (one :class:`Routing`). A layer's
kind is its name's (:func:`~sim.compute.decoder_shape.kind_of`: ``embedding``, ``block.i``,
``moe_block.i``, ``swa_block.i``, ``mamba.i``, ``attention.i``, ``mlp.i``, ``moe.i``,
``mtp.j``, ``head``), or ``provenance.layer_kinds`` for a profiled Hugging Face chain (``sim
profile --model config.json``: ``embed``, ``layer<i>``, ``norm``, ``lm_head``). A Mamba-2 layer
under tensor parallelism with sequence parallelism all-gathers its input and reduce-scatters
its output like the other mixers (Megatron-Core ``MambaMixer``: column-parallel ``in_proj``,
row-parallel ``out_proj``). With LoRA the trainable bytes (the adapters) split like the dense
parameters and the frozen experts have no gradients to reduce.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.compute.decoder import (
    ATTN,
    DecoderShape,
    layer_act_bytes,
    layer_kernels,
    layer_params,
    tokens,
)
from sim.compute.decoder_shape import base_kind, kind_of
from sim.compute.hybridep import routing_map_bytes
from sim.compute.kernels import Kernel, phase_time
from sim.compute.low_precision_act import keeps_original, quantized_input_savings
from sim.compute.precision import TE
from sim.compute.precision_rules import LowPrecision
from sim.compute.quantize import layer_index, quantize_layer
from sim.compute.recompute_modules import module_parts
from sim.compute.routing import Routing
from sim.compute.ssm import check_tp as mamba_tp_problem
from sim.events import EventKind
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.context import AttentionDims, check_cp, context_comm
from sim.parallel.context_kernels import context_kernels
from sim.parallel.expert import check_ep, expert_plan
from sim.parallel.layer_host import (
    attention_host_ops,
    grouped_host_ops,
    rank_expert_ops,
    sync_shares,
)
from sim.parallel.layout import ParallelLayout
from sim.parallel.megatron import CommOp, LayerComm, embedding_comm, head_comm
from sim.parallel.ops import GroupOp
from sim.parallel.tp_overlap import Partners, partners
from sim.trace.decoder import MOE_KINDS, decoder_shape, single_gpu_rows, trace_precision
from sim.trace.schema import LayerProfile, Trace, dtype_bytes

AG, RS, AR = EventKind.ALL_GATHER.value, EventKind.REDUCE_SCATTER.value, EventKind.ALLREDUCE.value
COUNT_BYTES = 8
"""int64 token counts per expert, all-gathered over the EP group before the dispatch of a
dropless (or unpadded) MoE layer (Megatron ``MoEAlltoAllTokenDispatcher.preprocess``:
``gather_from_sequence_parallel_region(num_local_tokens_per_expert, group=tp_ep_group)``)."""
CORE = ("flash_attn_fwd", "flash_attn_bwd", "scores", "softmax", "attn_dropout", "attn_v")


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
            (:func:`low_precision_params`; empty without a recipe).
        precision: the trace's low-precision recipe, or None.
        fwd_syncs: per layer, the shares of its forward's seconds before each of its host
            syncs (a MoE layer's, :func:`~sim.parallel.layer_host.sync_shares`), empty without one.
        grouped_ops: per layer, ``(forward ops, backward ops)`` of its grouped experts'
            per-expert host work (:func:`~sim.parallel.layer_host.grouped_host_ops`), counted in the layer's
            ``fwd_ops`` / ``bwd_ops`` too; ``(0, 0)`` for other layers, empty for none. A CUDA
            graph takes it off only when it captures the experts
            (:func:`sim.framework.cuda_graphs.captured`).
        attn_ops: per layer, ``(forward ops, backward ops)`` of the host work inside its
            attention module that the generic counts lack
            (:func:`~sim.parallel.layer_host.attention_host_ops`), counted in the layer's ops
            too; empty for none. A CUDA graph of the attention takes it whole.
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

    @property
    def tensor_parallel(self) -> int:
        """``t``, the tensor-parallel size (as :attr:`ShardedTrace.tensor_parallel`)."""
        return self.layout.tp


def decoder_problem(m: DecoderShape, par: ParallelLayout) -> str:
    """Why ``m`` cannot run split as ``par`` says, or ``""``."""
    t = par.tp
    if m.heads % t or m.ffn_hidden % t or ((m.kv_heads or m.heads) % t and t % (m.kv_heads or 1)):
        return f"tensor_parallel {t} does not divide the heads {m.heads} and FFN {m.ffn_hidden}"
    if m.moe is not None:
        if t > 1 and not par.sp:
            return "a MoE model with tensor_parallel > 1 needs sequence_parallel (Megatron-LM)"
        if m.moe.expert_ffn % t or m.moe.shared_ffn % t:
            return f"tensor_parallel {t} does not divide the expert width {m.moe.expert_ffn}"
        why = check_ep(m.moe, par.ep)
        if why:
            return why
        if m.moe.expert_ffn % par.expert_tp:
            return (
                f"expert_tensor_parallel {par.expert_tp} does not divide the expert width "
                f"{m.moe.expert_ffn}"
            )
    elif par.ep > 1:
        return f"expert_parallel {par.ep} needs a MoE model"
    if m.mamba is not None:
        why = mamba_tp_problem(m.mamba, t)
        if why or par.cp > 1:
            return why or f"context_parallel {par.cp} over Mamba layers is not modelled"
    if par.sp and (m.seq_len // par.cp) % t:
        return f"sequence parallelism needs seq_len/cp divisible by {t}"
    return check_cp(par.cp, m.seq_len, m.heads, t, par.cp_comm)


def attention_dims(m: DecoderShape, tp: int) -> AttentionDims:
    """Per-token widths of a rank's Q, K, V and output (:class:`AttentionDims`)."""
    at = m.heads // tp
    if m.mla is not None:
        q = at * m.mla.d_qk
        return AttentionDims(q, q, at * m.mla.d_v, at * m.mla.d_v, at)
    hd = m.block.hd
    kv = max(1, (m.kv_heads or m.heads) // tp) * hd
    return AttentionDims(at * hd, kv, kv, at * hd, at)


def _times(kernels: tuple[list[Kernel], ...], spec: ComputeSpec, dtype: str) -> list[float]:
    return [phase_time(k, spec, dtype).total_s if k else 0.0 for k in kernels]


def _core_s(kernels: list[Kernel], spec: ComputeSpec, dtype: str) -> float:
    core = [k for k in kernels if k.name in CORE or k.name.startswith("d_") and k.kind == "attn"]
    return phase_time(core, spec, dtype).total_s if core else 0.0


def _tp_comm(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    par: ParallelLayout,
    rows: float,
    gather_elem: float | None = None,
    regather: bool = False,
) -> LayerComm:
    """The layer's tensor-parallel collectives; ``gather_elem``: bytes per element of the
    sequence-parallel all-gathers of a mixer's or MLP's input (``d``, or a quantized input's:
    Transformer Engine quantizes a linear layer's input before gathering it,
    NVIDIA/TransformerEngine@d0067d0 ``module/layernorm_linear.py:285-312``,
    ``linear.py:378-418``); ``regather``: the backward gathers each dense column-parallel
    input again (:mod:`sim.parallel.megatron`; not the routed experts' rows)."""
    t, s, h = par.tp, m.seq_len // par.cp, m.hidden
    if t == 1:
        return LayerComm()
    if kind == "embedding":
        return embedding_comm(b, s, h, d, t, par.sp)
    if kind == "head":
        return head_comm(b, s, h, d, t, par.sp, regather)
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
    return LayerComm(ops, ops + again)


def _group_ops(
    kind: str, m: DecoderShape, b: int, d: int, par: ParallelLayout, core: tuple[float, float], plan
) -> tuple[tuple[GroupOp, ...], tuple[GroupOp, ...]]:
    """The layer's expert- and context-parallel exchanges: the CP exchange of a layer with
    attention (:data:`~sim.compute.decoder.ATTN`), the EP dispatch and combine of a layer
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
            nb = routing_map_bytes(r, m.moe.experts, par.ep * par.expert_tp)
            fwd.append(GroupOp("ep", "all_gather", nb))
        elif not (m.moe.capacity_factor is not None and m.moe.pad_to_capacity):
            fwd.append(GroupOp("ep", "all_gather", float(COUNT_BYTES * m.moe.experts * par.ep)))
        fwd += a2a
        bwd += a2a[::-1]
    return tuple(fwd), tuple(bwd)


def shard_decoder(
    trace: Trace,
    par: ParallelLayout,
    spec: ComputeSpec,
    routing: Routing = Routing(),
    regather: bool = False,
) -> DecoderShard:
    """``trace`` (a decoder trace at its micro-batch size, on ``spec``) on one rank of
    layout ``par`` with tokens routed as ``routing`` (module doc); ``regather``: the
    backward gathers the column-parallel layers' saved inputs again (:func:`_tp_comm`).

    Raises:
        ValueError: the trace records no decoder shape, or :func:`decoder_problem`.
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
    kinds = trace.provenance.get("layer_kinds") or [kind_of(x.name) for x in trace.layers]
    for layer, kind in zip(trace.layers, kinds, strict=True):
        runs_low = low is not None and low.layer_low(kind, layer_index(layer.name), m.layers)
        lp = low if runs_low else None
        key = (kind, lp is not None)
        if key not in cache:
            cache[key] = _kind_shard(kind, m, b, d, dt, par, spec, rows, plan, lp, regather)
        ratios, act, share, tpc, ops, pair, parts, sync = cache[key]
        syncs.append(sync)
        scaled = _apply(layer, ratios, act, share[0] + share[1], par, parts)
        grouped.append(grouped_host_ops(scaled, kind, m, par, lp))
        attn.append(attention_host_ops(scaled, kind, m))
        layers.append(rank_expert_ops(scaled, kind, m, par, grouped[-1]))
        comm.append(tpc)
        pairs.append(pair)
        group.append(ops)
        expert.append(0.0 if m.lora else layer.param_bytes * share[1])
        lows.append(low_precision_params(kind, m, par, lp) if lp is not None else 0.0)
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
    )


def low_precision_params(
    kind: str, m: DecoderShape, par: ParallelLayout, low: LowPrecision
) -> float:
    """Parameters of a layer on one rank whose GEMMs run under ``low`` (a layer its rules run
    low): the layer's linear weights (:func:`~sim.compute.decoder.layer_params` less its norms
    and, unless the rules quantize it, the router), dense ones split
    ``par.shards("dense_params")`` ways and routed experts ``par.shards("expert_params")``
    ways; the output layer's ``V x h`` where the rules quantize it; nothing else (the
    embedding is no GEMM). Norms: ``h`` per norm, two in a block, one in a hybrid layer (an
    upper bound of a per-layer error of ``h`` parameters)."""
    dense, experts = layer_params(kind, m)
    base = base_kind(kind)
    if base == "head":
        linear = float(m.vocab * m.hidden) if low.rules.head else 0.0
        return linear / par.shards("dense_params")
    if base == "embedding":
        return 0.0
    norms = 2 if base in ("block", "moe_block", "mtp") else 1
    linear = max(0.0, float(dense - norms * m.hidden))
    if base in MOE_KINDS and m.moe is not None and not low.rules.router:
        linear = max(0.0, linear - m.moe.router_params())
    return linear / par.shards("dense_params") + experts / par.shards("expert_params")


def _kind_shard(
    kind, m, b, d, dt, par, spec, rows, plan, low: LowPrecision | None = None, regather=False
):
    """One layer kind's scaling on the rank (ratios, activations, parameter shares,
    collectives); ``low``: the recipe, when this layer runs its linear layers under it."""
    moe = base_kind(kind) in MOE_KINDS and m.moe is not None
    one_rows = single_gpu_rows(m, b) if moe else ()
    mine = rows if moe else ()

    def kernels(*args):
        made = layer_kernels(kind, m, b, d, *args)
        if low is None:
            return made
        return quantize_layer(made, low.recipe, spec.low_rate(low.recipe.format), low.rules)

    full = kernels(1, False, 1, one_rows)
    rank = _with_context(kernels(par.tp, par.sp, par.cp, mine, par.expert_tp), kind, m, b, d, par)
    f1, rk = _times(full, spec, dt), _times(rank, spec, dt)
    fl1, flr = (sum(k.flops for k in x[0]) for x in (full, rank))
    ratios = tuple(x / y if y > 0 else 1.0 for x, y in zip(rk, f1, strict=True))
    ratios += (flr / fl1 if fl1 > 0 else 1.0,)
    act1 = layer_act_bytes(kind, m, b, d, rows=one_rows)
    act = layer_act_bytes(kind, m, b, d, par.tp, par.sp, par.cp, mine, par.cp_comm, par.expert_tp)
    saved = None
    if low is not None and low.recipe.library == TE and low.recipe.wgrad:  # quantized inputs
        saved = low.recipe.data_bytes + low.recipe.scale_bytes
        act -= quantized_input_savings(kind, m, b, d, saved, par.tp, par.sp, par.cp, mine,
                                       par.expert_tp, low.rules.keep16,
                                       keeps_original(low.recipe.name))  # fmt: skip
    act = act / act1 if act1 else 1.0
    dense, expert = layer_params(kind, m)
    total = float(dense + expert) or 1.0
    share = (
        dense / par.shards("dense_params") / total,
        expert / par.shards("expert_params") / total,
    )
    core = (_core_s(rank[0], spec, dt), _core_s(rank[1], spec, dt))
    quantized = low is not None and low.recipe.library == TE
    gather = low.recipe.data_bytes + low.recipe.scale_bytes if quantized and low else d
    tpc = _tp_comm(kind, m, b, d, par, float(sum(mine)), gather, regather)
    ops = _group_ops(kind, m, b, d, par, core, plan if moe else None)
    pair = partners(tpc, *rank) if par.sp and par.tp > 1 else Partners()
    fc2 = saved if low is not None and "expert_down" not in low.rules.keep16 else None
    parts = _parts(kind, m, b, d, dt, par, mine, spec, rk[0], act1, fc2)
    return ratios, act, share, tpc, ops, pair, parts, sync_shares(rank[0], spec, dt)


def _with_context(rank, kind: str, m: DecoderShape, b: int, d: int, par: ParallelLayout):
    """``rank``'s kernels with the copies and merges TE's context parallelism adds to an
    attention layer (:mod:`sim.parallel.context_kernels`) in its forward and input gradient."""
    if par.cp == 1 or base_kind(kind) not in ("block", "moe_block", "attention", "mtp"):
        return rank
    t, _ = tokens(m, b, par.tp, par.sp, par.cp)
    fwd, bwd = context_kernels(attention_dims(m, par.tp), t, par.cp, d, par.cp_comm)
    return (rank[0] + fwd, rank[1] + bwd, *rank[2:])


def _parts(kind, m, b, d, dt, par, rows, spec, fwd_s: float, act1: float, saved=None) -> tuple:
    """Each recompute choice of the layer on the rank (:mod:`sim.compute.recompute_modules`)
    as ``(choice, dropped share of the one-GPU stash, share of the rank's forward seconds)``:
    :func:`_apply` turns the shares into the layer's bytes and seconds.

    ``saved``: bytes per element of a linear input a low-precision recipe keeps (None or ``d``:
    16 bits). ``moe_act`` then drops the experts' fc2 input at that size, the quantized copy the
    stash holds (:mod:`sim.compute.low_precision_act`): with FP8 or FP4, Megatron-Core makes
    ``linear_fc2`` save its original input, the activation output the recompute discards
    (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/experts.py`` lines 269-276)."""
    out = []
    args = (par.tp, par.sp, par.cp, rows, par.expert_tp)
    for name, dropped, kernels in module_parts(kind, m, b, d, *args):
        if name == "moe_act" and saved is not None and saved < d:
            dropped *= saved / d
        secs = phase_time(list(kernels), spec, dt).total_s if kernels else 0.0
        out.append((name, dropped / act1 if act1 else 0.0, secs / fwd_s if fwd_s else 0.0))
    return tuple(out)


def _apply(
    layer: LayerProfile, ratios, act: float, share: float, par: ParallelLayout, parts=()
) -> LayerProfile:
    """``layer`` scaled: times by ``ratios`` (forward, input and weight gradient; FLOPs last),
    activations by ``act``, parameters by ``share`` (module doc); its recompute choices
    (``parts``, :func:`_parts`) in the scaled layer's bytes and seconds."""
    kf, ki, kw, kflops = ratios
    bi = None if layer.bwd_input_s is None else layer.bwd_input_s * ki
    bw = None if layer.bwd_weight_s is None else layer.bwd_weight_s * kw
    bwd = bi + bw if bi is not None and bw is not None else layer.bwd_s * (ki + kw) / 2
    return replace(
        layer,
        fwd_s=layer.fwd_s * kf,
        bwd_s=bwd,
        bwd_input_s=bi,
        bwd_weight_s=bw,
        param_bytes=layer.param_bytes * share,
        trainable_bytes=(
            None
            if layer.trainable_bytes is None
            else layer.trainable_bytes / par.shards("dense_params")
        ),
        act_bytes=layer.act_bytes * act,
        out_bytes=layer.out_bytes / par.shards("boundary"),
        flops=None if layer.flops is None else layer.flops * kflops,
        recompute_parts=tuple(
            (name, layer.act_bytes * drop, layer.fwd_s * kf * secs) for name, drop, secs in parts
        ),
    )


def _describe(par: ParallelLayout, routing: Routing) -> str:
    parts = [f"t={par.tp}{'+sp' if par.sp else ''}", f"cp={par.cp} ({par.cp_comm})"]
    parts.append(f"ep={par.ep} ({routing.label()})")
    return ", ".join(parts)

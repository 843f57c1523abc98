"""One decoder layer kind from one GPU to one rank: :func:`kind_shard` computes, once per kind,
the ratios of the rank's times, activations and parameters to the one-GPU layer's (the
compute model's ``model(rank) / model(one GPU)``, :mod:`sim.compute.decoder`), the layer's
collectives (:mod:`sim.parallel.decoder_comm`) and its recompute choices; :func:`scale_layer`
applies them to a traced layer. Split from :mod:`sim.parallel.decoder_shard`, which calls
both for each layer of a trace (its module doc says what scales how).
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder import DecoderShape, layer_act_bytes, layer_kernels, layer_params, tokens
from sim.compute.decoder_shape import base_kind
from sim.compute.kernels import Kernel, phase_time
from sim.compute.low_precision_act import recipe_input_savings
from sim.compute.precision import TE
from sim.compute.precision_rules import LowPrecision
from sim.compute.quantize import quantize_for
from sim.compute.recompute_modules import module_parts
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.context_kernels import context_kernels
from sim.parallel.decoder_comm import group_ops, tp_comm
from sim.parallel.decoder_split import attention_dims
from sim.parallel.decoder_whole import whole_params
from sim.parallel.layer_host import recompute_sync_share, sync_shares
from sim.parallel.layout import ParallelLayout
from sim.parallel.replicated import rank_param_bytes
from sim.parallel.ring_steps import with_ring_steps
from sim.parallel.tp_overlap import Partners, partners
from sim.trace.decoder import MOE_KINDS, single_gpu_rows
from sim.trace.schema import LayerProfile

CORE = ("flash_attn_fwd", "flash_attn_bwd", "scores", "softmax", "attn_dropout", "attn_v")


def _times(kernels: tuple[list[Kernel], ...], spec: ComputeSpec, dtype: str) -> list[float]:
    return [phase_time(k, spec, dtype).total_s if k else 0.0 for k in kernels]


def _core_s(kernels: list[Kernel], spec: ComputeSpec, dtype: str) -> float:
    core = [k for k in kernels if k.name in CORE or k.name.startswith("d_") and k.kind == "attn"]
    return phase_time(core, spec, dtype).total_s if core else 0.0


def kind_shard(
    kind, m, b, d, dt, par, spec, rows, plan, low: LowPrecision | None = None, regather=False
):
    """One layer kind's scaling on the rank (ratios, activations, parameter shares,
    collectives, recompute choices, and the host syncs: its forward's shares before each,
    :func:`~sim.parallel.layer_host.sync_shares`, and its backward's before a ``moe_act``
    recompute's, :func:`~sim.parallel.layer_host.recompute_sync_share`); ``low``: the recipe,
    when this layer runs its linear layers under it."""
    moe = base_kind(kind) in MOE_KINDS and m.moe is not None
    one_rows = single_gpu_rows(m, b) if moe else ()
    mine = rows if moe else ()

    def kernels(*args):
        made = layer_kernels(kind, m, b, d, *args)
        return made if low is None else quantize_for(made, low, spec)

    full = kernels(1, False, 1, one_rows)
    rank = _with_context(
        kernels(par.tp, par.sp, par.cp, mine, par.expert_tp), kind, m, b, d, par, spec, dt
    )
    f1, rk = _times(full, spec, dt), _times(rank, spec, dt)
    fl1, flr = (sum(k.flops for k in x[0]) for x in (full, rank))
    ratios = tuple(x / y if y > 0 else 1.0 for x, y in zip(rk, f1, strict=True))
    ratios += (flr / fl1 if fl1 > 0 else 1.0,)
    act1 = layer_act_bytes(kind, m, b, d, rows=one_rows)
    act = layer_act_bytes(kind, m, b, d, par.tp, par.sp, par.cp, mine, par.cp_comm, par.expert_tp)
    saved = None
    if low is not None and low.recipe.library == TE and low.recipe.wgrad:  # quantized inputs
        saved = low.recipe.data_bytes + low.recipe.scale_bytes
        act -= recipe_input_savings(kind, m, b, d, low, par.tp, par.sp, par.cp, mine,
                                    par.expert_tp)  # fmt: skip
    act = act / act1 if act1 else 1.0
    dense, expert = layer_params(kind, m)
    if kind == "head" and m.tied_embeddings:
        dense = m.hidden  # the traced head holds its final norm only (sim.trace.decoder)
    total = float(dense + expert) or 1.0
    # the split part; a layer counted without its whole parts is all whole. Counts, not bytes,
    # go through rank_param_bytes: only their ratio to ``total`` is used
    split = max(dense - whole_params(kind, m), 0)
    share = (
        rank_param_bytes(dense, split, par.shards("dense_params")) / total,
        expert / par.shards("expert_params") / total,
    )
    core = (_core_s(rank[0], spec, dt), _core_s(rank[1], spec, dt))
    quantized = low is not None and low.recipe.library == TE
    gather = low.recipe.data_bytes + low.recipe.scale_bytes if quantized and low else d
    tpc = tp_comm(kind, m, b, d, par, float(sum(mine)), gather, regather, low)
    ops = group_ops(kind, m, b, d, par, core, plan if moe else None)
    pair = partners(tpc, *rank) if par.sp and par.tp > 1 else Partners()
    fc2 = saved if low is not None and "expert_down" not in low.rules.keep16 else None
    parts = _parts(kind, m, b, d, dt, par, mine, spec, rk[0], act1, fc2)
    syncs = sync_shares(rank[0], spec, dt), recompute_sync_share(rank, spec, dt)
    return ratios, act, share, tpc, ops, pair, parts, syncs


def _with_context(
    rank, kind: str, m: DecoderShape, b: int, d: int, par: ParallelLayout, spec: ComputeSpec,
    dt: str,
):  # fmt: skip
    """``rank``'s kernels with the copies and merges TE's context parallelism adds to an
    attention layer (:mod:`sim.parallel.context_kernels`) in its forward and input gradient,
    and with ``p2p`` its attention core at the speed of the ring's step kernels on ``spec``
    (:mod:`sim.parallel.ring_steps`)."""
    if par.cp == 1 or base_kind(kind) not in ("block", "moe_block", "attention", "mtp"):
        return rank
    t, _ = tokens(m, b, par.tp, par.sp, par.cp)
    fwd, bwd = context_kernels(attention_dims(m, par.tp), t, par.cp, d, par.cp_comm)
    core_f, core_b = list(rank[0]), list(rank[1])
    if par.cp_comm == "p2p":
        core_f = with_ring_steps(core_f, m.seq_len, par.cp, spec, dt)
        core_b = with_ring_steps(core_b, m.seq_len, par.cp, spec, dt)
    return (core_f + fwd, core_b + bwd, *rank[2:])


def _parts(kind, m, b, d, dt, par, rows, spec, fwd_s: float, act1: float, saved=None) -> tuple:
    """Each recompute choice of the layer on the rank (:mod:`sim.compute.recompute_modules`)
    as ``(choice, dropped share of the one-GPU stash, share of the rank's forward seconds)``:
    :func:`scale_layer` turns the shares into the layer's bytes and seconds.

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


def scale_layer(
    layer: LayerProfile, ratios, act: float, share: float, par: ParallelLayout, parts=()
) -> LayerProfile:
    """``layer`` scaled: times by ``ratios`` (forward, input and weight gradient; FLOPs last),
    activations by ``act``, parameters by ``share`` (:mod:`sim.parallel.decoder_shard`'s module
    doc); its recompute choices (``parts``, :func:`_parts`) in the scaled layer's bytes and
    seconds."""
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

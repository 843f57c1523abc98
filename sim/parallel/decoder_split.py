"""How a decoder's shape splits over a parallel layout: whether it can
(:func:`decoder_problem`) and the widths of a rank's attention tensors (:func:`attention_dims`).

Split from :mod:`sim.parallel.decoder_shard`, which refuses a layout :func:`decoder_problem`
names and sizes the context-parallel kernels and exchanges of a rank with
:func:`attention_dims` (:mod:`sim.parallel.decoder_scale`, :mod:`sim.parallel.decoder_comm`).
"""

from __future__ import annotations

from sim.compute.decoder import DecoderShape
from sim.compute.mamba_cp import cp_problem as mamba_cp_problem
from sim.compute.ssm import check_tp as mamba_tp_problem
from sim.parallel.context import AttentionDims, check_cp
from sim.parallel.expert import check_ep
from sim.parallel.layout import ParallelLayout


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
        why = mamba_tp_problem(m.mamba, t) or mamba_cp_problem(m.mamba, t, par.cp)
        if why:
            return why
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

"""The mixture-of-experts MLP of a decoder block as kernels on one rank, and its memory.

A MoE block replaces the dense MLP by a router and ``E`` expert MLPs of width ``f_e`` (SwiGLU
in Mixtral, Qwen-MoE, DeepSeek-V3), each token going to ``k`` of them, plus optional shared
experts every token goes through (DeepSeek-MoE, Qwen2-MoE; total width ``f_s``). The forward,
as Megatron-LM's ``MoELayer`` with the ``alltoall`` token dispatcher runs it
(``megatron/core/transformer/moe/moe_layer.py``, ``token_dispatcher.py``, ``experts.py``):

1. pre-MLP norm over the rank's ``r`` tokens (``r = T/t`` with sequence parallelism);
2. router: GEMM ``[r, h] @ [h, E]`` (weights replicated over tensor ranks), softmax and top-k
   (reads the ``r*E`` logits, writes fp32 probabilities, ``r*k`` probabilities and int64
   indices; with ``moe_router_fusion`` the random logits of forced balancing and the
   auxiliary loss's kernels beside it, :mod:`sim.compute.router_fused`; without it the eager
   ops counted in :mod:`sim.compute.router_unfused`); unless every expert is padded to its capacity, the dispatcher then needs the
   token counts on the host (``MoEAlltoAllTokenDispatcher.preprocess``: with expert or tensor
   parallelism an all-gather of the ``E`` counts over the TP x EP group, timed by the engine,
   :mod:`sim.parallel.decoder_shard`; then a device-to-host copy and a stream synchronisation
   at ``cuda_sync_point``, ``before_ep_alltoall`` / ``before_finish`` /
   ``before_permutation_1``). The host waits for the device to drain; the device then idles
   until the host issues the next kernel: one launch (``token_count_sync``, a kernel of no
   bytes: ``kernel_overhead_s``). The host's lead over the device is lost there: the engine
   splits the layer's forward host work at this kernel and composes a host sync between the
   two parts (:meth:`sim.hardware.host_ops.HostWork.sync`,
   :func:`sim.parallel.layer_host.sync_shares`); the flex dispatchers read the counts
   back too (HybridEP's ``tokens_per_expert.sum()`` without a token budget, and
   ``TEGroupedMLP``'s ``tokens_per_expert.tolist()``);
3. permute (``--moe-permute-fusion``): gather each token ``k`` times in expert order, reads
   ``r*h*d`` and writes ``r*k*h*d``; the dispatch all-to-all moves the rows to the ranks of
   their experts (timed by the engine, :mod:`sim.parallel.expert`); HybridEP
   (:attr:`MoEShape.hybridep`) runs no Transformer Engine permutation but its own
   preprocessing, permute and unpermute kernels, and across NVLink domains its copy into
   the RDMA buffer (:mod:`sim.compute.hybridep`);
4. the rank's local experts as grouped GEMMs (``--moe-grouped-gemm``: Transformer Engine's
   ``GroupedLinear``, one cuBLASLt GEMM per expert over 4 streams and a cast per expert under
   a recipe, timed as its loop was measured: :mod:`sim.compute.measured`,
   :mod:`sim.compute.quantize`): expert ``i`` with ``n_i`` rows runs ``[n_i, h] @ [h, 2f_e/t]`` (gate and up
   fused) and ``[n_i, f_e/t] @ [f_e/t, h]`` (expert tensor parallelism ``t``: Megatron's
   default ``--expert-tensor-parallel-size`` = tensor-parallel size); the activation
   (``2*n*f_e/t*d`` bytes) and, gated, the product (``3*n*f_e/t*d``). Equal row counts are one
   kernel with ``batch`` = experts (wave quantization over the whole group); a clamped
   quick-GeGLU (GPT-OSS) copies its offset to the device with a host sync inside the fused
   activation, the layer's second (:func:`sim.compute.glu_clamp.offset_copy`);
   With the ``alltoall`` dispatcher and more than one local expert, the received rows are
   sorted by local expert before the experts and back after them
   (:attr:`MoEShape.sort_by_expert`, :mod:`sim.compute.moe_sort`);
5. combine all-to-all back, unpermute: weight each copy by its probability and sum the ``k``
   copies (reads ``r*k*h*d``, writes ``r*h*d``);
6. shared experts: a dense (gated) MLP of width ``f_s`` over the rank's tokens, split over
   tensor ranks like the dense part (``shared_experts.py``); residual add.

**Fused grouped MLP** (``fused_grouped_mlp``; Megatron-Core's ``use_transformer_engine_op_fuser``
with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``, which Megatron-Bridge's performance recipes set
together from 26.06 for MXFP8 MoE runs on Blackwell: NVIDIA-NeMo/Megatron-Bridge@067f987
``src/megatron/bridge/perf_recipes`` ``_enable_cutedsl_fused_grouped_mlp``): Transformer Engine
runs the experts as its ``GroupedMLP_CuTeGEMM`` fused op (``transformer_engine/pytorch/ops/fused``;
cuDNN frontend's SM100 ``grouped_gemm_glu`` / ``grouped_gemm_dglu`` / ``grouped_gemm_quant``
CuTe-DSL kernels): the first GEMM's epilogue applies the gated activation (and its backward
the activation's gradient and the probabilities' scale), so the activation kernels (step 4's
``2*n*f_e/t*d`` and ``3*n*f_e/t*d`` bytes, and their backward) are not run; each grouped GEMM
is one persistent kernel over the local experts. SimuMax's grouped-GEMM measurements
(:mod:`sim.compute.measured`) are of Transformer Engine's ``GroupedLinear`` (cuBLAS), another
kernel; no measurement of the CuTe-DSL kernels is published, so they are timed by the GEMM
model as one batched GEMM (wave quantization over the group; an assumption).
With Megatron-Core's paged stash (:attr:`MoEShape.paged_stash`) the fused op's saved tensors
are copied into pages after the experts and back before their backward
(:mod:`sim.compute.paged_stash`).
Under cuDNN frontend v1.24 and v1.25 the down projection's input gradient (the dGLU kernel)
of experts with biases runs 8.76x slower (:attr:`MoEShape.dglu_regressed`,
:mod:`sim.compute.dglu_regression`).

**Latent MoE** (``--moe-latent-size l``; Nemotron 3 Super; NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/moe/moe_layer.py`` lines 266-300 and 476-492, ``experts.py`` lines
219-242, ``token_dispatcher.py:1535``): the router and the shared experts see the hidden state
``h``; the routed tokens are first projected down, ``fc1_latent_proj`` ``[r, h] @ [h, l]``
(weights duplicated over tensor ranks, the rank's own ``r`` tokens), and dispatched, permuted,
computed by the experts (``[n, l] @ [l, up]``, ``[n, f_e] @ [f_e, l]``) and combined at width
``l``; ``fc2_latent_proj`` ``[r, l] @ [l, h]`` projects the combined output back. The row width
of every routed step is :attr:`MoEShape.row_width` (``l``, else ``h``); the two projections add
``2 h l`` parameters to the dense part and keep their inputs (``r*l*d`` for ``fc2``; ``fc1``'s
input is the router's).

Backward: every GEMM ``Y = XW`` gives ``dX = dY W^T`` (input gradient) and ``dW = X^T dY``
(weight gradient), as :mod:`sim.compute.transformer`; the memory-bound kernels move 1.5x their
forward bytes; the router's backward is its GEMM's two gradients and the softmax backward.

**Activations** the layer keeps for its backward (per micro-batch, ``d`` bytes per element;
rows = tokens the rank's experts receive): the norm input and router input ``2*r*h*d``; the
fp32 router probabilities ``4*r*E`` and the top-k probabilities and indices ``12*r*k``; the
experts' inputs ``rows*h*d``, the first GEMM's output ``rows*2f_e/t*d`` (gated; ``f_e/t``
otherwise) and the activation output ``rows*f_e/t*d``; the routing probabilities of the rows,
fp32, ``4*rows``, which the activation multiplies in and keeps for its gradient
(``weighted_bias_swiglu_impl``, ``megatron/core/fusions/fused_bias_swiglu.py``; the experts'
outputs are combined without probabilities, so the unpermute keeps nothing: Megatron-LM
!2668 "Memory efficient token permutation", NVIDIA/Megatron-LM@2659630, 2025-04-09; before it
the combine weighted the ``r*k*h*d`` expert outputs and kept them); the shared experts as a
dense MLP. No
dropout (these models train without it). Sources: the tensors ``experts.py`` and
``moe_utils.py`` (``permute``, ``unpermute``) save for backward; Megatron-LM's
``theoretical_memory_usage.py`` counts the MoE layer the same way up to the router.
"""

from __future__ import annotations

import math
from dataclasses import replace

from sim.compute import dglu_regression, hybridep, paged_stash
from sim.compute.expert_bias import bias_bwd, bias_fwd, expert_bias_bytes
from sim.compute.glu_clamp import OFFSET_COPY, clamp_bwd, clamp_fwd, kept_bytes, offset_copy
from sim.compute.kernels import Kernel, gemm, mem
from sim.compute.moe_shape import INDEX_BYTES, PROB_BYTES, MoEShape
from sim.compute.moe_sort import sort_bwd, sort_fwd, sorts_by_expert
from sim.compute.permute_map import chunk_sort_map, row_id_map
from sim.compute.router_fused import fused_extra_bwd, fused_extra_fwd
from sim.compute.router_unfused import router_bwd, router_config, router_fwd

TOKEN_COUNT_SYNC = "token_count_sync"
"""The dispatcher's read-back of the token counts (module doc, step 2)."""
HOST_SYNC_KERNELS = (TOKEN_COUNT_SYNC, OFFSET_COPY)
"""Kernels at which the host waits for the device inside a MoE layer's forward: the token
counts' read-back (step 2) and a clamped quick-GeGLU's blocking copy of its offset
(:func:`sim.compute.glu_clamp.offset_copy`)."""


def _groups(rows: tuple[float, ...]) -> dict[int, int]:
    """``{rows: experts}`` of the local experts, row counts rounded up, empty experts left out."""
    out: dict[int, int] = {}
    for n in rows:
        k = math.ceil(n - 1e-9)
        if k > 0:
            out[k] = out.get(k, 0) + 1
    return out


def _rows(rows: tuple[float, ...]) -> int:
    """All rows of the local experts, as :func:`_groups` counts them."""
    return sum(n * c for n, c in _groups(rows).items())


def _permute(name: str, nbytes: float, r: int, k: int, h: int, d: int) -> Kernel:
    """A token permutation kernel: ``r`` tokens to ``r*k`` rows of ``h*d`` bytes (its shape,
    for :mod:`sim.compute.measured`)."""
    return replace(mem(name, nbytes), m=r, n=r * k, k=h * d)


def grouped(
    name: str, m: int, n: int, k: int, d: int, batch: int, phase: str, fused: bool = False
) -> Kernel:
    """One pass (``fwd``, ``dgrad``, ``wgrad``) of a grouped GEMM over ``batch`` experts;
    ``fused``: a kernel of the fused grouped MLP, timed as a batched GEMM (module doc)."""
    return replace(gemm(name, m, n, k, d, batch=batch), grouped="" if fused else phase)


def _router_fwd(shape: MoEShape, r: int, d: int, local: int, etp: int) -> list[Kernel]:
    """Router, top-k, the token-count sync, the latent projection and the dispatch's
    preparation: TE's permute, or HybridEP's preprocessing with the sync after it (the
    permute runs on the receiving rank, :func:`_flex_permute`)."""
    e, k, h = shape.experts, shape.top_k, shape.hidden
    topk = [mem("router_topk", r * e * (d + PROB_BYTES) + r * k * (PROB_BYTES + INDEX_BYTES))]
    if shape.router_fused:  # its random logits and balancing loss (sim.compute.router_fused)
        bias = shape.router_expert_bias
        extra = fused_extra_fwd(r, e, d, shape.aux_loss, shape.random_logits, bias)
        topk = extra[:2] + topk + extra[2:] if shape.random_logits else topk + extra
    eager = [] if shape.router_fused else router_fwd(r, e, k, router_config(shape))
    out = [gemm("router", r, e, h, d), *(topk if shape.router_fused else eager)]
    padded = shape.capacity_factor is not None and shape.pad_to_capacity
    sync = [] if padded else [mem(TOKEN_COUNT_SYNC, 0.0)]  # the host sync (module doc, step 2)
    w = shape.row_width
    latent = [gemm("latent_down", r, w, h, d)] if shape.latent else []
    if shape.hybridep:
        sources = shape.experts // max(1, local) * etp
        across = shape.hybridep_domains > 1  # probabilities over the etp x ep group's experts
        stage = [hybridep.rdma_stage(r, w, d, e * etp, True)] if across else []
        prep = hybridep.preprocess(r, sources, e * etp, local, shape.hybridep_domains)
        rep = hybridep.replicate(r, e, etp, True)  # [r, etp x E] for the flex dispatcher
        return out + latent + rep + [prep] + sync + stage
    permute = _permute("permute", r * w * d + r * k * w * d, r, k, w, d)
    return out + sync + latent + row_id_map(r, e) + [permute]  # TE's row map first


def _flex_permute(
    shape: MoEShape, r: int, rows: tuple[float, ...], d: int, etp: int, fwd: bool
) -> tuple[Kernel, ...]:
    """HybridEP's permute and unpermute on the receiving rank (:mod:`sim.compute.hybridep`),
    empty for the other dispatchers."""
    if not shape.hybridep or not rows:
        return ()
    sources = shape.experts // len(rows) * etp
    got = hybridep.received_rows(r, sources, shape.experts, shape.top_k, len(rows))
    pair = hybridep.permute_fwd if fwd else hybridep.permute_bwd
    return pair(got, float(sum(rows)), shape.row_width, d)


def _shared_fwd(shape: MoEShape, t: int, d: int, tp: int) -> list[Kernel]:
    if not shape.shared_ffn:
        return []
    fs, h = shape.shared_ffn // tp, shape.hidden
    up = gemm("shared_up", t, fs * (2 if shape.gated else 1), h, d)
    act = [mem("shared_act", 2 * t * fs * d)]
    if shape.gated:
        act.append(mem("shared_gate_mul", 3 * t * fs * d))
    return [up, *act, gemm("shared_down", t, h, fs, d)]


def moe_fwd(
    shape: MoEShape,
    r: int,
    t: int,
    rows: tuple[float, ...],
    d: int,
    tp: int = 1,
    etp: int | None = None,
) -> list[Kernel]:
    """Forward kernels of the MoE MLP on one rank (module doc).

    Args:
        shape: the layer.
        r: tokens the rank routes (``T/t`` with sequence parallelism, else ``T``).
        t: tokens of its shared experts (``T``: gathered over tensor ranks).
        rows: rows each of its local experts computes (:func:`sim.compute.routing.expert_rows`).
        d: bytes per element.
        tp: tensor-parallel size of the shared experts (divides ``f_s``).
        etp: expert tensor-parallel size of the routed experts (divides ``f_e``; None:
            ``tp``; MoE parallel folding, :mod:`sim.parallel.folding`).

    Raises:
        ValueError: ``tp`` or ``etp`` does not divide the shared or expert widths.
    """
    etp = _check_tp(shape, tp, etp)
    h, fe, k, w = shape.hidden, shape.expert_ffn // etp, shape.top_k, shape.row_width
    out = [mem("norm2", 2 * r * h * d), *_router_fwd(shape, r, d, len(rows), etp)]
    fused = shape.fused_grouped_mlp
    sort: tuple[Kernel, ...] = ()
    if sorts_by_expert(len(rows), shape.sort_by_expert):  # each with its row map first
        ahead, back = sort_fwd(_rows(rows), w, d)
        maps = [chunk_sort_map(x.name, _rows(rows)) for x in (ahead, back)]
        sort = (maps[0], ahead, maps[1], back)
    sort = sort or _flex_permute(shape, r, rows, d, etp, True)
    out += sort[: len(sort) // 2]
    copy = [offset_copy()] if shape.clamp and shape.fused_weighting else []
    for n, c in sorted(_groups(rows).items()):
        up = fe * (2 if shape.gated else 1)
        out.append(grouped(f"expert_up[{n}]", n, up, w, d, c, "fwd", fused))
        if not fused:  # the fused op applies the activation in the GEMM's epilogue
            out += clamp_fwd(n, fe, d, c) + copy if shape.clamp else []
            copy = []  # one call of the fused activation for all local experts
            out.append(mem(f"expert_act[{n}]", 2 * n * fe * d * c))
            if shape.gated:
                out.append(mem(f"expert_gate_mul[{n}]", 3 * n * fe * d * c))
        out.append(grouped(f"expert_down[{n}]", n, w, fe, d, c, "fwd", fused))
    if shape.bias and not fused:  # the down projection's bias, an eager chain per expert
        out += bias_fwd(_groups(rows), w, d)
    if fused and shape.paged_stash:  # the saved tensors into pages (sim.compute.paged_stash)
        out += paged_stash.stash_fwd(_rows(rows), w, fe * (2 if shape.gated else 1), fe)
    out += sort[len(sort) // 2 :]
    if not shape.hybridep:  # HybridEP's unpermute is its own (above)
        unpermute = r * k * w * d + r * k * PROB_BYTES + r * w * d
        out.append(_permute("unpermute", unpermute, r, k, w, d))
    if shape.latent:
        out.append(gemm("latent_up", r, h, w, d))
    return out + _shared_fwd(shape, t, d, tp) + [mem("mlp_residual", 3 * r * h * d)]


def moe_bwd(
    shape: MoEShape,
    r: int,
    t: int,
    rows: tuple[float, ...],
    d: int,
    tp: int = 1,
    etp: int | None = None,
) -> tuple[list[Kernel], list[Kernel]]:
    """Backward kernels ``(input_gradient, weight_gradient)`` of :func:`moe_fwd`.

    Raises:
        ValueError: as :func:`moe_fwd`.
    """
    etp = _check_tp(shape, tp, etp)
    h, e, fe, k = shape.hidden, shape.experts, shape.expert_ffn // etp, shape.top_k
    w = shape.row_width
    up = fe * (2 if shape.gated else 1)
    dx, dw = _latent_bwd(shape, r, d, "up")
    if shape.hybridep and shape.hybridep_domains > 1:  # the combine's backward dispatches
        dx.append(hybridep.rdma_stage(r, w, d, e, False))
    if not shape.hybridep:  # HybridEP's own kernels instead (_flex_permute)
        dx.append(_permute("unpermute_bwd", 1.5 * (r * k * w * d + r * w * d), r, k, w, d))
    fused = shape.fused_grouped_mlp
    sort: tuple[Kernel, ...] = ()
    if sorts_by_expert(len(rows), shape.sort_by_expert):
        sort = sort_bwd(_rows(rows), w, d)
    sort = sort or _flex_permute(shape, r, rows, d, etp, False)
    dx += sort[:1]
    if shape.bias and not fused:  # the chain's backward (sim.compute.expert_bias)
        dx += bias_bwd(_groups(rows), w, d)
    if fused and shape.paged_stash:  # the saved tensors out of the pages
        dx += paged_stash.stash_bwd(_rows(rows), w, up, fe)
    slow = dglu_regression.SLOWDOWN if fused and shape.bias and shape.dglu_regressed else 1.0
    for n, c in sorted(_groups(rows).items()):
        down = grouped(f"d_expert_down_in[{n}]", n, fe, w, d, c, "dgrad", fused)
        dx.append(replace(down, slowdown=slow) if slow != 1.0 else down)
        if not fused:  # the fused op's dgrad epilogue takes the activation's gradient
            if shape.gated:
                dx.append(mem(f"expert_gate_mul_bwd[{n}]", 5 * n * fe * d * c))
            dx.append(mem(f"expert_act_bwd[{n}]", 3 * n * fe * d * c))
            dx += clamp_bwd(n, fe, d, c) if shape.clamp else []
        dx.append(grouped(f"d_expert_up_in[{n}]", n, w, up, d, c, "dgrad", fused))
        dw += [grouped(f"d_expert_up_w[{n}]", w, up, n, d, c, "wgrad", fused)]
        dw += [grouped(f"d_expert_down_w[{n}]", fe, w, n, d, c, "wgrad", fused)]
    dx += sort[1:]
    if not shape.hybridep:
        dx.append(_permute("permute_bwd", 1.5 * (r * w * d + r * k * w * d), r, k, w, d))
    ldx, ldw = _latent_bwd(shape, r, d, "down")
    dx, dw = dx + ldx, dw + ldw
    topk = [mem("router_topk_bwd", 1.5 * r * e * (d + PROB_BYTES))]
    topk += fused_extra_bwd(r, e, d, shape.aux_loss)  # sim.compute.router_fused
    dx += hybridep.replicate(r, e, etp, False) if shape.hybridep else []
    dx += topk if shape.router_fused else router_bwd(r, e, k, router_config(shape))
    dx.append(gemm("d_router_in", r, h, e, d))
    dw.append(gemm("d_router_w", h, e, r, d))
    if shape.shared_ffn:
        fs = shape.shared_ffn // tp
        sup = fs * (2 if shape.gated else 1)
        dx.append(gemm("d_shared_down_in", t, fs, h, d))
        if shape.gated:
            dx.append(mem("shared_gate_mul_bwd", 5 * t * fs * d))
        dx += [mem("shared_act_bwd", 3 * t * fs * d), gemm("d_shared_up_in", t, h, sup, d)]
        dw += [gemm("d_shared_up_w", h, sup, t, d), gemm("d_shared_down_w", fs, h, t, d)]
    dx += [mem("norm2_bwd", 3 * r * h * d), mem("residual_grad_add", 3 * r * h * d)]
    return dx, dw


def _latent_bwd(shape: MoEShape, r: int, d: int, which: str) -> tuple[list[Kernel], list[Kernel]]:
    """The input and weight gradients of one latent projection (``up``: ``fc2``, ``[r, l] @
    [l, h]``; ``down``: ``fc1``, ``[r, h] @ [h, l]``); none without a latent width."""
    if not shape.latent:
        return [], []
    h, w = shape.hidden, shape.latent
    k_in, n_out = (w, h) if which == "up" else (h, w)
    return ([gemm(f"d_latent_{which}_in", r, k_in, n_out, d)],
            [gemm(f"d_latent_{which}_w", k_in, n_out, r, d)])  # fmt: skip


def moe_act_bytes(
    shape: MoEShape,
    r: int,
    t: int,
    rows: tuple[float, ...],
    d: int,
    tp: int = 1,
    etp: int | None = None,
) -> float:
    """Bytes the MoE MLP keeps for its backward on one rank, one micro-batch (module doc;
    ``etp`` as :func:`moe_fwd`)."""
    etp = tp if etp is None else etp
    h, e, k, fe = shape.hidden, shape.experts, shape.top_k, shape.expert_ffn / etp
    w = shape.row_width
    n = float(sum(rows))
    router = 2 * r * h * d + PROB_BYTES * r * e + (PROB_BYTES + INDEX_BYTES) * r * k
    experts = n * d * (w + (2 if shape.gated else 1) * fe + fe) + PROB_BYTES * n
    if not shape.fused_weighting:  # act(x) * probs as autograd ops (MoEShape.fused_weighting)
        experts += n * d * fe * (2 if shape.gated else 1)
    if shape.clamp and not shape.fused_grouped_mlp:  # the clamped copy (sim.compute.glu_clamp)
        experts += kept_bytes(n, fe, d)
    experts += r * shape.latent * d  # fc2_latent_proj's input (module doc)
    shared = 0.0
    if shape.shared_ffn:
        fs = shape.shared_ffn / tp
        shared = t * d * ((2 if shape.gated else 1) * fs + fs)
    return router + experts + shared


def _check_tp(shape: MoEShape, tp: int, etp: int | None = None) -> int:
    """The expert tensor-parallel size (``etp``, else ``tp``), checked.

    Raises:
        ValueError: it does not divide the expert width, or ``tp`` the shared width.
    """
    etp = tp if etp is None else etp
    if tp < 1 or etp < 1 or shape.expert_ffn % etp or shape.shared_ffn % tp:
        raise ValueError(
            f"expert tensor-parallel size {etp} must divide the expert width {shape.expert_ffn}"
            f" and tensor-parallel size {tp} the shared width {shape.shared_ffn}"
        )
    return etp


__all__ = [
    "HOST_SYNC_KERNELS",
    "TOKEN_COUNT_SYNC",
    "expert_bias_bytes",  # re-exported: sim.compute.expert_bias
    "grouped",
    "moe_act_bytes",
    "moe_bwd",
    "moe_fwd",
]

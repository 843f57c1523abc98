"""A Mamba-2 layer (state-space duality, SSD) as kernels on one rank, and its memory.

Mamba-2 (Dao & Gu, "Transformers are SSMs", arXiv:2405.21060) replaces attention by a selective
state-space model with ``H`` heads of width ``P``, state size ``N`` and ``G`` groups of shared
``B``/``C`` projections (Hugging Face ``mamba_num_heads``, ``mamba_head_dim``,
``ssm_state_size``, ``n_groups``; Megatron-Core ``MambaMixer``), inner width ``d_i = H*P``.
A layer, as Megatron-Core's ``MambaMixer`` and Nemotron-H run it, with ``T`` tokens on the rank:

1. pre-norm (RMSNorm) of the ``r`` sequence-parallel tokens;
2. ``in_proj``: GEMM ``[T, h] @ [h, 2 d_i + 2 G N + H]`` giving ``z``, ``xBC`` and ``dt``;
3. causal depthwise ``conv1d`` (kernel ``K``, SiLU fused; ``causal_conv1d``) over the
   ``d_i + 2 G N`` channels of ``xBC``: memory-bound, ``2*T*C_w*K`` FLOPs;
4. the **SSD chunked scan** as ``mamba_ssm``'s Triton kernels run it
   (``mamba_ssm/ops/triton/ssd_combined.py::_mamba_chunk_scan_combined_fwd``, state-spaces/mamba
   @e9594ce): the sequence is cut into chunks of ``Q`` tokens (``chunk_size``) and the scan
   becomes matmuls (paper §6, "the SSD algorithm": the diagonal blocks are quadratic attention-like
   products, the off-diagonal ones pass low-rank states; its work is dominated by matmuls):

   * ``_chunk_cumsum_fwd``: ``dt`` softplus and the cumulative decay ``dA_cumsum`` (fp32);
   * ``_chunk_state_fwd``: each chunk's state ``x^T B``: per chunk and head ``[P, Q] @ [Q, N]``,
     written in fp32;
   * ``_state_passing_fwd``: the states carried across chunks (element-wise, sequential over
     chunks): reads the fp32 states, writes them in the input dtype;
   * ``_bmm_chunk_fwd``: ``C B^T`` per chunk and group, ``[Q, N] @ [N, Q]`` (all of it);
   * ``_chunk_scan_fwd``: the output, ``C @ states`` per chunk and head (``[Q, N] @ [N, P]``)
     plus the causal diagonal block ``(C B^T o L) @ x`` (``[Q, Q] @ [Q, P]``, the kernel stops
     its K loop at the diagonal: half of it);

   forward FLOPs ``T*H*(4 P N + Q P) + 2*T*G*Q*N`` (:func:`ssd_fwd_flops`). Each kernel is
   timed by the roofline of :mod:`sim.compute.kernels` as a batched GEMM of its chunk shape
   (batch = chunks x heads or groups; wave quantization over the chunk tiles) carrying the HBM
   bytes of the tensors the Triton kernel reads and writes in their dtypes (fp32 ``dt``,
   ``dA_cumsum``, ``CB`` and chunk states; ``_scan_fwd``), an assumption for Triton kernels
   that fuse the decay factors into the matmuls. Megatron runs the scan through
   ``mamba_split_conv1d_scan_combined`` (``MambaMixer._ssm_training``, NVIDIA/Megatron-LM
   @d98e8a64 ``megatron/core/ssm/mamba_mixer.py`` 680-730): the gate ``silu(z)`` is applied
   inside ``_chunk_scan_fwd`` (``z`` read, ``out`` and ``out_x`` written), and ``in_proj``'s
   output is transposed to ``(b, l, d)`` by a copy before the scan and ``y`` back after it
   (copies only when the micro-batch holds more than one sample);
5. RMSNorm over groups of ``d_i/G`` (``MambaMixer.norm``, ``y = self.norm(y)``; the gate is
   already in ``y``): reads ``y``, writes the output;
6. ``out_proj``: GEMM ``[T, d_i] @ [d_i, h]``; residual add.

**Backward** (``MambaSplitConv1dScanCombinedFn.backward`` and
``_mamba_chunk_scan_combined_bwd``, ssd_combined.py 443-497 and 896-990): the conv forward is
recomputed (``x, B, C`` are not saved), the scan recomputes ``dA_cumsum``, ``C B^T``, the chunk
states and their passing (nothing of size ``chunks x H x P x N`` is saved), then
``_chunk_scan_bwd_dz`` (the gate's gradient: reads ``x, z, out, dout``, writes ``dz`` and the
gated ``dout``), ``_chunk_scan_bwd_dstates`` (``C^T dout``), the state passing backward,
``_chunk_scan_chunk_state_bwd_dx`` (``dx`` from the diagonal blocks and from the states),
``_chunk_state_bwd_db``, ``_chunk_scan_bwd_dC``, ``_chunk_scan_bwd_dcb`` (causal half), two
``_bmm_chunk_bwd`` and ``_chunk_scan_bwd_ddAcs_stable`` (``dout x^T`` per chunk and head,
causal half): ``T*H*(10 P N + 3 Q P) + 6*T*G*Q*N`` FLOPs with the recomputation
(:func:`ssd_bwd_flops`). The conv's backward computes its input and weight gradients in one
kernel (counted as input gradient); ``zxBCdt``'s gradient is copied back to ``(l, b, d)``
before ``in_proj``'s backward; the projections' weight gradients are the layer's "W" part.

**Tensor parallelism** (Megatron-Core ``MambaMixer``): ``in_proj`` column-parallel, ``out_proj``
row-parallel; each rank holds ``H/t`` heads and ``G/t`` groups (both must divide).

**Activations** kept for the backward (one rank, ``d`` bytes per element): the norm input and
``in_proj`` input (``2*r*h*d``, as the attention half); what
``MambaSplitConv1dScanCombinedFn`` saves (ssd_combined.py:888-889, ``save_for_backward(zxbcdt,
..., out_x, ...)``): ``in_proj``'s output ``zxBCdt`` (``T*(2 d_i + 2 G N + H)/t*d``) and the
scan's output before the gate ``out_x`` (``T*d_i/t*d``), not the conv output nor ``dt`` and
``dA_cumsum``, which its backward recomputes (above); the gated output, the input the gated
RMSNorm saves (``mamba_ssm/ops/triton/layernorm_gated.py`` ``LayerNormFn``), ``T*d_i/t*d``, and
its fp32 ``rstd`` (``4*T*G/t``); the norm's output, ``out_proj``'s input (``T*d_i/t*d``).

**State memory** (:func:`ssd_state_bytes`): the chunk states ``b * chunks * H * P * N`` exist
while the scan runs (fp32 from ``_chunk_state_fwd``, then in the input dtype after the state
passing); transient, recomputed in the backward, not stashed. The recurrent state a sequence
ends with, ``H*P*N`` per sample, is what inference keeps instead of a KV cache.
"""

from __future__ import annotations

import math
from dataclasses import replace

from sim.compute.kernels import Kernel, gemm, mem
from sim.compute.mamba_cp import copies_bwd, copies_fwd, rank_mixer
from sim.compute.mamba_shape import MambaShape
from sim.hardware.formats import FP32_BYTES

FP32 = FP32_BYTES
"""Bytes of the scan's fp32 tensors (``dt``, ``dA_cumsum``, the chunk states, ``rstd``)."""


def check_tp(m: MambaShape, tp: int) -> str:
    """Why ``tp`` tensor ranks cannot split ``m``, or ``""``."""
    if tp < 1 or m.heads % tp or m.groups % tp:
        return f"tensor_parallel {tp} must divide the Mamba heads {m.heads} and groups {m.groups}"
    return ""


def _chunks(b: int, s: int, q: int) -> int:
    """Chunks of the micro-batch: ``b * ceil(s / Q)``."""
    return b * math.ceil(s / q)


def ssd_fwd_flops(m: MambaShape, tokens: int, tp: int = 1) -> float:
    """Forward FLOPs of the SSD scan on one rank: ``T*H*(4 P N + Q P) + 2*T*G*Q*N`` with
    ``H/t`` heads and ``G/t`` groups (module doc)."""
    h, g, p, n, q = m.heads // tp, m.groups // tp, m.head_dim, m.state, m.chunk
    return float(tokens * h * (4 * p * n + q * p) + 2 * tokens * g * q * n)


def ssd_bwd_flops(m: MambaShape, tokens: int, tp: int = 1) -> float:
    """Backward FLOPs of the SSD scan with its recomputation:
    ``T*H*(10 P N + 3 Q P) + 6*T*G*Q*N`` (module doc)."""
    h, g, p, n, q = m.heads // tp, m.groups // tp, m.head_dim, m.state, m.chunk
    return float(tokens * h * (10 * p * n + 3 * q * p) + 6 * tokens * g * q * n)


def ssd_state_bytes(m: MambaShape, b: int, s: int, d: int, tp: int = 1) -> float:
    """Bytes of the chunk states while the scan runs: ``b*ceil(s/Q)*H/t*P*N`` elements in fp32
    and again in the ``d``-byte input dtype (module doc)."""
    return float(_chunks(b, s, m.chunk) * m.heads // tp * m.head_dim * m.state * (FP32 + d))


def _sizes(m: MambaShape, c: int, tp: int) -> tuple[int, int, int, int, int]:
    """Elements of the scan's tensors on one rank: ``x``-like ``T*H*P`` (``x, z, out, dout``),
    ``B``-like ``T*G*N``, the fp32 ``dt``-like ``T*H`` (``dt``, ``dA_cumsum``, padded to whole
    chunks), ``CB`` ``c*G*Q*Q`` and the chunk states ``c*H*P*N``."""
    hl, gl, p, n, q = m.heads // tp, m.groups // tp, m.head_dim, m.state, m.chunk
    tq = c * q
    return tq * hl * p, tq * gl * n, tq * hl, c * gl * q * q, c * hl * p * n


def _bytes(kern: Kernel, nbytes: float) -> Kernel:
    """``kern`` moving ``nbytes`` (the tensors its Triton kernel reads and writes)."""
    return replace(kern, bytes=float(nbytes))


def _scan_fwd(m: MambaShape, c: int, d: int, tp: int, z: bool = True) -> list[Kernel]:
    """``_mamba_chunk_scan_combined_fwd``'s kernels (ssd_combined.py:379-391) with the HBM bytes
    of the tensors each reads and writes, in their dtypes: ``dt`` in, fp32 ``dt``/``dA_cumsum``
    out; the chunk states written in fp32 (``states_in_fp32=True``) and passed on in ``d``
    bytes; ``CB`` in fp32 (``output_dtype=torch.float32``); ``_chunk_scan_fwd`` reads ``CB``,
    ``x``, ``C``, the states and, with ``z`` (Megatron's call: the gate is applied in the scan),
    ``z``, and writes ``out`` (and ``out_x``). ``C``/``B``/``CB`` are read once per kernel (the
    heads of a group share them through L2: an assumption)."""
    hl, gl, p, n, q = m.heads // tp, m.groups // tp, m.head_dim, m.state, m.chunk
    x, bc, dt, cb, st = _sizes(m, c, tp)
    xz = (2 if z else 1) * x * d
    return [
        mem("ssd_chunk_cumsum", dt * (d + 2 * FP32)),
        _bytes(gemm("ssd_chunk_state", p, n, q, d, batch=c * hl), bc * d + x * d + 2 * dt * FP32
               + st * FP32),
        mem("ssd_state_passing", st * (FP32 + d)),
        _bytes(gemm("ssd_bmm_cb", q, q, n, d, batch=c * gl), 2 * bc * d + cb * FP32),
        _bytes(gemm("ssd_chunk_scan", q, p, n + q // 2, d, batch=c * hl), cb * FP32 + xz + bc * d
               + st * d + 2 * dt * FP32 + xz),
    ]  # fmt: skip


def _scan_bwd(m: MambaShape, c: int, d: int, tp: int, z: bool = True) -> list[Kernel]:
    """``_mamba_chunk_scan_combined_bwd``'s kernels (ssd_combined.py:443-497): the forward's
    cumsum, ``CB``, chunk states and their passing recomputed; with ``z``,
    ``_chunk_scan_bwd_dz`` (reads ``x, z, out, dout``, writes ``dz`` and the gated ``dout``);
    ``dstates`` (fp32); the state passing backward; ``dx`` (reads ``CB`` in fp32, writes fp32
    ``ddt``); ``dB``; ``dC``; ``dCB`` (causal half); two ``_bmm_chunk_bwd``;
    ``_chunk_scan_bwd_ddAcs_stable`` (``dout x^T`` per chunk and head, causal half, times
    ``CB``); the cumsum backward. Bytes as :func:`_scan_fwd`."""
    hl, gl, p, n, q = m.heads // tp, m.groups // tp, m.head_dim, m.state, m.chunk
    x, bc, dt, cb, st = _sizes(m, c, tp)
    half = q // 2 or 1
    recompute = _scan_fwd(m, c, d, tp, z)[:4]
    dz = [mem("ssd_bwd_dz", 6 * x * d)] if z else []
    return recompute + dz + [
        _bytes(gemm("ssd_bwd_dstates", n, p, q, d, batch=c * hl), bc * d + dt * FP32 + x * d
               + st * FP32),
        mem("ssd_state_passing_bwd", 2 * st * (FP32 + d)),
        _bytes(gemm("ssd_bwd_dx", q, p, half + n, d, batch=c * hl), 2 * x * d + cb * FP32
               + bc * d + st * d + 3 * dt * FP32 + x * d),
        _bytes(gemm("ssd_bwd_db", q, n, p, d, batch=c * hl), 2 * x * d + st * d + 3 * dt * FP32
               + bc * d),
        _bytes(gemm("ssd_bwd_dc", q, n, p, d, batch=c * hl), x * d + st * d + 3 * dt * FP32
               + bc * d),
        _bytes(gemm("ssd_bwd_dcb", q, half, p, d, batch=c * hl), 2 * x * d + 2 * dt * FP32
               + cb * FP32),
        _bytes(gemm("ssd_bmm_cb_bwd_b", q, n, q, d, batch=c * gl), bc * d + cb * FP32 + 2 * bc * d),
        _bytes(gemm("ssd_bmm_cb_bwd_c", q, n, q, d, batch=c * gl), bc * d + cb * FP32 + 2 * bc * d),
        _bytes(gemm("ssd_bwd_ddacs", q, half, p, d, batch=c * hl), 2 * x * d + 2 * dt * FP32
               + cb * FP32 + dt * FP32),
        mem("ssd_chunk_cumsum_bwd", 2 * c * q * hl * (d + 2 * FP32)),
    ]  # fmt: skip


def _tokens(m: MambaShape, b: int, s: int, tp: int, sp: bool, cp: int):
    """``(t, r, loc)``: the rank's tokens ``b*s/cp`` (the projections'), its sequence-parallel
    share (``t/tp`` with sequence parallelism, else ``t``), and the mixer its conv and scan run
    over all ``b*s`` tokens: ``H/(tp*cp)`` heads (:func:`sim.compute.mamba_cp.rank_mixer`)."""
    why = check_tp(m, tp)
    if why:
        raise ValueError(why)
    t = b * s // cp
    return t, t // tp if sp else t, rank_mixer(m, tp, cp)


def mamba_fwd(
    m: MambaShape, h: int, s: int, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> list[Kernel]:
    """Forward kernels of a Mamba-2 layer on one rank (module doc); with ``cp > 1`` the conv and
    scan run the whole sequence for ``1/cp`` of the heads between the copies of Megatron-Core's
    context parallelism (:mod:`sim.compute.mamba_cp`; its all-to-alls are
    :mod:`sim.parallel.decoder_comm`'s).

    Raises:
        ValueError: ``tp`` does not divide the heads or groups;
            :func:`~sim.compute.mamba_cp.cp_problem`.
    """
    t, r, loc = _tokens(m, b, s, tp, sp, cp)
    ts, di, iw = b * s, m.inner // tp, m.in_width // tp
    c = _chunks(b, s, m.chunk)
    before, after = copies_fwd(m, t, tp, cp, d)
    out = [mem("norm1", 2 * r * h * d), gemm("in_proj", t, iw, h, d), *before]
    out += _transpose("zxbcdt_to_bld", b, ts * loc.in_width * d)
    cw = loc.conv_width
    out.append(mem("conv1d", 2 * ts * cw * d, flops=2.0 * ts * cw * m.conv_kernel))
    out += _scan_fwd(loc, c, d, 1)
    out += _transpose("y_to_lbd", b, ts * loc.inner * d)
    out += [*after, mem("gated_norm", 2 * t * di * d), gemm("out_proj", t, h, di, d)]
    return out + [mem("mamba_residual", 3 * r * h * d)]


def _transpose(name: str, b: int, nbytes: float) -> list[Kernel]:
    """Megatron's ``rearrange(..., "l b d -> b l d").contiguous()`` around the scan
    (``MambaMixer._ssm_training``, NVIDIA/Megatron-LM@d98e8a64 mamba_mixer.py:691 and 731): a
    copy (read and write) when the micro-batch has more than one sample, a view when it has
    one. Backward: ``zxBCdt``'s gradient leaves the scan in ``(b, l, d)`` and is copied to the
    ``(l, b, d)`` layout ``in_proj``'s backward reads; ``y``'s gradient reaches the scan as a
    view the Triton kernels read through their strides (no copy)."""
    return [mem(name, 2 * nbytes)] if b > 1 else []


def mamba_bwd(
    m: MambaShape, h: int, s: int, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> tuple[list[Kernel], list[Kernel]]:
    """Backward kernels ``(input_gradient, weight_gradient)`` of :func:`mamba_fwd`.

    Raises:
        ValueError: as :func:`mamba_fwd`.
    """
    t, r, loc = _tokens(m, b, s, tp, sp, cp)
    ts, cw, di, iw = b * s, loc.conv_width, m.inner // tp, m.in_width // tp
    c = _chunks(b, s, m.chunk)
    before, after = copies_bwd(m, t, tp, cp, d)
    dx = [gemm("d_out_proj_in", t, di, h, d), mem("gated_norm_bwd", 3 * t * di * d), *before]
    dx.append(mem("conv1d_recompute", 2 * ts * cw * d, flops=2.0 * ts * cw * m.conv_kernel))
    dx += _scan_bwd(loc, c, d, 1)
    dx.append(mem("conv1d_bwd", 3 * ts * cw * d, flops=4.0 * ts * cw * m.conv_kernel))
    dx += _transpose("dzxbcdt_to_lbd", b, ts * loc.in_width * d)
    dx += [*after, gemm("d_in_proj_in", t, h, iw, d), mem("norm1_bwd", 3 * r * h * d)]
    dx.append(mem("residual_grad_add", 3 * r * h * d))
    dw = [gemm("d_in_proj_w", h, iw, t, d), gemm("d_out_proj_w", di, h, t, d)]
    return dx, dw


def mamba_act_bytes(
    m: MambaShape, h: int, s: int, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> float:
    """Bytes a Mamba-2 layer keeps for its backward on one rank, one micro-batch (module doc):
    with ``cp > 1`` the scan's saved ``zxBCdt`` and ``out_x`` are the whole sequence's for the
    rank's ``1/cp`` of the heads (:func:`~sim.compute.mamba_cp.rank_mixer`), the gated norm's
    and ``out_proj``'s inputs the rank's ``b*s/cp`` tokens (the norm follows the all-to-all;
    Megatron's exchanges and copies save nothing).

    Raises:
        ValueError: as :func:`mamba_fwd`.
    """
    t, r, loc = _tokens(m, b, s, tp, sp, cp)
    di, rstd = m.inner / tp, FP32 * t * m.groups / tp
    return 2 * r * h * d + b * s * d * (loc.in_width + loc.inner) + t * d * 2 * di + rstd

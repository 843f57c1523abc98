"""The attention core (scores, softmax, attention over V) as kernels: ``flash`` or ``math``.

Notation: ``b`` micro-batch, ``s`` sequence length, ``h`` hidden, ``a`` heads, ``hd = h / a``,
``d`` bytes per element.

* ``flash``: one fused kernel per pass, as torch's ``scaled_dot_product_attention`` runs by
  default on GPUs that support it (FlashAttention-2; Dao, arXiv:2307.08691). Forward FLOPs
  ``4*b*s^2*h`` (halved when causal: the kernel skips masked tiles), backward 2.5x forward
  (five matmuls instead of two: S is recomputed; Dao 2023 §3.1.2 / §3.2). HBM traffic: forward
  reads Q, K, V and writes O (``4*b*s*h*d``) and the log-sum-exp (``4*b*a*s``); backward reads
  Q, K, V, O, dO and writes dQ, dK, dV (``8*b*s*h*d``). Runs at ``attention_efficiency`` of the
  tensor peak (:mod:`sim.hardware.gpu_compute`). Nothing of size ``s^2`` is stored.
* ``math``: the unfused composition (Megatron-LM's and torch's ``math`` backend): two batched
  GEMMs ``[s, hd] @ [hd, s]`` and ``[s, s] @ [s, hd]`` per (sample, head), a fused
  scale-mask-softmax over ``b*a*s^2`` scores (read and write, ``2*b*a*s^2*d``), and with dropout
  a dropout kernel (read, write and a 1-byte mask: ``(2d + 1)*b*a*s^2``). Backward: four
  batched GEMMs (dV, dP, dQ, dK), softmax backward (reads P and dP, writes dS:
  ``3*b*a*s^2*d``) and dropout backward (``(2d + 1)*b*a*s^2``).

  Causal (``s`` queries against as many keys): Megatron's fused kernel for the causal mask,
  ``scaled_upper_triang_masked_softmax`` (Megatron-LM and Megatron-DeepSpeed
  ``megatron/fused_kernels/scaled_upper_triang_masked_softmax.h``), reads only the unmasked
  lower triangle and writes every element: row ``i`` loads ``i + 1`` scores
  (``element_index < local_seq``) and stores its values and zeros for the rest
  (``copy_zero_vector``), so the forward moves ``(1/2 + 1)*b*a*s^2*d``; its backward loads the
  gradient and the output of the triangle only and writes the whole row: ``(1 + 1)*b*a*s^2*d``.
  The dropout kernels still cover every element.

  **Megatron's softmax fallback** (Megatron-DeepSpeed@4822c87e ``megatron/model/
  fused_softmax.py`` l.143-207; the same rule in Megatron-LM's and Megatron-Core's
  ``FusedScaleMaskSoftmax``): the fused kernel runs only where ``is_kernel_available`` allows
  (16-bit input, ``sq`` and ``sk`` multiples of 4, ``b * a`` a multiple of 4 and, with the
  causal mask, of the kernel's ``batch_per_block``, else ``sq`` a multiple of it:
  :func:`fused_softmax_available`). Elsewhere ``forward_torch_softmax`` runs eager PyTorch
  ops over all ``N`` scores with the softmax in fp32 (``--apply-query-key-layer-scaling``,
  Megatron's default, forces ``softmax_in_fp32``; ``scale`` is the layer number):
  ``input.float()`` (``(d + 4) N``), ``input * scale`` (``8 N``), ``masked_fill_`` of the
  1-byte causal mask (``9 N``), ``Softmax`` (``8 N``), ``.half()`` (``(4 + d) N``): ``37 N``
  at ``d = 2`` instead of ``3 N``; backward the same five in reverse (the casts ``(d + 4) N``
  each, the softmax's ``12 N``, the fill's ``9 N``, the scale's ``8 N``): ``41 N`` instead of
  ``4 N`` (:func:`torch_softmax_fwd`, :func:`torch_softmax_bwd`). Not modelled: the upper
  bound on ``sk`` (4096 at 4822c87e, 16384 in later Megatron-Core: version-dependent), the
  fp32 softmax output kept for the backward (``2 N`` bytes more), fp32 inputs (always the
  eager path; kept as the fused kernel's bytes), and the host's difference (2 more ops per pass and a module call, one
  ``autograd.Function`` apply less: about 10 us).

**Sliding-window attention** (Beltagy et al., arXiv:2004.05150; GPT-OSS's alternating
``sliding_attention`` layers, window 128): query ``i`` attends to the keys ``i - w < j <= i``,
and the fused kernel skips the tiles outside that band (FlashAttention's ``window_size``), so
the core's work is that of the band: of ``S x S`` scores a fraction ``w/S*(1 - w/(2S))`` (the
band's area ``S*w - w^2/2``; ``w = S`` gives the causal half). :func:`score_fraction` gives it;
the ``math`` implementation materialises every score and is not windowed.

**Attention sinks** (GPT-OSS: a learned logit per head in the softmax's denominator; Megatron-
Bridge's ``gpt_oss_bridge.py`` sets ``softmax_type = "learnable"`` and ``window_size =
(sliding_window - 1, 0)``, NVIDIA-NeMo/Megatron-Bridge@067f987): Transformer Engine runs them in
its fused (cuDNN) attention since v2.8 ("Add sink attention support from cuDNN", #2148); only
FlashAttention is refused for them, and the unfused path is left only where the fused one is
filtered out (FP8 attention on sm < 100, deterministic mode, THD with cuDNN < 9.18, context
parallelism other than ``a2a``: NVIDIA/TransformerEngine@d0067d0
``pytorch/attention/dot_product_attention/utils.py`` 1113-1153, 1536-1545; determinism is off
unless ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``, which Bridge's performance recipes set for
DeepSeek-V3 only). So a sink layer is the ``flash`` kernel above (its ``a`` extra logits are
free), windowed where the layer is.

Checked against the versions each Megatron-Bridge container ships (``docs/releases/
software-versions.md`` @067f987df0: 25.11 TE 2.9 with cuDNN 9.13.1, 26.02 TE 2.12 / cuDNN
9.18.0, 26.04 TE 2.14 / 9.20.0, 26.06 TE 2.16 / 9.21.1): Transformer Engine's C++ backend
choice gives the F16 fused backend a non-vanilla softmax from cuDNN 9.13.1 on
(``common/fused_attn/fused_attn.cpp``, ``cudnn_runtime_version >= 91301``: line 373 at v2.9
@70f5366, 445 at v2.12 @5671fd3, 463 at v2.14, 455 at v2.16 @4220403) and a left window with
a causal mask from cuDNN 9.2 on (the same function's "sliding window" clauses), so every BF16
GPT-OSS row runs cuDNN's fused kernel with its sink and honours the window: no container falls
back to ``UnfusedDotProductAttention`` (which would build the ``s x s`` scores). FP8 attention
(``fp8_dpa``, the GB200/GB300 MXFP8 recipes from 26.06) with sinks or a window is refused
before TE 2.16 (v2.9 ``utils.py`` 697-703 and 862-868: no backend is left) and from v2.16
needs sm100 and cuDNN 9.21 (v2.16 ``utils.py`` 934-941, 1148-1158; the FP8 backend's own
clause, ``fused_attn.cpp`` 255-296): 26.06's 9.21.1 on GB200/GB300 passes, so those rows run
cuDNN's FP8 kernel, whose windowed backward :mod:`sim.compute.swa_speed` times. The sink's
backward adds ``dSink = sum(exp(sink - stats) * rowsum(dO * O))`` over samples and queries
per head inside cuDNN's graph (NVIDIA/cudnn-frontend@3929da2 ``include/cudnn_frontend/node/
scaled_dot_product_flash_attention.h`` 1527-1546): a pointwise chain and a reduction over
``b*a*s`` fp32 values that the backward's own ``dO * O`` reduction already reads (4 MiB for
4 x 64 x 4096; under a microsecond at HBM rate), not charged.

A flash kernel records its shape for :mod:`sim.compute.measured` (published efficiencies by
sequence length and heads): ``m`` queries, ``n`` keys, ``k`` head dim, ``batch`` = samples x
heads, and its window, which :mod:`sim.compute.swa_speed` times at cuDNN's measured rate
(a windowed kernel does the band's FLOPs, but far below the causal kernel's FLOP/s).
"""

from __future__ import annotations

import math

from sim.compute.kernels import Kernel, gemm, mem

IMPLEMENTATIONS = ("flash", "math")
TRIANGLE = 0.5
"""Fraction of an ``s x s`` causal score matrix that Megatron's fused causal softmax reads
(its lower triangle, ``s(s+1)/2`` of ``s^2`` elements, taken as one half; module doc)."""


def score_fraction(s: int, kv: int, causal: bool, window: int = 0) -> float:
    """Fraction of the ``s x kv`` scores a rank's attention core computes (module doc): 1
    without a mask; causal ``1/2`` (a context-parallel rank's ``s = S/cp`` queries against
    ``kv = S`` keys: its ``1/cp`` share of the causal half); a window ``w < kv``:
    ``w/kv*(1 - w/(2 kv))``.

    Example (a 4096-token sequence, window 128):
        >>> score_fraction(4096, 4096, True), score_fraction(4096, 4096, True, 128)
        (0.5, 0.03076171875)
    """
    if not causal:
        return 1.0
    if window <= 0 or window >= kv:
        return 0.5
    return window / kv * (1.0 - window / (2.0 * kv))


SOFTMAX_THREADS_PER_BLOCK = 128
"""``threads_per_block`` of Megatron's fused softmax kernels
(``megatron/fused_kernels/scaled_masked_softmax.h::get_batch_per_block``, Megatron-DeepSpeed
@4822c87e l.419-431)."""
WARP_SIZE = 32
"""``C10_WARP_SIZE`` on NVIDIA GPUs."""


def softmax_batch_per_block(sk: int) -> int:
    """Rows of scores one thread block of Megatron's fused softmax handles, for ``sk`` keys
    (``get_batch_per_block``: the next power of two ``p >= sk``, a warp of ``min(p, 32)``
    threads per row, two rows per warp when ``p <= 128``, 128 threads per block).

    Example:
        >>> softmax_batch_per_block(1024), softmax_batch_per_block(64), softmax_batch_per_block(16)
        (4, 8, 16)
    """
    p = 1 << max(0, math.ceil(math.log2(sk)))
    warp = min(p, WARP_SIZE)
    per_warp = 2 if p <= 128 else 1
    return SOFTMAX_THREADS_PER_BLOCK // warp * per_warp


def fused_softmax_available(b: int, a: int, sq: int, sk: int, causal: bool, d: int) -> bool:
    """Whether Megatron's ``FusedScaleMaskSoftmax.is_kernel_available`` picks the fused kernel
    for ``b`` samples of ``a`` heads (on this rank), ``sq`` queries and ``sk`` keys, ``d``-byte
    input (module doc; Megatron-DeepSpeed@4822c87e ``megatron/model/fused_softmax.py``
    l.152-173). The upper bound on ``sk`` is not applied (module doc).

    Example (16 heads over 8 ranks, 1024 tokens: one sample takes the eager path):
        >>> fused_softmax_available(1, 2, 1024, 1024, True, 2)
        False
        >>> fused_softmax_available(2, 2, 1024, 1024, True, 2)
        True
    """
    batches = b * a
    if d != 2 or sk <= 16 or sq % 4 or sk % 4 or batches % 4:
        return False
    per_block = softmax_batch_per_block(sk)
    return batches % per_block == 0 if causal else sq % per_block == 0


def torch_softmax_fwd(scores: float, d: int) -> list[Kernel]:
    """The eager kernels of ``forward_torch_softmax`` over ``scores`` elements of ``d`` bytes,
    softmax in fp32 (module doc): ``(37 N)`` bytes at ``d = 2``."""
    return [
        mem("softmax_to_fp32", (d + 4) * scores),
        mem("softmax_scale", 8 * scores),
        mem("softmax_mask_fill", 9 * scores),
        mem("softmax", 8 * scores),
        mem("softmax_to_half", (4 + d) * scores),
    ]


def torch_softmax_bwd(scores: float, d: int) -> list[Kernel]:
    """The backward of :func:`torch_softmax_fwd` (module doc): ``41 N`` bytes at ``d = 2``."""
    return [
        mem("softmax_to_half_bwd", (d + 4) * scores),
        mem("softmax_bwd", 12 * scores),
        mem("softmax_mask_fill_bwd", 9 * scores),
        mem("softmax_scale_bwd", 8 * scores),
        mem("softmax_to_fp32_bwd", (4 + d) * scores),
    ]


def _check(impl: str) -> None:
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"attention must be one of {', '.join(IMPLEMENTATIONS)}, got {impl!r}")


def attention_fwd(
    impl: str,
    b: int,
    s: int,
    h: int,
    a: int,
    d: int,
    *,
    causal: bool,
    dropout: bool,
    kv: int | None = None,
    window: int = 0,
) -> list[Kernel]:
    """Forward kernels of the attention core (module doc) for ``s`` queries against ``kv``
    keys (default ``s``), over a sliding ``window`` (0: none). A context-parallel rank (:mod:`sim.parallel.context`) has ``s/cp``
    queries and attends, over its ring steps, to all ``kv = s`` keys; with the load-balanced
    causal split (Megatron-LM/TransformerEngine: each rank holds chunks ``i`` and ``2cp-1-i``)
    half of those scores are masked, so its share of the causal work is ``1/cp``.

    Raises:
        ValueError: unknown ``impl``.
    """
    _check(impl)
    hd, kv = h // a, s if kv is None else kv
    if impl == "flash":
        flops = 4.0 * b * s * kv * h * score_fraction(s, kv, causal, window)
        nbytes = 4.0 * b * s * h * d + 4.0 * b * a * s
        win = window if 0 < window < kv else 0
        return [Kernel("flash_attn_fwd", "attn", flops, nbytes, s, kv, hd, b * a, window=win)]
    scores = float(b * a * s * kv)
    read = TRIANGLE if causal and kv == s else 1.0
    out = [gemm("scores", s, kv, hd, d, batch=b * a)]
    if d != 2 or fused_softmax_available(b, a, s, kv, causal, d):
        out.append(mem("softmax", (read + 1) * scores * d))
    else:
        out += torch_softmax_fwd(scores, d)
    if dropout:
        out.append(mem("attn_dropout", (2 * d + 1) * scores))
    out.append(gemm("attn_v", s, hd, kv, d, batch=b * a))
    return out


def attention_bwd(
    impl: str,
    b: int,
    s: int,
    h: int,
    a: int,
    d: int,
    *,
    causal: bool,
    dropout: bool,
    kv: int | None = None,
    window: int = 0,
) -> list[Kernel]:
    """Backward kernels of the attention core (all input-gradient; module doc), ``s`` queries
    against ``kv`` keys over a sliding ``window`` as :func:`attention_fwd`.

    Raises:
        ValueError: unknown ``impl``.
    """
    _check(impl)
    hd, kv = h // a, s if kv is None else kv
    if impl == "flash":
        flops = 2.5 * 4.0 * b * s * kv * h * score_fraction(s, kv, causal, window)
        nbytes = 8.0 * b * s * h * d + 4.0 * b * a * s
        win = window if 0 < window < kv else 0
        return [Kernel("flash_attn_bwd", "attn", flops, nbytes, s, kv, hd, b * a, window=win)]
    scores = float(b * a * s * kv)
    out = [gemm("d_v", kv, hd, s, d, batch=b * a), gemm("d_probs", s, kv, hd, d, batch=b * a)]
    if dropout:
        out.append(mem("attn_dropout_bwd", (2 * d + 1) * scores))
    read = TRIANGLE if causal and kv == s else 1.0
    if d != 2 or fused_softmax_available(b, a, s, kv, causal, d):
        out.append(mem("softmax_bwd", (2 * read + 1) * scores * d))
    else:
        out += torch_softmax_bwd(scores, d)
    out += [
        gemm("d_q", s, hd, kv, d, batch=b * a),
        gemm("d_k", kv, hd, s, d, batch=b * a),
    ]
    return out

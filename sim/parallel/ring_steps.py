"""Ring attention's kernels per step: how much slower Transformer Engine's ``p2p`` context
parallelism runs a rank's attention than one causal kernel would.

A context-parallel rank holds chunks ``r`` and ``2cp-1-r`` of ``2cp`` (``s/cp`` tokens in all)
and its attention does ``1/cp`` of the causal work (:mod:`sim.parallel.context`). The compute
model writes that as one causal kernel of ``s/cp`` queries against ``s`` keys
(:func:`sim.compute.attention.attention_fwd`), timed as a kernel of ``s`` keys
(:mod:`sim.compute.measured`'s equivalent-length lookup). Transformer Engine runs it as ``cp``
kernels, one per ring step ``i`` (``AttnFuncWithCPAndKVP2P``, NVIDIA/TransformerEngine v2.9
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``: forward
loop lines 1460-1515, backward 2217-2239; the sections ``cp_p2p_fwd_prepare_qkv`` 477-592):

* step 0, ``diagonal``: the rank's own ``s/cp`` queries against its own ``s/cp`` keys with the
  causal mask (on the two chunks ``[r, 2cp-1-r]`` the plain causal mask is the right one);
* steps ``1 <= i <= rank``, ``lower-triangle``: all ``s/cp`` queries against the first half of
  the received keys (``k_part[0]``: ``s/(2cp)``), **no mask**;
* steps ``i > rank``, ``upper-triangle``: the second half of the queries (``q_part[1]``:
  ``s/(2cp)``) against all ``s/cp`` received keys, no mask (``attn_mask_type_ = "no_mask"``,
  ``cp_p2p_fwd_fused_attn`` 664 and 684; the backward kernels the same).

The same sections and masks are in every TE that Megatron-Bridge's containers ship (25.09 TE
2.7.0 to 26.06 TE 2.16: Megatron-Bridge@067f987 ``docs/releases/software-versions.md``; v2.7
inlines them, ``"no_mask"`` at lines 971 and 1130; v2.12 sections 1633-1687; v2.16 1849-1907).
Megatron-Core asks for ``p2p`` unless ``cp_comm_type`` is set (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/extensions/transformer_engine.py`` 2141-2142), as Bridge's Llama 3.1 405B
recipes leave it.

Each step does ``1/cp`` of the rank's work. A kernel's efficiency is set by its key length (the
loop each query tile runs) and its mask, so the steps (keys ``s/cp``, ``s/(2cp)``, ``s/cp``) run
below one causal kernel of ``s`` keys. :func:`ring_slowdown` is that ratio on cuDNN's measured
tables of the GPU's generation, which time the same kernel with both masks at 2K-32K tokens
(:mod:`sim.compute.cudnn_attention` causal, :mod:`sim.compute.unmasked_attention` no mask):

    ``slowdown = [1/R_c(s/cp) + (cp-1)/2 * (1/R_n(s/(2cp)) + 1/R_n(s/cp))] / (cp / R_c(s))``

(``R_c``, ``R_n``: causal and unmasked TFLOPS at that many keys; a later step is a lower
kernel on half the ring's ranks on average and an upper one on the rest, the mean over the
ranks as :mod:`sim.parallel.context_kernels` takes for the merges). The rank's attention-core
kernel keeps its own lookup (heads, GPU, format) and runs ``slowdown`` times longer
(:attr:`~sim.compute.kernels.Kernel.slowdown`). Assumptions: the measured tables' 128 samples x
heads stand for the rank's parallelism in this ratio (both sides are read at it); B200 and B300
take their generation's ratio (GB200's, GB300's), as :mod:`sim.compute.cudnn_attention` carries
its format ratios; the steps run one after the other (TE puts consecutive forward steps on two
streams "to resolve wave quantization issue of Flash Attn in each step", line 1351, which this
does not credit; the backward's steps are on one stream); 1 (no change) off Blackwell and for a
format cuDNN did not measure.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.cudnn_attention import measured_tflops, table_of
from sim.compute.kernels import Kernel
from sim.compute.measured import SIXTEEN_BIT
from sim.compute.unmasked_attention import no_mask_tflops
from sim.hardware.gpu_compute import ComputeSpec

RING_KERNELS = ("flash_attn_fwd", "flash_attn_bwd")
"""The attention-core kernels a ring runs in steps (:func:`sim.compute.attention.attention_fwd`)."""


def ring_slowdown(table: str | None, fmt: str, phase: str, s: int, cp: int) -> float:
    """How many times longer ``cp`` ring steps over ``s`` tokens take than one causal kernel of
    ``s`` keys doing the same work, on cuDNN's ``table`` (``GB200``, ``GB300``) in ``fmt`` for
    ``phase`` (``fwd``, ``bwd``) (module doc); 1.0 for ``cp == 1``, no table or an unmeasured
    format. ``s`` in tokens; the ratio has no unit.

    Raises:
        KeyError: ``phase`` is not ``fwd`` or ``bwd`` (for a measured table and format).

    Example: GB300 BF16 backward, 8192 tokens over 2 ranks: a causal 4096 kernel (1248
    TFLOPS), an unmasked one of 2048 keys (1213) and one of 4096 (1429), each pair sharing
    half the work, against a causal 8192 kernel (1435):
        >>> round(ring_slowdown("GB300", "bf16", "bwd", 8192, 2), 4)
        1.1217
    """
    if cp == 1 or table is None:
        return 1.0
    fmt = "bf16" if fmt in SIXTEEN_BIT else fmt
    local, half = s / cp, s / (2 * cp)
    rates = (
        measured_tflops(table, fmt, phase, s),
        measured_tflops(table, fmt, phase, local),
        no_mask_tflops(table, fmt, phase, half),
        no_mask_tflops(table, fmt, phase, local),
    )
    if any(r is None for r in rates):
        return 1.0
    whole, diag, lower, upper = (float(r) for r in rates if r is not None)
    steps = 1.0 / diag + (cp - 1) / 2.0 * (1.0 / lower + 1.0 / upper)
    return steps / (cp / whole)


def with_ring_steps(
    kernels: list[Kernel], s: int, cp: int, spec: ComputeSpec, dtype: str
) -> list[Kernel]:
    """``kernels`` with each rank attention-core kernel of a ``p2p`` ring over ``s`` tokens and
    ``cp`` ranks (``s/cp`` queries against ``s`` keys, unwindowed) slowed by
    :func:`ring_slowdown` on ``spec``'s generation in its format (``precision``, else
    ``dtype``)."""
    out = []
    for k in kernels:
        if k.name in RING_KERNELS and not k.window and k.m * cp == k.n == s:
            phase = "bwd" if k.name.endswith("_bwd") else "fwd"
            f = ring_slowdown(table_of(spec), k.precision or dtype, phase, s, cp)
            k = replace(k, slowdown=k.slowdown * f) if f != 1.0 else k
        out.append(k)
    return out

"""cuDNN's fused attention without a mask, measured beside its causal kernel (GB200, GB300).

Ring attention (Transformer Engine's ``p2p`` context parallelism, :mod:`sim.parallel.ring_steps`)
runs, besides one causal kernel over a rank's own tokens, ``cp - 1`` kernels with **no mask**
(``attn_mask_type_ = "no_mask"`` for the ``lower-triangle`` and ``upper-triangle`` sections,
NVIDIA/TransformerEngine v2.9 ``transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py`` ``cp_p2p_fwd_fused_attn``, lines 664 and 684). Every measured attention table
pipesim has is causal (:mod:`sim.compute.measured`, :mod:`sim.compute.cudnn_attention`). cuDNN's
SDPA training benchmark measures both masks on the same shape (NVIDIA/cudnn-frontend@3929da2
``benchmark/sdpa_benchmark_training/results/llama3.1/gb200/llama3.1_20260424_100750.csv`` and
``results/llama3.1/gb300/llama3.1_20260424_100757.csv``: batch 2 x 64 query heads over 8
key-value heads, head dim 128, non-deterministic backward, rows ``attn_mask = no_mask`` against
``top_left``). Its TFLOPS count only the unmasked scores (``benchmark_single_sdpa.py``
``flops``: ``q_seqlen * kv_seqlen`` elements for ``no_mask``, the ``tril`` for ``top_left``),
pipesim's convention, so the ratio of the two is how much faster the same useful work runs
without the mask: 1.14-1.18 at 4K tokens (the causal kernel's diagonal tiles and its load
imbalance), about 1.0 from 16K on.

**Use**: :func:`no_mask_tflops` gives the measured rate by table (``GB200``, ``GB300``: the
GPU's generation, :func:`~sim.compute.cudnn_attention.table_of`), format (``bf16``, ``fp8``,
``mxfp8``), pass and length (``log2`` interpolation, clamped), beside
:func:`~sim.compute.cudnn_attention.measured_tflops`' causal one; :mod:`sim.parallel.ring_steps`
compares ring attention's step kernels with one causal kernel on these two tables. Nothing is
fitted.
"""

from __future__ import annotations

from sim.compute.cudnn_attention import seq_tflops
from sim.compute.measured import SIXTEEN_BIT

# {table: {format: {pass: no_mask TFLOPS at SEQ}}}: cudnn-frontend@3929da2 (module doc).
_NO_MASK: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {
    "GB200": {
        "bf16": {"fwd": (1433, 1599, 1771, 1697, 1634), "bwd": (1124, 1350, 1404, 1374, 1262)},
        "fp8": {"fwd": (1881, 2093, 2241, 2263, 2223), "bwd": (1214, 1577, 1772, 1836, 1825)},
        "mxfp8": {"fwd": (1754, 1944, 2080, 2103, 2070), "bwd": (1069, 1344, 1495, 1554, 1480)},
    },
    "GB300": {
        "bf16": {"fwd": (1805, 1900, 2017, 2014, 1836), "bwd": (1213, 1429, 1531, 1536, 1427)},
        "fp8": {"fwd": (2728, 2988, 3160, 3182, 3050), "bwd": (1390, 1839, 2111, 2177, 2178)},
        "mxfp8": {"fwd": (2443, 2693, 2870, 2889, 2814), "bwd": (1164, 1469, 1636, 1689, 1654)},
    },
}


def no_mask_tflops(table: str, fmt: str, phase: str, seq: float) -> float | None:
    """TFLOPS cuDNN measured without a mask on ``table`` (``GB200``, ``GB300``) in ``fmt`` (a
    16-bit dtype counts as ``bf16``) for ``phase`` (``fwd``, ``bwd``) at ``seq`` queries and keys
    (interpolated in ``log2``, clamped); None for another table or format.

    Raises:
        KeyError: ``phase`` is not ``fwd`` or ``bwd`` (for a measured table and format).

    >>> no_mask_tflops("GB300", "bf16", "bwd", 8192), no_mask_tflops("GB200", "nvfp4", "fwd", 8192)
    (1531.0, None)
    """
    fmt = "bf16" if fmt in SIXTEEN_BIT else fmt
    return seq_tflops(_NO_MASK.get(table, {}), fmt, phase, seq)

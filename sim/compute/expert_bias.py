"""The experts' down-projection bias (GPT-OSS) as the kernels Megatron-Core runs, per expert.

Megatron-Core's ``TEGroupedMLP`` builds ``linear_fc2`` with its biases returned apart (one per
local expert) and adds them after the GEMM, weighted by the routing probabilities, as eager ops:
``torch.cat([t + b * p for t, b, p in zip(split(out), biases, split(probs))]).to(out.dtype)``
(NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/experts.py`` ``_apply_bias``,
lines 345-381; the same in megatron-core 0.15.0 and at the Megatron-LM commits of
Megatron-Bridge v0.2.0 to v0.4.1). Each op is a kernel (the ``split`` s are views); over the
``n_i x w`` rows of expert ``i`` (``d`` bytes an activation element; ``b * p`` promotes to fp32,
4 bytes, the probabilities being fp32):

* forward, per expert: ``b * p`` writes fp32 (``4``), the add reads ``t`` and the product and
  writes fp32 (``d + 8``); then ``cat`` over all rows (``8``) and the cast back (``4 + d``):
  ``2 N + 2`` kernels for ``N`` local experts, ``(24 + 2d)`` bytes per element in all
  (:func:`expert_bias_bytes`);
* backward (counted with torch 2.13's dispatch mode, ``scripts/count_gptoss_ops.py``): the
  cast's backward over all rows (``d + 4``; ``cat``'s backward is views), then per expert the
  add's gradient cast to ``t``'s dtype (``4 + d``), ``g * p`` (``8``) and its sum over the rows
  into the bias gradient (``4``), ``g * b`` (``8``) and its sum over the width into the
  probabilities' gradient (``4``), and the bias gradient's cast (a ``w``-vector: no bytes
  counted); then the two ``split`` s' backward, a ``cat`` of the experts' output gradients
  (``2d``) and one of their probabilities' (fp32, one per row): ``6 N + 3`` kernels,
  ``(32 + 4d)`` bytes per element (and ``8`` per row).

So the chain is ``2 N + 2`` and ``6 N + 3`` launches, each with the kernel model's launch
overhead (:func:`sim.compute.kernels.kernel_time_s`), where one kernel of the same bytes would
have one. Transformer Engine's fused grouped MLP adds the biases in its kernels (none here).
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem
from sim.hardware.formats import FP32_BYTES

FP32 = FP32_BYTES
"""Bytes of an element of ``b * p`` (fp32: the probabilities are fp32; module doc)."""


def bias_fwd(groups: dict[int, int], w: int, d: int) -> list[Kernel]:
    """Forward kernels of the bias chain over local experts ``{rows: experts}`` of width ``w``,
    ``d`` bytes an element (module doc).

    Example: 2 experts of 3 rows, width 4, bf16: 6 kernels; 24 elements x (24 + 4) bytes.

    >>> ks = bias_fwd({3: 2}, 4, 2)
    >>> len(ks), sum(k.bytes for k in ks)
    (6, 672.0)
    """
    out: list[Kernel] = []
    total = 0
    for n, c in sorted(groups.items()):
        total += n * c
        for _ in range(c):
            out += [mem(f"expert_bias_mul[{n}]", FP32 * n * w),
                    mem(f"expert_bias_add[{n}]", (d + 2 * FP32) * n * w)]  # fmt: skip
    if not out:
        return []
    return out + [mem("expert_bias_cat", 2 * FP32 * total * w),
                  mem("expert_bias_cast", (FP32 + d) * total * w)]  # fmt: skip


def bias_bwd(groups: dict[int, int], w: int, d: int) -> list[Kernel]:
    """Backward kernels of :func:`bias_fwd` (module doc).

    Example: 2 experts of 3 rows, width 4, bf16: 15 kernels; 24 elements x (32 + 8) bytes
    and 6 rows x 8.

    >>> ks = bias_bwd({3: 2}, 4, 2)
    >>> len(ks), sum(k.bytes for k in ks)
    (15, 1008.0)
    """
    total = sum(n * c for n, c in groups.items())
    if not total:
        return []
    out = [mem("expert_bias_cast_bwd", (d + FP32) * total * w)]
    for n, c in sorted(groups.items()):
        for _ in range(c):
            out += [
                mem(f"expert_bias_add_bwd[{n}]", (FP32 + d) * n * w),
                mem(f"expert_bias_dbias_mul[{n}]", 2 * FP32 * n * w),
                mem(f"expert_bias_dbias_sum[{n}]", FP32 * n * w),
                mem(f"expert_bias_dbias_cast[{n}]", 0.0),
                mem(f"expert_bias_dprobs_mul[{n}]", 2 * FP32 * n * w),
                mem(f"expert_bias_dprobs_sum[{n}]", FP32 * n * w),
            ]
    return out + [mem("expert_bias_dout_cat", 2 * d * total * w),
                  mem("expert_bias_dprobs_cat", 2 * FP32 * total)]  # fmt: skip


def expert_bias_bytes(rows: float, w: int, d: int) -> float:
    """Bytes the unfused bias of the experts' down projection moves in the forward (GPT-OSS;
    its kernels, one pair per expert: :func:`bias_fwd`).

    Megatron-Core's ``TEGroupedMLP`` builds ``linear_fc2`` with its bias returned apart and adds
    it after the GEMM, weighted by the routing probabilities: ``torch.cat([t + b * p for t, b, p
    in zip(split(out), biases, split(probs))]).to(out.dtype)`` (NVIDIA/Megatron-LM@d98e8a64
    ``megatron/core/transformer/moe/experts.py`` ``_apply_bias``, lines 345-381; added by
    a329dd6 "Enable bias in expert mlp [gpt-oss 5/5]"). Over the ``rows x w`` output: ``b * p``
    writes fp32 (4), the add reads ``d + 4`` and writes 4, ``cat`` reads and writes 4 each, the
    cast reads 4 and writes ``d``: ``(24 + 2d)`` bytes per element.

    Example: 2 rows of width 3 in bf16: ``6 * 28 = 168`` bytes.
    """
    return rows * w * (6 * FP32 + 2 * d)

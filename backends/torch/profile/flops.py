"""Forward FLOPs of a layer, counted the same way whichever profiler made the trace.

``torch.utils.flop_counter.FlopCounterMode`` has formulas for the matrix products and for the
CUDA attention kernels (``_scaled_dot_product_flash_attention``, ``..._efficient_attention``,
``..._cudnn_attention``) but not for the kernel scaled-dot-product attention runs on a CPU
(``aten._scaled_dot_product_flash_attention_for_cpu``), so a CPU-profiled trace left attention
out of its ``flops`` column while ``--for-gpu`` counted it. :func:`flop_counter` adds that
kernel with the same formulas as the CUDA ones (``sdpa_flop_count`` /
``sdpa_backward_flop_count``: ``4 b h s_q s_k d`` forward, torch/utils/flop_counter.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


def _cpu_sdpa(
    query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_sdpa_backward(
    grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


CPU_ATTENTION = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward,
}
"""The CPU attention kernels and their FLOP formulas (argument shapes in, FLOPs out)."""


def cpu_attention_flops(packet: Any, args: tuple) -> float | None:
    """FLOPs of a CPU attention kernel call (:data:`CPU_ATTENTION`), ``None`` for other ops."""
    formula: Any = CPU_ATTENTION.get(packet)
    if formula is None:
        return None
    return float(formula(*(getattr(a, "shape", a) for a in args)))


def flop_counter() -> FlopCounterMode:
    """A ``FlopCounterMode`` that also counts CPU attention (module docstring).

    Example:
        >>> q = torch.randn(2, 4, 16, 8)
        >>> with flop_counter() as c:
        ...     _ = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        >>> c.get_total_flops() == 4 * 2 * 4 * 16 * 16 * 8
        True
    """
    return FlopCounterMode(display=False, custom_mapping=dict(CPU_ATTENTION))

"""torchtitan's eager Llama kernels where they differ from the fused ones of
:mod:`sim.compute.transformer`: RoPE as a complex multiply in fp32, RMSNorm as fp32 ATen ops, and
the grouped-query keys and values repeated before attention.

**Complex RoPE** (``apply_rotary_emb``, pytorch/torchtitan@238fa9953e
``torchtitan/models/llama3/model/model.py`` lines 141-169; the same code at @ba2469780 (2024-12,
``models/llama/model.py`` 100-113) and at @b5bcd76 ``models/common/rope.py`` 254-264): per
tensor (queries, then keys) ``xq.float()``, ``view_as_complex``, a complex multiply by the
``[s, hd/2]`` complex64 table, ``view_as_real``, ``.type_as(xq)``. Counted with torch 2.13's
dispatch mode (each ATen op that is not a view one kernel; ``N`` elements of the 16-bit tensor,
``d`` bytes each; the table ``8 s hd/2 = 4 s hd`` bytes):

* forward, 3 kernels: the fp32 cast (``N d + 4N``), the complex multiply (reads ``4N`` and the
  table, writes ``4N``), the cast back (``4N + N d``);
* backward, 4 kernels: the incoming 16-bit gradient cast to fp32 (``N d + 4N``), the table's
  conjugate materialised (``clone``: reads and writes the table), the multiply by it (as the
  forward's), the gradient cast to 16 bits (``4N + N d``).

The fused kernel pipesim times otherwise moves ``2 N d`` each way.

**fp32 RMSNorm** (torchtitan's own ``RMSNorm``, ``norm_type = "rmsnorm"``, the default of
``train_configs/llama3_8b.toml`` at @ba2469780, the code of its December 2024 H100 benchmarks:
``torchtitan/models/norms.py`` lines 77-101: ``_norm(x.float()).type_as(x) * weight`` with
``_norm = x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``; ``norm_type`` was removed on
2025-04-23, #1131, for ``nn.RMSNorm``, whose composite ATen ``rms_norm`` runs the same ops where
torch has no fused kernel; torch 2.13 has ``aten::_fused_rms_norm``). Over ``r`` rows of ``h``
16-bit elements (``E = r h``), counted as above:

* forward, 8 kernels: cast to fp32 (``E d + 4E``), ``pow`` (``8E``), ``mean`` (reads ``4E``,
  writes ``4r``), ``+ eps`` and ``rsqrt`` (``8r`` each), ``x * rstd`` (``8E + 4r``), cast back
  (``4E + E d``), ``* weight`` (``2 E d + h d``);
* backward, 16 kernels: ``* weight``'s two gradients (``g * y``: ``3 E d``; ``g * weight``:
  ``2 E d + h d``) and the weight gradient's sum over rows (``E d + h d``); the gradient to fp32
  (``E d + 4E``); ``x * rstd``'s (``g x``: ``12E``; ``g rstd``: ``8E + 4r``) and its sum over
  ``h`` (``4E + 4r``); ``rsqrt``'s three small kernels (``pow``, two ``mul``: ``8r``, ``8r``,
  ``12r``); ``mean``'s (``div`` of the expanded gradient: ``4r + 4E``); ``pow``'s (``x.pow(1)``:
  ``8E``; times 2: ``8E``; times the gradient: ``12E``); the two paths' gradients summed
  (``12E``); the cast to 16 bits (``4E + E d``).

**Repeated keys and values** (``repeat_kv``, @ba2469780 ``models/llama/model.py`` lines 116-127
and 200-202: ``unsqueeze``, ``expand``, ``reshape`` to ``a`` heads, a copy; removed on
2026-01-27, #2259, for SDPA's ``enable_gqa``): per tensor of ``N`` elements over ``kv`` heads,
forward one copy reading ``N d`` and writing ``N d a/kv``; backward the ``reshape``'s gradient
summed over the ``a/kv`` copies (``sum``: reads ``N d a/kv``, writes ``N d``). The attention
core then runs over ``a`` key heads, as pipesim's flash model already counts its FLOPs.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem
from sim.hardware.formats import FP32_BYTES

FP32 = FP32_BYTES
"""Bytes of an fp32 element."""


def rope_complex_fwd(name: str, elements: float, s: int, hd: int, d: int) -> list[Kernel]:
    """Forward kernels of the complex RoPE over one tensor of ``elements`` ``d``-byte elements
    with a ``[s, hd/2]`` complex64 table (module doc), named ``<name>_<op>``."""
    n, table = float(elements), float(FP32 * s * hd)
    return [
        mem(f"{name}_to_fp32", n * (d + FP32)),
        mem(f"{name}_complex_mul", 2 * FP32 * n + table),
        mem(f"{name}_to_16bit", n * (FP32 + d)),
    ]


def rope_complex_bwd(name: str, elements: float, s: int, hd: int, d: int) -> list[Kernel]:
    """Backward kernels of :func:`rope_complex_fwd` (module doc)."""
    n, table = float(elements), float(FP32 * s * hd)
    return [
        mem(f"{name}_grad_to_fp32", n * (d + FP32)),
        mem(f"{name}_conj_table", 2 * table),
        mem(f"{name}_grad_complex_mul", 2 * FP32 * n + table),
        mem(f"{name}_grad_to_16bit", n * (FP32 + d)),
    ]


def rms_norm_fp32_fwd(name: str, rows: float, h: int, d: int) -> list[Kernel]:
    """Forward kernels of the fp32 RMSNorm over ``rows`` rows of ``h`` ``d``-byte elements
    (module doc), named ``<name>_<op>``."""
    e, r = float(rows * h), float(rows)
    return [
        mem(f"{name}_to_fp32", e * (d + FP32)),
        mem(f"{name}_pow", 2 * FP32 * e),
        mem(f"{name}_mean", FP32 * (e + r)),
        mem(f"{name}_add_eps", 2 * FP32 * r),
        mem(f"{name}_rsqrt", 2 * FP32 * r),
        mem(f"{name}_mul_rstd", 2 * FP32 * e + FP32 * r),
        mem(f"{name}_to_16bit", e * (FP32 + d)),
        mem(f"{name}_mul_weight", 2 * e * d + h * d),
    ]


def rms_norm_fp32_bwd(name: str, rows: float, h: int, d: int) -> list[Kernel]:
    """Backward kernels of :func:`rms_norm_fp32_fwd` (module doc)."""
    e, r, f = float(rows * h), float(rows), FP32
    return [
        mem(f"{name}_bwd_grad_y", 3 * e * d),
        mem(f"{name}_bwd_grad_x_weight", 2 * e * d + h * d),
        mem(f"{name}_bwd_weight_sum", e * d + h * d),
        mem(f"{name}_bwd_to_fp32", e * (d + f)),
        mem(f"{name}_bwd_grad_x_times_x", 3 * f * e),
        mem(f"{name}_bwd_grad_times_rstd", 2 * f * e + f * r),
        mem(f"{name}_bwd_rstd_sum", f * (e + r)),
        mem(f"{name}_bwd_rsqrt_pow", 2 * f * r),
        mem(f"{name}_bwd_rsqrt_mul", 2 * f * r),
        mem(f"{name}_bwd_rsqrt_mul2", 3 * f * r),
        mem(f"{name}_bwd_mean_div", f * (e + r)),
        mem(f"{name}_bwd_pow1", 2 * f * e),
        mem(f"{name}_bwd_pow_times2", 2 * f * e),
        mem(f"{name}_bwd_pow_grad", 3 * f * e),
        mem(f"{name}_bwd_sum_paths", 3 * f * e),
        mem(f"{name}_bwd_to_16bit", e * (f + d)),
    ]


def kv_repeat_fwd(name: str, elements: float, repeats: int, d: int) -> list[Kernel]:
    """The copy of ``repeat_kv`` over one ``elements``-element key or value tensor repeated
    ``repeats`` (``a/kv``) times (module doc); none when ``repeats`` is 1."""
    n = float(elements) * d
    return [mem(f"{name}_repeat_kv", n * (1 + repeats))] if repeats > 1 else []


def kv_repeat_bwd(name: str, elements: float, repeats: int, d: int) -> list[Kernel]:
    """The gradient of :func:`kv_repeat_fwd`: the repeats summed back (module doc)."""
    n = float(elements) * d
    return [mem(f"{name}_repeat_kv_bwd", n * (1 + repeats))] if repeats > 1 else []

"""Accuracy section "low precision": pipesim's GEMM and cast-kernel model against Transformer
Engine's own GEMM benchmark on Blackwell (a kernel-level micro-benchmark, not an iteration).

Source: NVIDIA/TransformerEngine@d0067d0 ``docs/examples/gemm_profiling/gemm_profiling.rst``
lines 60-160 (tool ``benchmarks/gemm/benchmark_gemm.py``), "NVIDIA B300 SXM6 AC": a model with
hidden 4096, intermediate 16384 (no gating), 32 heads, micro-batch 31 x 512 tokens, i.e. the 12
GEMMs of one layer (4 forward, 4 input-gradient, 4 weight-gradient shapes, each run as a plain
``[M, K] @ [K, N]``) at ``M = 15872``, timed by CUDA events:

* **pre-quantized** (``--pre-quantize``: the GEMM kernels alone, operands quantized before the
  timed loop), per-layer ms: BF16 13.102, FP8 current scaling 6.812, MXFP8 7.161, NVFP4 3.764;
* **autocast** (each call is a ``te.Linear`` forward under ``te.autocast``: the input, which
  needs both usages because the weight requires a gradient, and the weight, row-wise only as
  the input requires none, are quantized in every call: ``module/linear.py:303, 384-390,
  466-475``), per-layer ms: BF16 12.758, FP8 current 9.147, MXFP8 8.984, NVFP4 6.453 (NVFP4's
  random Hadamard transform is not among pipesim's cast bytes).

The ``dgx-b300`` preset's GEMM efficiencies are this benchmark's FLOP rates (BF16, FP8, NVFP4
pre-quantized: :func:`efficiency`), so the pre-quantized ratios print the model's own loss to
wave quantization and launch overhead, about 1 %; the autocast ratios check the cast kernels.

pipesim predicts the same 12 GEMMs on its ``dgx-b300`` preset (the HGX B300 of that benchmark)
with :func:`sim.compute.kernels.kernel_time_s`, and the autocast overhead as the cast kernels of
:func:`sim.compute.cast_bytes.cast_bytes_per_element` (one per operand per call) at the preset's
HBM rate. Printed: both, their ratio, and the FP8-over-BF16 speed-ups, which do not depend on
the preset's absolute GEMM efficiency. Nothing is fitted to these figures.

Run: ``python benchmarks/accuracy/bench_te_gemm_profile.py``.
"""

from __future__ import annotations

from sim.compute.cast_bytes import cast_bytes_per_element
from sim.compute.kernels import gemm, kernel_time_s, mem
from sim.compute.precision import get_recipe
from sim.compute.quantize import quantize_layer
from sim.hardware.loader import load_hardware

M, HIDDEN, FFN = 31 * 512, 4096, 16384
"""TE's example: tokens per micro-batch, hidden and intermediate sizes."""
FORWARD = ((HIDDEN, 3 * HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, FFN), (FFN, HIDDEN))
"""``(K, N)`` of the forward GEMMs: QKV, attention output, MLP up, MLP down."""
TE_MS = {
    "bf16": (13.102, 12.758),
    "fp8-tensorwise": (6.812, 9.147),
    "mxfp8": (7.161, 8.984),
    "nvfp4": (3.764, 6.453),
}
"""``(pre-quantized, autocast)`` per-layer ms (gemm_profiling.rst lines 92 and 148)."""


def layer_flops() -> float:
    """FLOPs of the 12 GEMMs: ``2 M K N`` each."""
    return sum(2.0 * m * k * n for m, k, n in layer_shapes())


def efficiency(precision: str, peak_flops: float) -> float:
    """The benchmark's pre-quantized FLOP rate in ``precision`` as a fraction of ``peak_flops``
    (FLOP/s): :func:`layer_flops` / the per-layer time."""
    return layer_flops() / (TE_MS[precision][0] * 1e-3) / peak_flops


def layer_shapes() -> list[tuple[int, int, int]]:
    """The 12 ``(M, K, N)`` the benchmark runs: forward ``(M, K, N)``, input gradient
    ``(M, N, K)``, weight gradient ``(K, M, N)`` (``benchmark_gemm.py`` model-config mode)."""
    fwd = [(M, k, n) for k, n in FORWARD]
    dgrad = [(M, n, k) for k, n in FORWARD]
    wgrad = [(k, M, n) for k, n in FORWARD]
    return fwd + dgrad + wgrad


def autocast_cast_bytes(precision: str, non_tn: bool = True) -> float:
    """HBM bytes of the casts one layer's 12 autocast calls add: per call the ``[M, K]`` input
    for two usages and the ``[K, N]`` weight for one (module doc)."""
    recipe = get_recipe(precision)
    if recipe is None:
        return 0.0
    x = cast_bytes_per_element(recipe, 2, non_tn)
    w = cast_bytes_per_element(recipe, 1, non_tn, weight=True)
    return sum(m * k * x + k * n * w for m, k, n in layer_shapes())


def predicted_ms(precision: str, preset: str = "dgx-b300") -> tuple[float, float]:
    """pipesim's ``(pre-quantized, autocast)`` per-layer ms for ``precision`` on ``preset``."""
    spec = load_hardware(preset).gpus[0].compute
    recipe = get_recipe(precision)
    gemm_s = 0.0
    for m, k, n in layer_shapes():
        kern = gemm("up", m, n, k, 2)  # a linear layer's GEMM, in the recipe's format
        if recipe is not None:
            kern = quantize_layer(([kern], [], []), recipe, spec.low_rate(recipe.format))[0][0]
        gemm_s += kernel_time_s(kern, spec, "bf16")
    casts = 2 * len(layer_shapes()) if recipe is not None else 0
    cast_s = casts * spec.kernel_overhead_s
    cast_s += kernel_time_s(mem("casts", autocast_cast_bytes(precision)), spec, "bf16")
    cast_s -= spec.kernel_overhead_s
    return gemm_s * 1e3, (gemm_s + cast_s) * 1e3


def main() -> None:
    print("Transformer Engine's GEMM benchmark (B300, one layer, 12 GEMMs) vs pipesim dgx-b300")
    print(f"{'precision':16s} {'mode':13s} {'TE ms':>8s} {'pipesim':>8s} {'ratio':>6s}")
    for precision, te in TE_MS.items():
        ours = predicted_ms(precision)
        for mode, a, b in zip(("pre-quantized", "autocast"), te, ours, strict=True):
            print(f"{precision:16s} {mode:13s} {a:8.3f} {b:8.3f} {b / a:6.2f}")
    spec = load_hardware("dgx-b300").gpus[0].compute
    for precision, fmt in (
        ("bf16", "bf16"),
        ("fp8-tensorwise", "fp8"),
        ("mxfp8", "mxfp8"),
        ("nvfp4", "nvfp4"),
    ):
        eff = efficiency(precision, spec.peak_flops(fmt))
        ours = spec.matmul_rate(fmt) / spec.peak_flops(fmt)
        print(f"{precision} TE FLOP rate / B300 peak {eff:.3f}, dgx-b300 efficiency {ours:.3f}")
    bf16_te, bf16_ours = TE_MS["bf16"][0], predicted_ms("bf16")[0]
    for precision in ("fp8-tensorwise", "mxfp8", "nvfp4"):
        te_x = bf16_te / TE_MS[precision][0]
        ours_x = bf16_ours / predicted_ms(precision)[0]
        print(f"{precision} GEMM speed-up over BF16: TE {te_x:.2f}x, pipesim {ours_x:.2f}x")
        te_cast = TE_MS[precision][1] - TE_MS[precision][0]
        pre, auto = predicted_ms(precision)
        print(f"{precision} autocast casts: TE {te_cast:.3f} ms, pipesim {auto - pre:.3f} ms")


if __name__ == "__main__":
    main()

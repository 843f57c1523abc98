"""Cross-GPU check of pipesim's Mamba-2 layer against a measured Mamba-2 training run.

**Measurement** (state-spaces/mamba issue #904, 2026-04-06, "Mamba2 (SSD) is unaffected"
table): a pure Mamba-2 language model, ``d_model`` 2048, 48 layers, batch 4, sequence 4096,
bf16, trained with ``mamba_ssm``'s kernels on one GPU of each kind: 102.5 TFLOP/s on an
A100, 239.2 on an H200 and 360.4 on a GB200. The issue does not give its FLOP formula, but
it is the same on the three GPUs, so the *ratios* of the throughputs are ratios of step
times: GB200 / H200 = 1.507, H200 / A100 = 2.334. Nothing here is fitted: the script prints
pipesim's ratios next to these.

**Model** (pipesim's kernels, :mod:`sim.compute.ssm`): 48 Mamba-2 layers of ``mamba_ssm``'s
``Mamba2`` defaults (state-spaces/mamba@e9594ce ``mamba_ssm/modules/mamba2.py`` lines 41-60:
``d_state`` 128, ``d_conv`` 4, ``expand`` 2, ``headdim`` 64, ``ngroups`` 1, ``chunk_size``
256; so 64 heads), forward, input- and weight-gradient kernels of one GPU (no parallelism),
and the tied LM head's three GEMMs over ``MambaConfig``'s vocabulary padded to 8 (50,280;
``mamba_ssm/models/config_mamba.py``; the issue does not state its vocabulary: an
assumption). Approximation: :func:`~sim.compute.ssm.mamba_fwd` is Megatron's mixer (its
separate gated norm; no ``(l, b, d)`` transposes here, as ``mamba_ssm``'s ``(b, l, d)``
layout needs none); the optimizer step, embedding and loss are left out (small at 16,384
tokens a step). Each kernel is timed by :func:`~sim.compute.kernels.kernel_time_s` on the
preset's GPU.

**Absolute bound** (printed after the ratios, nothing fitted): the issue's FLOP count is at
least the usual training count ``6 N T`` (assumption: the issue does not state it; ``N`` the
model's parameters, ``T`` = 16,384 tokens a step; counting the SSD's own FLOPs too would add
about 6 % at this shape), so its measured step lasts at least ``6 N T / (TFLOP/s)``: with ``N``
the 48 layers' 1.24 B parameters (:meth:`MambaShape.params`), and with the tied embedding
(1.34 B). pipesim's step leaves out the optimizer, embedding and loss (a few ms at 1.3 B).

Run: ``python benchmarks/accuracy/mamba2_gpu_ratio.py``.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.compute.kernels import gemm, kernel_time_s  # noqa: E402
from sim.compute.ssd_speed import is_ssd  # noqa: E402
from sim.compute.ssm import MambaShape, mamba_bwd, mamba_fwd  # noqa: E402
from sim.hardware.loader import load_hardware_spec  # noqa: E402

MEASURED_TFLOPS = {"dgx-a100-80gb": 102.5, "dgx-h200": 239.2, "gb200-nvl72": 360.4}
"""Mamba-2 training TFLOP/s per GPU (module doc: state-spaces/mamba#904)."""
HIDDEN, LAYERS, BATCH, SEQ, VOCAB, BF16 = 2048, 48, 4, 4096, 50280, 2
SHAPE = MambaShape(heads=64, head_dim=64, state=128, groups=1, conv_kernel=4, chunk=256)


def step_parts_s(preset: str) -> dict[str, float]:
    """Seconds of one training step on ``preset``'s GPU by part (module doc)."""
    spec = load_hardware_spec(preset).gpu.compute_spec()
    dx, dw = mamba_bwd(SHAPE, HIDDEN, SEQ, BATCH, BF16)
    parts: dict[str, float] = defaultdict(float)
    for k in mamba_fwd(SHAPE, HIDDEN, SEQ, BATCH, BF16) + dx + dw:
        part = "SSD scan" if is_ssd(k) else "GEMM" if k.kind == "gemm" else "memory-bound"
        parts[part] += LAYERS * kernel_time_s(k, spec, "bf16")
    t = BATCH * SEQ
    head = [gemm("head", t, VOCAB, HIDDEN, BF16), gemm("d_head_in", t, HIDDEN, VOCAB, BF16),
            gemm("d_head_w", HIDDEN, VOCAB, t, BF16)]  # fmt: skip
    parts["LM head"] = sum(kernel_time_s(k, spec, "bf16") for k in head)
    return dict(parts)


def lower_bound_step_s(tflops: float, embedding: bool) -> float:
    """The least step time a measured ``tflops`` allows if the count is ``6 N T`` (module doc,
    "Absolute bound"); ``embedding``: ``N`` with the tied embedding.

    >>> round(lower_bound_step_s(360.4, False) * 1e3, 1)
    338.4
    """
    n = LAYERS * SHAPE.params(HIDDEN) + (VOCAB * HIDDEN if embedding else 0)
    return 6.0 * n * BATCH * SEQ / (tflops * 1e12)


def main() -> None:
    steps = {}
    for preset, tflops in MEASURED_TFLOPS.items():
        parts = step_parts_s(preset)
        steps[preset] = sum(parts.values())
        split = ", ".join(f"{p} {s * 1e3:.1f}" for p, s in parts.items())
        print(f"{preset:14s} predicted step {steps[preset] * 1e3:6.1f} ms ({split} ms); "
              f"measured {tflops} TFLOP/s")  # fmt: skip
    for fast, slow in (("gb200-nvl72", "dgx-h200"), ("dgx-h200", "dgx-a100-80gb")):
        meas = MEASURED_TFLOPS[fast] / MEASURED_TFLOPS[slow]
        pred = steps[slow] / steps[fast]
        print(f"{fast} over {slow}: measured x{meas:.3f}, pipesim x{pred:.3f} "
              f"({(pred / meas - 1) * 100:+.1f} %)")  # fmt: skip
    for preset, tflops in MEASURED_TFLOPS.items():
        body, full = (lower_bound_step_s(tflops, e) for e in (False, True))
        print(f"{preset:14s} measured step >= {body * 1e3:6.1f} ms (6NT, layers) / "
              f"{full * 1e3:6.1f} ms (with embedding): pipesim {steps[preset] * 1e3:6.1f} ms, "
              f"{(steps[preset] / body - 1) * 100:+.1f} / {(steps[preset] / full - 1) * 100:+.1f} %")  # fmt: skip


if __name__ == "__main__":
    main()

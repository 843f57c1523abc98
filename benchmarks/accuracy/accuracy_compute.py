"""Accuracy section "compute": per-layer time vs micro-batch size, model vs Galvatron.

Galvatron's ``computation_profiling_bf16_llama2-7b_all.json`` (measurements/galvatron/, measured
by PKU-DAIR, Apache-2.0) holds the forward+backward time per Llama-2-7B layer at sequence 2048,
bf16, for micro-batch sizes 1..12 (``layertype_0_bsz{b}_seq2048``, ms, which equals
``(layernum[4] - layernum[2]) / 2 / b``: per sample). The file does not say which GPU or passes
it timed, so only the *shape* is compared: per-sample time relative to the largest ``b``.

The prediction is :func:`sim.compute.transformer.block_times` of
:data:`~sim.compute.block_shape.LLAMA2_7B` (flash attention as torch SDPA runs it, SwiGLU,
no fused QKV, RoPE, no dropout) on the GPU of a hardware preset. Assumption: the file was timed
on an A100-80GB (``dgx-a100-80gb``); the H100 row is shown for comparison (its absolute layer
time is close to the file's, which hints that the file may come from an H100-class GPU). No
model constant is fitted to this file.
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.compute.transformer import LLAMA2_7B, block_times
from sim.hardware.loader import load_hardware

FILE = (
    Path(__file__).resolve().parents[2]
    / "measurements"
    / "galvatron"
    / "computation_profiling_bf16_llama2-7b_all.json"
)
PRESETS = ("dgx-a100-80gb", "dgx-h100")
"""``dgx-a100-80gb`` is the stated assumption; ``dgx-h100`` is shown for comparison."""


def measured_per_sample_ms(path: Path = FILE) -> dict[int, float]:
    """``{b: ms per sample per layer}`` from Galvatron's file (``layertype_0_bsz{b}``)."""
    data = json.loads(path.read_text())
    out = {}
    for key, ms in data.items():
        if key.startswith("layertype_0_bsz"):
            out[int(key.removeprefix("layertype_0_bsz").split("_")[0])] = float(ms)
    return dict(sorted(out.items()))


def predicted_per_sample_ms(preset: str, sizes: list[int]) -> dict[int, float]:
    """``{b: ms per sample}`` of one Llama-2-7B layer, forward + backward, on ``preset``."""
    spec = load_hardware(preset).gpus[0].compute
    assert spec is not None
    return {b: block_times(LLAMA2_7B, b, spec, "bf16").total_s / b * 1e3 for b in sizes}


def rows() -> list[dict]:
    """One row per micro-batch size: measured and predicted per-sample time relative to the
    largest size, and the difference in percentage points."""
    meas = measured_per_sample_ms()
    sizes = list(meas)
    ref = sizes[-1]
    preds = {p: predicted_per_sample_ms(p, sizes) for p in PRESETS}
    out = []
    for b in sizes:
        row = {
            "b": b,
            "measured ms/sample": round(meas[b], 3),
            "measured rel": round(meas[b] / meas[ref], 4),
        }
        for p, pred in preds.items():
            rel = pred[b] / pred[ref]
            row[f"{p} ms/sample"] = round(pred[b], 3)
            row[f"{p} rel"] = round(rel, 4)
            row[f"{p} diff pp"] = round(100 * (rel - meas[b] / meas[ref]), 2)
        out.append(row)
    return out


TITLE = (
    "compute: Llama-2-7B layer (h 4096, ffn 11008 SwiGLU, 32 heads, seq 2048, bf16, "
    "fwd+bwd), per-sample time relative to b=12, Galvatron measured vs pipesim model"
)

"""How close vTrain's measured layers and optimizer steps sit to the A100's peak rates.

vTrain's rows (``../shared/data/vtrain/``, or ``$PIPESIM_SHARED_DATA``) are exactly linear in the
layer count ``L`` and the micro-batch count ``m`` within one ``(h, t, p, w, b)`` group
(``measurements/vtrain/README.md``), so at ``p = 1`` each group gives two measured costs
without any model: ``f``, one transformer layer's forward, recompute and backward for one
micro-batch (seconds), and ``c``, the per-iteration cost per layer (its optimizer step and its
share of the data-parallel all-reduce). ``T(L, m) = a + c L + m (e + f L)``: the slope in ``L``
at two ``m`` gives ``f`` and ``c``; a micro-batch size measured at one ``m`` only takes ``c``
from the other sizes of its ``(h, t, w)``.

Beside them this prints, for the same layer on one tensor-parallel rank:

* ``model``: pipesim's kernel model of the layer on the preset (``sim.compute.transformer``:
  GEMMs at ``matmul_efficiency`` x wave quantization, memory-bound kernels at ``hbm_efficiency``,
  ``kernel_overhead_s`` per kernel), forward twice (recompute) plus the backward;
* ``floor_mamf``: the same kernels with nothing lost but what a sourced rate says: GEMMs at the
  measured maximum achievable matmul rate (``matmul_efficiency``: MAMF, ml-engineering) with no
  wave or tile quantization, memory-bound kernels at the datasheet HBM peak, no per-kernel
  overhead (each kernel ``max(flops / rate, bytes / peak)``);
* ``floor_peak``: as ``floor_mamf`` with GEMMs at the datasheet tensor peak: no A100 runs these
  kernels faster;
* with ``t > 1`` every figure adds the layer's six tensor-parallel all-reduces of ``b s h`` 16-bit
  values (two per forward, recompute and backward: Megatron's ``RowParallelLinear`` and the
  backward of ``ColumnParallelLinear``), timed by vTrain's own A100 all-reduce table
  (``measurements/vtrain/allreduce_lut.csv``, a micro-benchmark).

``meas / floor`` over 1 means the measured layer is faster than its kernels can run at those
rates: no efficiency a source gives can reach it. For ``c`` at ``w = 1`` (no all-reduce) the
script prints the bytes per parameter the measured step can move at the HBM peak, beside what
the framework profile's step moves (``sim.memory.states.optimizer_step_s``: 28 B for fp16 Adam,
plus ``step_extra_bytes``).

Both A100 variants are printed (vTrain does not say which it used): ``dgx-a100-40gb`` (HBM2,
1.555 TB/s) and ``dgx-a100-80gb`` (HBM2e, 2.039 TB/s). Nothing here feeds the model.

Run: ``python benchmarks/accuracy/vtrain_floor.py [--preset NAME ...]``
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.compute.kernels import Kernel, kernel_time_s  # noqa: E402
from sim.compute.transformer import BlockShape, block_bwd, block_fwd  # noqa: E402
from sim.hardware.comm_tables import CollectiveTable  # noqa: E402
from sim.hardware.gpu_compute import ComputeSpec  # noqa: E402
from sim.hardware.loader import load_hardware_spec  # noqa: E402

DATA = Path(os.environ.get("PIPESIM_SHARED_DATA", ROOT.parent / "shared" / "data")) / "vtrain"
LUT = ROOT / "measurements" / "vtrain" / "allreduce_lut.csv"
HEADS, SEQ = 16, 1024
"""vTrain's rows: 16 heads, sequence 1024 (``../shared/data/README.md``)."""
TP_ALLREDUCES = 6
"""Tensor-parallel all-reduces per layer and micro-batch with full recompute (module doc)."""
ADAM_BYTES = 28.0
"""fp16 Adam's bytes per parameter (``sim.memory.states.optimizer_step_s``: 2 + 2 x 12 + 2)."""


def floor_time_s(kern: Kernel, spec: ComputeSpec, gemm_eff: float) -> float:
    """Seconds of ``kern`` at the floor rates (module doc): ``max(flops / (peak * gemm_eff),
    bytes / hbm_peak)`` for a GEMM or attention kernel, ``bytes / hbm_peak`` for a memory-bound
    one; no wave quantization, no per-kernel overhead.

    Example (a 1 GFLOP, 1 MB GEMM on a 100 TFLOP/s, 1 TB/s GPU at efficiency 0.5):
        >>> s = ComputeSpec("x", 1e14, 1e13, 1e12, 100, 0.5, 0.5)
        >>> round(floor_time_s(Kernel("g", "gemm", 1e9, 1e6, 8, 8, 8), s, 0.5) * 1e6, 3)
        20.0
    """
    by_bytes = kern.bytes / spec.hbm_bandwidth_Bps
    if kern.kind == "mem":
        return by_bytes
    return max(kern.flops / (spec.matmul_flops * gemm_eff), by_bytes)


def layer_kernels(h: int, t: int, b: int) -> list[Kernel]:
    """Kernels of one GPT layer on one of ``t`` tensor ranks at micro-batch ``b``: the forward
    twice (recompute) and the backward, fp16."""
    shape = BlockShape(hidden=h, heads=HEADS, seq_len=SEQ, ffn_hidden=4 * h)
    fwd = block_fwd(shape, b, 2, t)
    bwd_in, bwd_w = block_bwd(shape, b, 2, t)
    return fwd + fwd + bwd_in + bwd_w


def lut_tables(path: Path = LUT) -> dict[int, CollectiveTable]:
    """vTrain's measured A100 all-reduce times by communicator size."""
    lut = pd.read_csv(path)
    return {
        int(n): CollectiveTable("allreduce", int(n), tuple(g.bytes.astype(float)),
                                tuple(g.time_us * 1e-6), "vTrain trace/a100 AR LUT")
        for n, g in lut.groupby("gpus")
    }  # fmt: skip


def measured_costs(rows: pd.DataFrame) -> pd.DataFrame:
    """``f`` and ``c`` (seconds) per ``(t, w, b)`` of one hidden size's ``p = 1`` rows (module
    doc), at the smallest ``w`` of each ``t``."""
    d = rows[rows.pipeline_parallel == 1].copy()
    d["m"] = d.global_batch // (d.microbatch_size * d.data_parallel)
    d = d[d.data_parallel == d.groupby("tensor_parallel").data_parallel.transform("min")]
    out = []
    for (t, w), tw in d.groupby(["tensor_parallel", "data_parallel"]):
        slopes = {
            b: {m: np.polyfit(g.layers, g.iteration_time_ms / 1e3, 1)[0]
                for m, g in gb.groupby("m")}
            for b, gb in tw.groupby("microbatch_size")
        }  # fmt: skip
        cs = {}
        for b, sl in slopes.items():
            ms = sorted(sl)
            if len(ms) > 1:
                f = (sl[ms[1]] - sl[ms[0]]) / (ms[1] - ms[0])
                cs[b] = (sl[ms[0]] - ms[0] * f, f)
        c_all = float(np.median([c for c, _ in cs.values()]))
        for b, sl in slopes.items():
            m0 = min(sl)
            c, f = cs.get(b, (c_all, (sl[m0] - c_all) / m0))
            out.append({"t": t, "w": w, "b": b, "c_s": c, "f_s": f})
    return pd.DataFrame(out)


def layer_table(h: int, costs: pd.DataFrame, spec: ComputeSpec, ar: dict) -> pd.DataFrame:
    """Measured ``f`` against the model and the floors (ms), one row per ``(t, b)``."""
    rows = []
    for r in costs.itertuples():
        ks = layer_kernels(h, r.t, r.b)
        tp = TP_ALLREDUCES * ar[r.t].time_s(r.b * SEQ * h * 2) if r.t > 1 else 0.0
        model = sum(kernel_time_s(k, spec, "fp16") for k in ks) + tp
        mamf = sum(floor_time_s(k, spec, spec.matmul_efficiency) for k in ks) + tp
        peak = sum(floor_time_s(k, spec, 1.0) for k in ks) + tp
        rows.append({"h": h, "t": r.t, "b": r.b, "meas_ms": r.f_s * 1e3, "model_ms": model * 1e3,
                     "floor_mamf_ms": mamf * 1e3, "floor_peak_ms": peak * 1e3,
                     "meas/model": r.f_s / model, "floor_mamf/meas": mamf / r.f_s,
                     "floor_peak/meas": peak / r.f_s})  # fmt: skip
    return pd.DataFrame(rows)


def step_table(h: int, costs: pd.DataFrame, spec: ComputeSpec, extra_bytes: float) -> pd.DataFrame:
    """Per-iteration cost per layer at ``w = 1`` against the bytes a step moves (module doc)."""
    rows = []
    for (t, w), g in costs.groupby(["t", "w"]):
        if w != 1:
            continue
        c = float(g.c_s.median())
        params = (12 * h * h + 13 * h) / t
        rows.append({"h": h, "t": t, "c_meas_ms": c * 1e3,
                     "B_per_param_at_peak": c * spec.hbm_bandwidth_Bps / params,
                     "profile_B_per_param": ADAM_BYTES + extra_bytes})  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", nargs="*", default=["dgx-a100-40gb", "dgx-a100-80gb"])
    args = ap.parse_args()
    from sim.framework.megatron_deepspeed import MegatronDeepSpeed

    extra = float(MegatronDeepSpeed.step_extra_bytes.value)
    ar = lut_tables()
    pd.set_option("display.width", 200)
    for name in args.preset:
        spec = load_hardware_spec(name).gpu.compute_spec()
        layers, steps = [], []
        for h in (1024, 2048):
            costs = measured_costs(pd.read_csv(DATA / f"ground_truth_single_h{h}.csv"))
            layers.append(layer_table(h, costs, spec, ar))
            steps.append(step_table(h, costs, spec, extra))
        print(f"== {name}: HBM {spec.hbm_bandwidth_Bps / 1e12:.3f} TB/s, tensor peak "
              f"{spec.matmul_flops / 1e12:.0f} TFLOP/s, MAMF {spec.matmul_efficiency}")  # fmt: skip
        print("per layer and micro-batch (forward, recompute, backward, TP all-reduces):")
        print(pd.concat(layers).round(3).to_string(index=False))
        print("per iteration per layer at w = 1 (optimizer step; no all-reduce):")
        print(pd.concat(steps).round(2).to_string(index=False))
        print()


if __name__ == "__main__":
    main()

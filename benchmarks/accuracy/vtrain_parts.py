"""Which part of vTrain's composed rows carries pipesim's error on them (diagnostic only).

vTrain's rows fit ``T = a + c L + m (e + f L)`` per ``(h, t, p, w, b)`` group
(:mod:`benchmarks.accuracy.vtrain_provenance`); pipesim's predictions of the same rows fit the
same form closely (they are simulated, not composed). This prints, per hidden size:

1. **Part swap** (:func:`swap_errors`): MAPE and signed error as predicted, and with each part of
   the prediction (``a``; ``c L``, the step and the data-parallel reduction per layer; ``m e``,
   per micro-batch outside the layers; ``m f L``, the layers) replaced by the rows' own. A
   part whose swap lowers the MAPE carries error; parts whose swaps move the signed error in
   opposite directions cancel.
2. **Step floor** (:func:`step_floor`): the rows' per-layer step at ``p = 1, w = 1`` (``c``,
   no all-reduce) beside the host time alone of the overflow check that DeepSpeed's
   ``FP16_Optimizer.step`` runs before it (``CheckOverflow.has_overflow_serial``: per
   parameter tensor ``float(x.float().sum())``, two ops and a blocking read;
   microsoft/DeepSpeed@38327e07f ``deepspeed/runtime/fp16/fused_optimizer.py`` l.254-259,
   ``deepspeed/runtime/utils.py`` l.235-239, 272-277), priced with the preset's
   ``host_overhead`` (:meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s`) over the
   block's 8 vectors and 4 matrices. Megatron-DeepSpeed hands apex's ``FusedAdam`` to
   DeepSpeed (``megatron/optimizer/__init__.py`` l.5, 101, 115-116 at f4157bea), which wraps
   it in ``FP16_Optimizer`` (``deepspeed/runtime/engine.py`` l.1541-1565 at 38327e07f). Where
   the rows' whole step is below that check's host time, no cost of that step fits them.
3. **Micro-batch inversions** (:func:`b_inversions`): ``(t, b)`` where the rows' per-layer,
   per-micro-batch time ``f`` at ``b`` exceeds that at ``2 b``. One layer's forward,
   recompute and backward at twice the tokens runs the same ops on twice the data, so no
   mechanism makes it faster; such a ``(t, b)`` cell's error is not a mechanism's.
4. **Head floor** (:func:`head_slopes`): at ``p = 1``, the rows' per-micro-batch part outside
   the layers (``e``) grows with the micro-batch size ``b`` by ``de/db`` ms per sample
   (least-squares slope over ``b``); beside it, what the code runs per sample outside the
   layers, at the datasheet peaks (:func:`head_floor_ms`): the output layer's three GEMMs
   (``parallel_lm_logits`` -> ``linear_with_grad_accumulation_and_async_allreduce``,
   ``megatron/core/tensor_parallel/layers.py`` l.281, 317, 376 at f4157bea), the logits made
   fp32 (``float16_to_fp32``, ``megatron/model/gpt_model.py`` l.438-439) and the
   vocabulary-parallel cross-entropy's passes (``megatron/core/tensor_parallel/
   cross_entropy.py`` l.17-94, 97-126), as :mod:`sim.compute.layers` counts them, over the
   ``V / t`` vocabulary shard (Megatron-DeepSpeed's padding, :func:`sim.runs.vtrain.padded_vocab`).
   A slope below the floor is faster than an A100 can run the code; a slope that does not
   fall with ``t`` as ``V / t`` does is not the head's.
5. **Step bytes** (:func:`step_bytes_floor`): the rows' per-layer step at ``p = 1, w = 1``
   beside one block's update at the datasheet HBM rate, with the fused Adam update's bytes
   alone (:data:`FUSED_UPDATE_BYTES`) and with what ``FP16_Optimizer.step`` moves besides
   (``MegatronDeepSpeed.step_extra_bytes``, ``reduce_extra_bytes``). A step below the second
   is faster than the code's passes can run.

Nothing here feeds pipesim. Run:
``python benchmarks/accuracy/vtrain_parts.py OUT/predictions.csv [OUT2/predictions.csv]``
(``bench_measured_data.py``'s, with ``vtrain-h1024`` and/or ``vtrain-h2048`` rows).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.vtrain_provenance import groups, shared_parts  # noqa: E402
from sim.compute.kernels import Kernel, kernel_time_s  # noqa: E402
from sim.compute.layers import embedding_kernels, head_kernels  # noqa: E402
from sim.compute.megatron_ops import param_tensors  # noqa: E402
from sim.framework.megatron_deepspeed import MegatronDeepSpeed  # noqa: E402
from sim.hardware.gpu_compute import ComputeSpec  # noqa: E402
from sim.hardware.loader import load_hardware_spec  # noqa: E402
from sim.runs.vtrain import VOCAB, padded_vocab  # noqa: E402

NAME = re.compile(r"h(\d+)-L(\d+)-t(\d+)p(\d+)w(\d+)b(\d+)B(\d+)")
RAW = ["hidden", "layers", "tensor_parallel", "pipeline_parallel", "data_parallel",
       "microbatch_size", "global_batch"]  # fmt: skip
KEY = ["t", "p", "w", "b"]
OVERFLOW_CHECK_OPS = 2
"""``x.float()`` and ``.sum()`` before the read (:data:`sim.framework.deepspeed.OVERFLOW_CHECK_OPS`)."""


def read_predictions(paths: list[str]) -> pd.DataFrame:
    """The vTrain rows of ``bench_measured_data.py`` predictions in vTrain's column layout
    (:data:`RAW`) with ``measured_ms`` and ``predicted_ms``."""
    df = pd.concat([pd.read_csv(p) for p in paths])
    df = df[df.source.astype(str).str.startswith("vtrain")]
    k = df.model.str.extract(NAME).astype(int)
    k.columns = RAW
    return k.assign(measured_ms=df.measured_s.to_numpy() * 1e3,
                    predicted_ms=df.predicted_s.to_numpy() * 1e3).reset_index(drop=True)  # fmt: skip


def with_parts(rows: pd.DataFrame) -> pd.DataFrame:
    """One hidden size's rows (:func:`read_predictions`) with ``L``, ``m`` and the parts of
    both sides (``a, c, e, f`` measured; ``a_p, c_p, e_p, f_p`` predicted; :func:`groups`),
    only rows of groups both fits cover."""
    both = []
    for col, suffix in (("measured_ms", ""), ("predicted_ms", "_p")):
        g = groups(rows.assign(iteration_time_ms=rows[col]))
        both.append(g.rename(columns={x: x + suffix for x in "acef"}))
    d = rows.rename(columns=dict(zip(RAW[2:6], KEY, strict=True)))
    d = d.assign(L=d.layers, m=d.global_batch // (d.b * d.w))
    return d.merge(both[0], on=KEY).merge(both[1], on=KEY)


def terms(d: pd.DataFrame, suffix: str) -> dict[str, pd.Series]:
    """The four parts of each row in ms, measured (``suffix`` "") or predicted ("_p"); ``c``
    and ``f`` are per layer of one stage (:func:`~benchmarks.accuracy.vtrain_provenance.fit`),
    so a row of ``p`` stages takes ``L / p`` of them."""
    per_stage = d.L / d.p
    return {"a": d["a" + suffix], "cL": d["c" + suffix] * per_stage,
            "me": d["e" + suffix] * d.m, "mfL": d["f" + suffix] * d.m * per_stage}  # fmt: skip


def swap_errors(d: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """``{part: (MAPE %, signed %)}`` of the predictions of ``d`` (:func:`with_parts`) as they
    are (``"as predicted"``) and with each part replaced by the rows' own.

    Example (the prediction's layers 10 % slow, the rest exact: swapping them clears it):
        >>> d = pd.DataFrame({"L": [12], "p": [1], "m": [2], "measured_ms": [100.0],
        ...     "a": [4.0], "c": [1.0], "e": [6.0], "f": [3.0], "a_p": [4.0], "c_p": [1.0],
        ...     "e_p": [6.0], "f_p": [3.3]})
        >>> d["predicted_ms"] = 4 + 12 + 12 + 2 * 3.3 * 12
        >>> {k: round(v[0], 2) for k, v in swap_errors(d).items()}
        {'as predicted': 7.2, 'a': 7.2, 'cL': 7.2, 'me': 7.2, 'mfL': 0.0}
    """
    meas, pred = terms(d, ""), terms(d, "_p")
    out = {"as predicted": d.predicted_ms}
    out |= {k: d.predicted_ms - pred[k] + meas[k] for k in meas}
    errs = {k: v / d.measured_ms - 1 for k, v in out.items()}
    return {k: (float(e.abs().mean() * 100), float(e.mean() * 100)) for k, e in errs.items()}


def step_floor(parts: pd.DataFrame, host_s: float) -> pd.DataFrame:
    """Per ``t`` at ``p = 1, w = 1``: the rows' per-layer step (``c``, ms, mean over ``b``)
    beside ``host_s`` (the serial overflow check's host seconds of one block) in ms."""
    sel = parts[(parts.p == 1) & (parts.w == 1)]
    out = sel.groupby("t").c.mean().rename("rows_step_ms").reset_index()
    return out.assign(check_host_ms=host_s * 1e3,
                      rows_below_check=out.rows_step_ms < host_s * 1e3)  # fmt: skip


FUSED_UPDATE_BYTES = 28.0
"""Bytes per parameter of the fused Adam update with 16-bit weights and gradients and fp32
master weights and moments: ``grad + 2 x optimizer + weight`` = 2 + 2 x 12 + 2
(:func:`sim.memory.states.optimizer_step_s`)."""


def block_params(h: int, t: int) -> float:
    """Parameters of one GPT block (GeLU MLP of ``4h``) on one of ``t`` tensor ranks: the
    four weight matrices ``12 h^2 / t``, the column-parallel biases ``7 h / t`` (QKV, fc1), the
    replicated ones ``6 h`` (proj and fc2 biases, two layer norms' weight and bias).

    Example:
        >>> block_params(1024, 2)
        6301184.0
    """
    return (12 * h * h + 7 * h) / t + 6 * h


def step_bytes_floor(
    parts: pd.DataFrame, h: int, peak_Bps: float, code_bytes: float
) -> pd.DataFrame:
    """Per ``t`` at ``p = 1, w = 1``: the rows' per-layer step (``c``, ms, mean over ``b``)
    beside one block's update at ``peak_Bps`` with the fused update's bytes alone
    (:data:`FUSED_UPDATE_BYTES`, ``adam_floor_ms``) and with ``code_bytes`` per parameter
    (what the framework's step moves: ``code_floor_ms``).

    Example (t 2, h 1024: 6,301,184 parameters x 28 B at 1555 GB/s = 0.1135 ms; x 78 B = 0.3161):
        >>> parts = pd.DataFrame({"t": [2], "p": [1], "w": [1], "b": [1], "c": [0.134]})
        >>> step_bytes_floor(parts, 1024, 1555e9, 78.0).round(4).values.tolist()
        [[2.0, 0.134, 0.1135, 0.3161]]
    """
    sel = parts[(parts.p == 1) & (parts.w == 1)]
    out = sel.groupby("t").c.mean().rename("rows_step_ms").reset_index()
    n = out.t.map(lambda t: block_params(h, int(t)))
    return out.assign(adam_floor_ms=n * FUSED_UPDATE_BYTES / peak_Bps * 1e3,
                      code_floor_ms=n * code_bytes / peak_Bps * 1e3)  # fmt: skip


def b_inversions(shared: pd.DataFrame) -> pd.DataFrame:
    """The ``(t, b)`` of :func:`~benchmarks.accuracy.vtrain_provenance.shared_parts` whose
    ``f`` (ms) exceeds ``f`` at ``(t, 2 b)``.

    Example:
        >>> s = pd.DataFrame({"t": [4, 4, 4], "b": [1, 2, 4], "f_ms": [3.0, 2.8, 5.0]})
        >>> b_inversions(s)[["t", "b", "f_ms", "f_2b_ms"]].values.tolist()
        [[4.0, 1.0, 3.0, 2.8]]
    """
    twice = shared.assign(b=shared.b // 2).rename(columns={"f_ms": "f_2b_ms"})
    both = shared.merge(twice[twice.b > 0][["t", "b", "f_2b_ms"]], on=["t", "b"])
    return both[both.f_ms > both.f_2b_ms]


def _outside_layers(b: int, s: int, h: int, t: int) -> list[Kernel]:
    """One micro-batch's kernels outside the layers on one of ``t`` tensor ranks, fp16: the
    embedding and the head with Megatron's fp32 cross-entropy (:mod:`sim.compute.layers`)."""
    vocab = padded_vocab(VOCAB, t) // t
    fwd, bwd_in, bwd_w = head_kernels("gpt", b, s, h, vocab, 2)
    emb_fwd, emb_bwd = embedding_kernels("gpt", b, s, h, vocab, 2)
    return [*emb_fwd, *fwd, *bwd_in, *bwd_w, *emb_bwd]


def head_floor_ms(h: int, t: int, peak_flops: float, peak_Bps: float, s: int = 1024) -> float:
    """Milliseconds per sample (the growth from ``b = 1`` to ``b = 2``) of the work outside the
    layers (:func:`_outside_layers`) with each GEMM at ``max(flops / peak_flops, bytes /
    peak_Bps)`` and each memory-bound kernel at ``bytes / peak_Bps``: no launch overhead, no
    wave quantization, no lost bandwidth.

    Example (``h`` 1024, ``t`` 8: ``V / t`` = 6400; three GEMMs of ``2 x 1024 x 6400 x 1024``
    FLOPs = 40.27 GFLOP at 312 TFLOP/s = 0.1290 ms; 52 bytes per logit (6 + 4 + 8 + 8 + 4 + 8
    forward, 8 + 6 backward) of 1024 x 6400 = 340.8 MB and the norm's and embedding's
    (2 + 3 + 2 + 1) x 1024 x 1024 x 2 + 8 x 1024 = 16.8 MB, per sample, at 1555 GB/s = 0.2300 ms):
        >>> round(head_floor_ms(1024, 8, 312e12, 1555e9), 4)
        0.359
    """

    def floor_s(k: Kernel) -> float:
        gemm_s = max(k.flops / peak_flops, k.bytes / peak_Bps)
        return gemm_s if k.kind == "gemm" else k.bytes / peak_Bps

    one, two = (sum(floor_s(k) for k in _outside_layers(b, s, h, t)) for b in (1, 2))
    return (two - one) * 1e3


def head_slopes(parts: pd.DataFrame, h: int, spec: ComputeSpec, s: int = 1024) -> pd.DataFrame:
    """Per ``t`` at ``p = 1``: the rows' ``de/db`` (ms per sample, least squares over ``b``,
    every ``w``), :func:`head_floor_ms` at ``spec``'s datasheet peaks (``floor_ms``), pipesim's
    kernel model of the same kernels (``model_ms``) and whether the rows sit below the floor."""
    sel = parts[parts.p == 1]
    out = []
    for t, g in sel.groupby("t"):
        slope = float(np.polyfit(g.b, g.e, 1)[0])
        model = [sum(kernel_time_s(k, spec, "fp16") for k in _outside_layers(b, s, h, int(t)))
                 for b in (1, 2)]  # fmt: skip
        floor = head_floor_ms(h, int(t), spec.matmul_flops, spec.hbm_bandwidth_Bps, s)
        out.append({"t": t, "rows_de_db_ms": slope, "floor_ms": floor,
                    "model_ms": (model[1] - model[0]) * 1e3, "rows_below_floor": slope < floor})  # fmt: skip
    return pd.DataFrame(out)


def check_host_s(preset: str) -> float:
    """Host seconds of the serial overflow check over one transformer block's parameter
    tensors on ``preset``'s ``host_overhead`` (0 without one)."""
    spec = load_hardware_spec(preset).host_overhead
    if spec is None:
        return 0.0
    vectors, matrices = param_tensors("block")
    return spec.overhead().serial_reads_s(vectors, matrices, OVERFLOW_CHECK_OPS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("predictions", nargs="+", help="bench_measured_data.py predictions.csv")
    ap.add_argument("--preset", default="dgx-a100-40gb", help="host_overhead for the check")
    args = ap.parse_args()
    rows, host_s = read_predictions(args.predictions), check_host_s(args.preset)
    pd.set_option("display.width", 200)
    for h, g in rows.groupby("hidden"):
        d = with_parts(g)
        print(f"== h{h}: {len(d)} of {len(g)} rows in fitted groups; MAPE (signed) %")
        for k, (mape, signed) in swap_errors(d).items():
            print(f"  {k + (' as rows' if k != 'as predicted' else ''):>14}: "
                  f"{mape:6.2f} ({signed:+.2f})")  # fmt: skip
        parts = groups(g.assign(iteration_time_ms=g.measured_ms))
        print(f"== h{h}: the rows' per-layer step at p 1, w 1 against the overflow check's host")
        print(step_floor(parts, host_s).round(3).to_string(index=False))
        spec = load_hardware_spec(args.preset).gpu.compute_spec()
        code = FUSED_UPDATE_BYTES + MegatronDeepSpeed.step_extra_bytes.value
        code += MegatronDeepSpeed.reduce_extra_bytes.value[0]
        print(f"== h{h}: the rows' per-layer step at p 1, w 1 against its bytes at HBM peak "
              f"(fused update {FUSED_UPDATE_BYTES:g} B/param; the code's {code:g})")  # fmt: skip
        print(step_bytes_floor(parts, int(h), spec.hbm_bandwidth_Bps, code).round(3)
              .to_string(index=False))  # fmt: skip
        print(f"== h{h}: f at b above f at 2 b (ms)")
        inv = b_inversions(shared_parts(parts))[["t", "b", "f_ms", "f_2b_ms"]]
        print(inv.round(3).to_string(index=False))
        print(f"== h{h}: per sample outside the layers at p 1: rows' de/db, the code's floor")
        print(head_slopes(parts, int(h), spec).round(3).to_string(index=False))


if __name__ == "__main__":
    main()

"""The answer of a ``sim run``: each model's winner (or every fitting row) with tokens/s per GPU,
TFLOP/s per GPU and MFU.

Run: ``python benchmarks/experiment_answers.py experiments/NAME.yaml RESULTS_DIR [--all]``
(``RESULTS_DIR``: the ``--out`` of ``sim run``).

Model FLOPs per sequence: 3 x the trace's forward FLOPs at its micro-batch size, per sample
(every GEMM and the attention core, causal, as :mod:`sim.compute` counts them; the backward
twice the forward: Narayanan et al. SC'21 §5.1's convention, recomputation not counted). TFLOP/s
per GPU: that x samples/s over the row's GPUs (``stages x dp_width x tensor_parallel x
context_parallel``). MFU: TFLOP/s per GPU over the GPU's dense 16-bit peak (the hardware
preset's ``peak_flops``, its datasheet figure).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from sim.config import load_experiment
from sim.parallel.layout import ParallelLayout
from sim.point.experiment import prepare


def answers(experiment: str, results: str, every: bool = False) -> pd.DataFrame:
    """One row per model's winner (every fitting row with ``every``)."""
    prep = prepare(load_experiment(experiment), experiment)
    df = pd.read_csv(Path(results) / "results.csv")
    df = df[df["fits"].astype(bool) & df["error"].isna()]
    peak = prep.topology.gpus[0].peak_flops
    out = []
    for model, rows in df.groupby("model"):
        trace = prep.traces[str(model)]
        per_sample = 3 * sum(x.flops or 0.0 for x in trace.layers) / trace.microbatch_size
        seq = int((trace.provenance.get("model_shape") or {}).get("seq_len", 0))
        rows = rows if every else rows.nlargest(1, "throughput_samples_per_s")
        for r in rows.itertuples():
            gpus = ParallelLayout.from_flat(r._asdict()).gpus
            tflops = per_sample * r.throughput_samples_per_s / gpus / 1e12
            out.append(
                {
                    "model": model,
                    "layout": ParallelLayout.from_flat(r._asdict()).describe(),
                    "b": r.microbatch_size,
                    "m": r.microbatches,
                    "policy": r.memory_policy,
                    "iteration_s": round(r.iteration_time_s, 3),
                    "tokens/s/GPU": round(seq * r.throughput_samples_per_s / gpus),
                    "TFLOP/s/GPU": round(tflops, 1),
                    "MFU %": round(100 * tflops * 1e12 / peak, 1),
                    "peak GiB": round(r.peak_memory_bytes / 2**30, 1),
                }
            )
    return pd.DataFrame(out)


if __name__ == "__main__":
    table = answers(sys.argv[1], sys.argv[2], "--all" in sys.argv[3:])
    print(table.to_string(index=False))

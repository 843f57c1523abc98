"""The answer of a ``sim run``: each model's winner (or every fitting row) with tokens/s per GPU,
TFLOP/s per GPU and MFU.

Run: ``python benchmarks/answers/experiment_answers.py experiments/NAME.yaml RESULTS_DIR [--all]``
(``RESULTS_DIR``: the ``--out`` of ``sim run``; ``sim run`` prints the winner's TFLOP/s and MFU
too).

TFLOP/s per GPU and MFU are results.csv's ``flops_per_s_per_gpu`` and ``mfu``: Megatron-LM's
model FLOPs (``num_floating_point_operations``, :mod:`sim.compute.model_flops`: recomputation
not counted) over the iteration time, the row's GPUs and the GPU's dense 16-bit datasheet
peak. Tokens/s per GPU: ``seq_len x samples/s / GPUs`` (the trace's sequence length).
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
    df = pd.read_csv(Path(results) / "results.csv")
    df = df[df["fits"].astype(bool) & df["error"].isna()]
    seqs = _seq_lens(experiment)
    out = []
    for model, rows in df.groupby("model"):
        rows = rows if every else rows.nlargest(1, "throughput_samples_per_s")
        for r in rows.itertuples():
            lay = ParallelLayout.from_flat(r._asdict())
            out.append(
                {
                    "model": model,
                    "layout": lay.describe(),
                    "b": r.microbatch_size,
                    "m": r.microbatches,
                    "policy": r.memory_policy,
                    "iteration_s": round(r.iteration_time_s, 3),
                    "tokens/s/GPU": round(
                        seqs.get(str(model), 0) * r.throughput_samples_per_s / lay.gpus
                    ),
                    "TFLOP/s/GPU": round(r.flops_per_s_per_gpu / 1e12, 1),
                    "MFU %": round(100 * r.mfu, 1),
                    "peak GiB": round(r.peak_memory_bytes / 2**30, 1),
                }
            )
    return pd.DataFrame(out)


def _seq_lens(experiment: str) -> dict[str, int]:
    """Each model's sequence length (its trace's model shape)."""
    prep = prepare(load_experiment(experiment), experiment)
    out = {}
    for name, trace in prep.traces.items():
        shape = (trace.provenance or {}).get("model_shape") or {}
        out[name] = int(shape.get("seq_len", 0))
    return out


if __name__ == "__main__":
    table = answers(sys.argv[1], sys.argv[2], "--all" in sys.argv[3:])
    print(table.to_string(index=False))

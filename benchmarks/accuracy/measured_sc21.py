"""Megatron-LM's SC'21 weak-scaling runs (Table 1), predicted by pipesim: TFLOP/s per GPU.

Data: ``measurements/megatron-sc21/table1.csv`` (Narayanan et al., SC'21, arXiv:2104.04473,
Table 1, with the micro-batch sizes and DDP implementation of NVIDIA/Megatron-LM
``examples/sc21/run_table_1.sh``; provenance in its README). Each run of at most
:data:`MAX_SERVERS` DGX A100 servers becomes the configuration it measured: an analytic GPT
trace (sequence 2048, vocabulary 51,200, fp16) timed by the kernel model on
``Nx-dgx-a100-80gb``, ``t``, ``p``, ``w = n / (t p)``, micro-batch ``b``, ``m = B / (b w)``,
``recompute:full``, the blocks as that Megatron-LM and PyTorch 1.8 run them
(:data:`sim.trace.shipped.SC21_LINEAR_BIAS`, ``SC21_DROPOUT_ADD``), 1F1B (interleaved 1F1B
with the script's ``virtual_stages`` chunks per rank where ``--num-layers-per-virtual-pipeline-stage`` is set: 76B-530B), ``framework: megatron-lm-torch-ddp`` for ``--DDP-impl torch`` runs and
``megatron-lm`` for ``local`` ones. Both the measured and the predicted TFLOP/s per GPU use the
paper's eq. 3, ``F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` FLOPs per iteration.
Nothing here is fitted: the rows are what the model predicts.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from sim.config import parse_experiment
from sim.hardware.loader import load_hardware
from sim.plan.point_row import point_row
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.trace.generator import preset_gpu, transformer_trace
from sim.trace.shipped import SC21_DROPOUT_ADD, SC21_LINEAR_BIAS

ROOT = Path(__file__).resolve().parents[2]
SC21 = ROOT / "measurements" / "megatron-sc21" / "table1.csv"
SEQ = 2048
VOCAB = 51200
"""The paper §5.1: "All models use a vocabulary size of 51,200 ... and a sequence length of
2048"."""
GPUS_PER_SERVER = 8
MAX_SERVERS = 384
"""Largest cluster simulated: 384 DGX A100 (3,072 GPUs, every row of Table 1), on the rail-optimised HDR fat tree of the preset (sim.hardware.fabric)."""
FRAMEWORKS = {"torch": "megatron-lm-torch-ddp", "local": "megatron-lm"}
"""``--DDP-impl`` of ``run_table_1.sh`` -> pipesim framework profile."""


def eq3_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs of one iteration, recompute included: the paper's eq. 3,
    ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``."""
    return (
        96.0
        * batch
        * seq
        * layers
        * hidden**2
        * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    )


def tflops_per_gpu(row: pd.Series, iteration_s: float) -> float:
    """TFLOP/s per GPU of an iteration of ``iteration_s`` seconds (eq. 3 over all GPUs)."""
    f = eq3_flops(int(row.global_batch), SEQ, int(row.layers), int(row.hidden), VOCAB)
    return f / (iteration_s * int(row.gpus)) / 1e12


def load_sc21(path: Path = SC21) -> pd.DataFrame:
    """The measured rows with ``data_parallel`` and ``microbatches`` added."""
    df = pd.read_csv(path)
    df["data_parallel"] = df.gpus // (df.tensor_parallel * df.pipeline_parallel)
    df["microbatches"] = df.global_batch // (df.microbatch_size * df.data_parallel)
    return df


def predict_sc21(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``predicted_tflops`` and ``predicted_s`` (nan, with ``note``, for runs not
    simulated)."""
    out = []
    for row in df.itertuples(index=False):
        servers = row.gpus // GPUS_PER_SERVER
        if servers > MAX_SERVERS:
            out.append({"predicted_s": math.nan, "note": f"{servers} servers: not simulated"})
            continue
        out.append(_predict_one(row, servers))
    res = pd.concat([df.reset_index(drop=True), pd.DataFrame(out)], axis=1)
    res["predicted_tflops"] = [
        tflops_per_gpu(r, r.predicted_s) if r.predicted_s == r.predicted_s else math.nan
        for r in res.itertuples(index=False)
    ]
    res["error"] = res.predicted_tflops / res.tflops_per_gpu - 1
    return res


def _predict_one(row, servers: int) -> dict:
    hardware = f"{servers}x-dgx-a100-80gb"
    name = f"gpt-{row.params_b}b"
    framework = FRAMEWORKS[row.ddp]
    trace = transformer_trace(
        "gpt",
        name=name,
        layers=int(row.layers),
        hidden=int(row.hidden),
        heads=int(row.heads),
        seq_len=SEQ,
        vocab=VOCAB,
        microbatch_size=1,
        dtype="fp16",
        gpu=preset_gpu("dgx-a100-80gb"),
        linear_bias=SC21_LINEAR_BIAS,
        dropout_add=SC21_DROPOUT_ADD,
    )
    exp = parse_experiment(
        {
            "name": "sc21",
            "hardware": hardware,
            "models": [{"name": name, "trace": name}],
            "training": {"global_batch": int(row.global_batch), "dtype": "fp16"},
            "options": {"partition": "uniform"},
            "framework": framework,
        }
    )
    virtual = int(getattr(row, "virtual_stages", 1))
    point = PointConfig(
        model=name,
        schedule="interleaved_1f1b" if virtual > 1 else "1f1b",
        virtual_stages=virtual,
        stages=int(row.pipeline_parallel),
        dp_width=int(row.data_parallel),
        microbatch_size=int(row.microbatch_size),
        tensor_parallel=int(row.tensor_parallel),
        microbatches=int(row.microbatches),
        memory_policy="recompute:full",
        global_batch=int(row.global_batch),
        framework=framework,
    )
    prep = Prepared(exp, "<sc21>", load_hardware(hardware), {name: trace})
    r = point_row(prep, point)[0]
    ok = r.iteration_time_s is not None and r.fits
    return {
        "predicted_s": r.iteration_time_s if ok else math.nan,
        "note": "" if ok else (r.error or "does not fit")[:80],
    }


def sc21_table(res: pd.DataFrame) -> str:
    """The printed table: measured vs predicted TFLOP/s per GPU per run."""
    cols = ["params_b", "tensor_parallel", "pipeline_parallel", "gpus", "global_batch"]
    cols += ["microbatch_size", "tflops_per_gpu", "predicted_tflops", "error", "note"]
    show = res[cols].assign(error=res.error.map(lambda e: f"{e:+.1%}" if e == e else "-"))
    show = show.rename(
        columns={
            "params_b": "B params",
            "tensor_parallel": "t",
            "pipeline_parallel": "p",
            "global_batch": "batch",
            "microbatch_size": "b",
            "tflops_per_gpu": "measured TF/s/GPU",
            "predicted_tflops": "predicted",
        }
    )
    return show.to_string(index=False, float_format=lambda x: f"{x:.3g}", na_rep="-")

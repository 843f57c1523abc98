"""The simulator against measured ground truth (``measurements/<gpu>/``, issue 8), without a GPU.

A ground-truth folder is what ``scripts/gpu_ground_truth.sh`` wrote
(:mod:`backends.torch.calibrate.ground_truth`): ``provenance.json`` (``kind: gpu_ground_truth``),
``hardware.yaml`` (calibrated), ``layers.csv`` (per-layer profiles), ``grid-trace.csv/.yaml``
and ``single_rank.csv`` (single-rank replays). Two comparisons:

* :func:`layer_comparison`: each profiled block's forward and backward time against the
  analytic generator's kernel model (``sim.trace.generator.transformer_trace``) on the
  calibrated GPU, same shape, dtype and attention.
* :func:`single_rank_comparison`: each replayed rank's iteration time and peak memory against
  :func:`sim.validate.predict.predict_single_rank` of the same configuration (the grid trace, the
  calibrated GPU repeated to ``p`` GPUs: only the rank's own work is predicted, so the assumed
  GPU-to-GPU links do not enter).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.config import parse_experiment
from sim.hardware.loader import load_hardware
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.simulate import resolve
from sim.trace.generator import transformer_trace
from sim.validate.predict import predict_single_rank

ASSUMED_GPU_LINK = {"bandwidth": "450 GB/s", "latency": "5 us", "kind": "nvlink"}
"""GPU-to-GPU links of the expanded hardware (not measured: one GPU was lent)."""


def find_ground_truth(root: str | Path = "measurements", device: str = "cuda") -> list[Path]:
    """Folders under ``root`` whose ``provenance.json`` says ``gpu_ground_truth`` on ``device``."""
    out = []
    for prov in sorted(Path(root).glob("*/provenance.json")):
        info = json.loads(prov.read_text())
        if info.get("kind") == "gpu_ground_truth" and str(info.get("device", "")).startswith(
            device
        ):
            out.append(prov.parent)
    return out


def layer_comparison(folder: Path) -> pd.DataFrame:
    """Measured vs predicted seconds of every profiled block (``layers.csv``).

    Returns:
        One row per block: shape, ``measured_fwd_s``, ``predicted_fwd_s``, ``measured_bwd_s``,
        ``predicted_bwd_s``, ``fwd_ratio`` and ``bwd_ratio`` (predicted / measured).
    """
    gpu = load_hardware(str(folder / "hardware.yaml")).gpus[0].compute
    df = pd.read_csv(folder / "layers.csv")
    rows = []
    for r in df[(df.status == "ok") & df.layer.str.startswith("block")].itertuples():
        trace = transformer_trace("gpt", name="x", layers=1, hidden=int(r.hidden),
                                  heads=int(r.heads), seq_len=int(r.seq_len), vocab=int(r.vocab),
                                  microbatch_size=int(r.microbatch_size), dtype=str(r.dtype),
                                  gpu=gpu, attention=str(r.attention))  # fmt: skip
        block = trace.layers[1]
        rows.append(dict(hidden=r.hidden, seq_len=r.seq_len, attention=r.attention,
                         microbatch_size=r.microbatch_size, measured_fwd_s=r.fwd_s,
                         predicted_fwd_s=block.fwd_s, measured_bwd_s=r.bwd_s,
                         predicted_bwd_s=block.bwd_s, fwd_ratio=block.fwd_s / r.fwd_s,
                         bwd_ratio=block.bwd_s / r.bwd_s))  # fmt: skip
    return pd.DataFrame(rows)


def expanded_hardware(folder: Path, gpus: int) -> dict[str, Any]:
    """The calibrated one-GPU ``hardware.yaml`` repeated to ``gpus`` GPUs (host links copied
    from ``gpu0``'s, a chain of :data:`ASSUMED_GPU_LINK` between neighbours)."""
    hw = yaml.safe_load((folder / "hardware.yaml").read_text())
    host_links = [lk for lk in hw["links"] if "gpu0" in (lk["a"], lk["b"]) and "cpu0" in (lk["a"], lk["b"])]  # fmt: skip
    links = []
    for g in range(gpus):
        for lk in host_links:
            links.append({k: (f"gpu{g}" if v == "gpu0" else v) for k, v in lk.items()})
        if g + 1 < gpus:
            links.append({"a": f"gpu{g}", "b": f"gpu{g + 1}", **ASSUMED_GPU_LINK})
    return {**hw, "num_gpus": gpus, "gpu_hosts": ["cpu0"] * gpus, "links": links}


def single_rank_comparison(folder: Path) -> pd.DataFrame:
    """Measured vs predicted iteration time and peak of every replayed rank (``single_rank.csv``).

    Returns:
        The measured rows with ``predicted_iteration_s``, ``predicted_peak_bytes`` (tensors),
        ``predicted_device_peak_bytes``, ``time_ratio`` (predicted / measured) and
        ``memory_error`` ((predicted - measured) / measured) added; rows not ``ok`` are dropped.
    """
    df = pd.read_csv(folder / "single_rank.csv")
    df = df[df.status == "ok"].reset_index(drop=True)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        hw = Path(tmp) / "hardware.yaml"
        hw.write_text(yaml.safe_dump(expanded_hardware(folder, int(df.stages.max()))))
        exp = {
            "name": "ground-truth",
            "hardware": str(hw),
            "models": [
                {"name": "grid", "trace": str(folder / "grid-trace.csv"), "global_batch": 1}
            ],
            "training": {"optimizer": "sgd"},
            "options": {"partition": "uniform"},
            "sweep": {"schedule": "gpipe", "stages": 1, "microbatch_size": 1},
        }
        prep = prepare(parse_experiment(exp), str(Path(tmp) / "exp.yaml"))
        base = expand(prep)[0][0]
        for r in df.itertuples():
            m, b = int(r.microbatches), int(r.microbatch_size)
            point = base.model_copy(update=dict(schedule=r.schedule, stages=int(r.stages),
                                                microbatches=m, microbatch_size=b,
                                                memory_policy=r.memory_policy, global_batch=m * b))  # fmt: skip
            res = resolve(prep.exp, point, prep.topology, prep.traces["grid"])
            out.append(predict_single_rank(res, int(r.rank)))
    pred = pd.DataFrame(out)
    df = pd.concat([df, pred.drop(columns=["gpu"])], axis=1)
    df["time_ratio"] = df.predicted_iteration_s / df.measured_iteration_s
    df["memory_error"] = [
        (p - m) / m if m else math.nan
        for p, m in zip(df.predicted_peak_bytes, df.measured_peak_bytes, strict=True)
    ]
    return df

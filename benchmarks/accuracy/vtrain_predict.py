"""Measured vTrain rows predicted by pipesim, for ``bench_measured.py``: each row becomes the
configuration it measured (an analytic GPT trace timed by the kernel model, ``t``, ``p``, ``w``,
``b``, ``m = B / (b w)``, 1F1B) run as Megatron-DeepSpeed runs it (:mod:`sim.framework`), on
the fewest servers of the hardware that hold it; a row over one server runs with vTrain's
cluster network set over the preset's (:data:`sim.runs.vtrain.MULTI_NODE_OVERLAY`, 800 Gb/s per
node) unless ``cluster_overlay=""``. Nothing here is fitted.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sim.config import parse_experiment
from sim.errors import InputError
from sim.framework.registry import get_framework
from sim.hardware.loader import is_preset, load_hardware
from sim.hardware.overlay import bundled_overlay, with_overlays
from sim.memory.registry import parse_policy
from sim.plan.point_row import point_row
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.runs.vtrain import MULTI_NODE_OVERLAY
from sim.trace.generator import preset_gpu, transformer_trace

VOCAB = 50257
"""Megatron's GPT-2 BPE vocabulary: vTrain's configs do not state one (assumption)."""
FRAMEWORK = "megatron-deepspeed"
"""vTrain's data/README.md: every point collected with Megatron-DeepSpeed; its configs say
``use_gradient_bucket: false`` (all-reduce after the backward), ``use_checkpoint: true``,
``pipeline_scheduling: 1f1b`` (measurements/vtrain/README.md)."""
POLICY = "recompute:full"
"""vTrain's configs say ``use_checkpoint: true``: every transformer layer checkpointed."""


def check_options(hardware: str, framework: str, policy: str, cluster_overlay: str = "") -> None:
    """``--hardware``, ``--framework``, ``--memory-policy`` and ``--cluster-overlay`` before any
    row is simulated.

    Raises:
        InputError: naming the option.
    """
    try:
        get_framework(framework)
    except KeyError as exc:
        raise InputError(str(exc.args[0]), field="--framework") from None
    try:
        parse_policy(policy)
    except (KeyError, ValueError) as exc:
        raise InputError(str(exc.args[0]), field="--memory-policy") from None
    try:
        topo = load_hardware(hardware, field="--hardware")
    except InputError as exc:
        if exc.field == "--hardware":
            raise
        raise InputError(str(exc), field="--hardware") from None
    if topo.gpus[0].compute is None:
        raise InputError(f"{hardware} has no GPU compute model (a CPU description?)",
                         field="--hardware")  # fmt: skip
    if cluster_overlay:
        try:
            bundled_overlay(cluster_overlay)
        except InputError as exc:
            raise InputError(exc.message, field="--cluster-overlay") from None


def row_hardware(
    hardware: str | dict, gpus: int, per_server: int, cluster_overlay: str = ""
) -> str | dict | None:
    """The hardware a row of ``gpus`` GPUs runs on: ``hardware`` itself when one server holds
    them, else ``Nx-<preset>`` with the fewest servers of ``per_server`` GPUs that do (its
    network from the preset; :mod:`sim.hardware.cluster`) with the shipped overlay
    ``cluster_overlay`` set over it ("" none; :func:`sim.hardware.overlay.with_overlays`), or
    ``None`` when ``hardware`` is a description file (``sim calibrate``'s) and not a preset
    that ``Nx-`` can repeat.

    Raises:
        InputError: no shipped overlay named ``cluster_overlay``.

    Example:
        >>> row_hardware("dgx-a100-40gb", 64, 8, "vtrain-a100-cluster")["network"]["nic_bandwidth"]
        '12.5 GB/s'
    """
    if gpus <= per_server:
        return hardware
    base = hardware["base"] if isinstance(hardware, dict) else hardware
    if not is_preset(base):
        return None
    servers = -(-gpus // per_server)
    if isinstance(hardware, dict):
        multi: str | dict = {**hardware, "base": f"{servers}x-{hardware['base']}"}
    else:
        multi = f"{servers}x-{hardware}"
    if not cluster_overlay:
        return multi
    if isinstance(multi, dict):
        return with_overlays(
            multi["base"], cluster_overlay, {k: v for k, v in multi.items() if k != "base"}
        )
    return with_overlays(multi, cluster_overlay)


def model_hardware(preset: str) -> dict:
    """``preset`` without its measured ``collectives:`` tables, so that NCCL's cost model times
    every collective (``--collectives model``)."""
    return {"base": preset, "name": f"{preset}-nccl-model", "collectives": []}


def predict(
    df: pd.DataFrame,
    hardware: str,
    framework: str = FRAMEWORK,
    policy: str = POLICY,
    collectives: str = "preset",
    cluster_overlay: str = MULTI_NODE_OVERLAY,
) -> pd.DataFrame:
    """``df`` with ``predicted_ms``, ``fits`` and ``error_text`` (one simulation per row),
    each row run as ``framework`` runs it (:mod:`sim.framework`); ``collectives="preset"``
    times collectives as the preset does (the DGX A100 presets carry vTrain's measured
    all-reduce tables for 2-8 GPUs of one server), ``"model"`` by NCCL's cost model alone
    (:func:`model_hardware`); rows over one server get ``cluster_overlay`` (vTrain's
    800 Gb/s per node; "" the preset's own network, :func:`row_hardware`)."""
    gpu = preset_gpu(hardware)
    base: str | dict = model_hardware(hardware) if collectives == "model" else hardware
    per_server = load_hardware(base).num_gpus
    topos: dict[int, Any] = {}
    traces = {}
    out = []
    for rec in df.itertuples(index=False):
        hw = row_hardware(base, int(rec.gpus), per_server, cluster_overlay)
        if hw is None:
            why = f"{rec.gpus} GPUs: more than the {per_server} of {hardware} (not a preset)"
            out.append({"predicted_ms": math.nan, "fits": False, "error_text": why})
            continue
        servers = -(-int(rec.gpus) // per_server)
        if servers not in topos:
            try:
                topos[servers] = load_hardware(hw)
            except InputError as exc:  # no multi-server form of this hardware
                topos[servers] = str(exc)
        topo = topos[servers]
        if isinstance(topo, str):
            out.append({"predicted_ms": math.nan, "fits": False, "error_text": topo})
            continue
        name = f"gpt-h{rec.hidden}-a{rec.heads}-L{rec.layers}-s{rec.seq_len}"
        if name not in traces:
            traces[name] = transformer_trace(
                "gpt",
                name=name,
                layers=int(rec.layers),
                hidden=int(rec.hidden),
                heads=int(rec.heads),
                seq_len=int(rec.seq_len),
                vocab=VOCAB,
                microbatch_size=1,
                dtype="fp16",
                gpu=gpu,
            )
        exp = parse_experiment(
            {
                "name": "measured",
                "hardware": hw,
                "models": [{"name": name, "trace": name}],
                "training": {"global_batch": int(rec.global_batch), "dtype": "fp16"},
                "options": {"partition": "uniform"},
                "framework": framework,
            }
        )
        point = PointConfig(
            model=name,
            schedule="1f1b",
            stages=int(rec.pipeline_parallel),
            dp_width=int(rec.data_parallel),
            microbatch_size=int(rec.microbatch_size),
            tensor_parallel=int(rec.tensor_parallel),
            microbatches=int(rec.microbatches),
            memory_policy=policy,
            global_batch=int(rec.global_batch),
            framework=framework,
        )
        row = point_row(Prepared(exp, "<measured>", topo, {name: traces[name]}), point)[0]
        t = row.iteration_time_s
        out.append(
            {
                # a measured row ran: its time is predicted even where pipesim's memory model
                # says it does not fit (``fits`` keeps that verdict; vTrain does not say 40 or
                # 80 GB, and a false no-fit must not drop a row from the time MAPE)
                "predicted_ms": t * 1e3 if t is not None else math.nan,
                "fits": row.fits,
                "error_text": row.error,
            }
        )
    res = pd.concat([df.reset_index(drop=True), pd.DataFrame(out)], axis=1)
    res["error"] = res.predicted_ms / res.iteration_time_ms - 1
    return res

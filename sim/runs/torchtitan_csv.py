"""A measured-data CSV row whose framework is torchtitan, as the torchtitan job config it
describes (:func:`sim.runs.torchtitan.read_torchtitan_config`), so that it runs with the
torchtitan profile and FSDP2 rather than as Megatron-LM flags.

The columns map onto the job config (pytorch/torchtitan@238fa9953e
``torchtitan/config/job_config.py``): ``tp``, ``pp``, ``cp``, ``ep`` -> ``parallelism.
<x>_parallel_degree``; ``fsdp`` (the FSDP2 shard width; empty or 0: every data-parallel rank,
torchtitan's ``data_parallel_shard_degree = -1``) and ``dp / fsdp`` ->
``data_parallel_shard_degree`` / ``data_parallel_replicate_degree`` (HSDP); ``mbs`` ->
``training.local_batch_size`` (and the pipeline's micro-batch); ``gbs`` ->
``training.global_batch_size`` (gradient accumulation above ``mbs x dp``); ``seq_len``;
``schedule`` (pipelines; ``1F1B``, ``Interleaved 1F1B``...) -> ``pipeline_parallel_schedule``;
``recompute`` -> ``activation_checkpoint.mode`` (``none``, ``full``, ``selective`` with
``selective_ac_option``: ``op`` or every N-th layer, :func:`_ac_option`); ``precision`` FP8 -> the ``float8``
converter (``tensorwise`` unless the cell says ``rowwise``), MXFP8 -> ``mx``; a framework cell
naming ``torch.compile`` / ``compile`` -> ``compile.enable``, ``async TP`` ->
``parallelism.enable_async_tensor_parallel``. The model's sizes come from the shape columns as
torchtitan's model args (``dim``, ``n_layers``, ``n_heads``, ``n_kv_heads``, ``vocab_size``),
the FFN width from ``ffn_hidden``; a row with experts or MLA is refused (the model is built
as a dense Llama 3).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pandas as pd

from sim.runs.csv_shape import cell_int
from sim.runs.record import ArgNote, MeasuredRun
from sim.runs.torchtitan import read_torchtitan_config


def _model_args(row: pd.Series) -> dict[str, Any] | None:
    sizes = {k: cell_int(row.get(c)) for k, c in (("dim", "hidden"), ("n_layers", "layers"),
             ("n_heads", "heads"), ("n_kv_heads", "kv_heads"), ("vocab_size", "vocab"))}  # fmt: skip
    if not (sizes["dim"] and sizes["n_layers"] and sizes["n_heads"]):
        return None
    return {k: v for k, v in sizes.items() if v}


def _ac_option(cell: str) -> str:
    """torchtitan's ``selective_ac_option`` of a ``selective ...`` recompute cell: ``op`` for
    per-op SAC, ``N`` for "every N layers"; torchtitan's default ``2`` for "selective layer"
    or a bare "selective" (the reader's default, :func:`sim.runs.torchtitan.read_torchtitan_config`).

    >>> _ac_option("selective op"), _ac_option("selective layer"), _ac_option("selective layer 3")
    ('op', '2', '3')
    """
    digits = re.search(r"\d+", cell)
    return "op" if re.search(r"\bop\b", cell) else digits.group(0) if digits else "2"


def job_config(row: pd.Series) -> dict[str, Any]:
    """The torchtitan job config of a CSV row (module doc), nested by section."""
    tp, pp, cp = (cell_int(row.get(c)) or 1 for c in ("tp", "pp", "cp"))
    gpus = cell_int(row.get("num_gpus")) or tp * pp * cp
    dp = cell_int(row.get("dp")) or max(1, gpus // (tp * pp * cp))
    shard = cell_int(row.get("fsdp")) or dp
    mbs = cell_int(row.get("mbs")) or 1
    par: dict[str, Any] = {"tensor_parallel_degree": tp, "pipeline_parallel_degree": pp,
           "context_parallel_degree": cp, "expert_parallel_degree": cell_int(row.get("ep")) or 1,
           "data_parallel_shard_degree": shard,
           "data_parallel_replicate_degree": max(1, dp // shard)}  # fmt: skip
    if pp > 1:
        par["pipeline_parallel_microbatch_size"] = mbs
        sched = str(row.get("schedule", "")).replace(" ", "").replace("_", "").replace("-", "")
        if sched and sched.lower() != "nan":  # torchtitan's names, case-free: Interleaved1F1B
            par["pipeline_parallel_schedule"] = sched
    text = str(row.get("framework", "")).lower()
    if "async" in text:
        par["enable_async_tensor_parallel"] = True
    rc = str(row.get("recompute", "none")).lower()
    mode = "none" if rc in ("", "nan") or rc.startswith("none") else (
        "full" if rc.startswith("full") else "selective")  # fmt: skip
    cfg: dict[str, Any] = {
        "model": {"name": "llama3", "flavor": str(row.get("model", ""))},
        "training": {"local_batch_size": mbs, "global_batch_size": cell_int(row.get("gbs")) or -1,
                     "seq_len": cell_int(row.get("seq_len")) or 2048},
        "parallelism": par,
        "activation_checkpoint": {"mode": mode} | ({"selective_ac_option": _ac_option(rc)}
                                                    if mode == "selective" else {}),
    }  # fmt: skip
    prec = str(row.get("precision", "")).lower()
    if "mx" in prec:
        cfg["model"]["converters"] = ["mx"]
    elif "fp8" in prec:
        cfg["model"]["converters"] = ["float8"]
        cfg["float8"] = {"recipe_name": "rowwise" if "rowwise" in prec else "tensorwise"}
    if "compile" in text:
        cfg["compile"] = {"enable": True}
    return cfg


def torchtitan_row_run(row: pd.Series, *, source: str) -> MeasuredRun:
    """The run of a torchtitan row (module doc); nothing measured yet."""
    run = read_torchtitan_config(
        job_config(row), source=source, name=str(row.get("model", "")),
        num_gpus=cell_int(row.get("num_gpus")), gpu=str(row.get("gpu", "")),
        model_args=_model_args(row),
    )  # fmt: skip
    ffn = cell_int(row.get("ffn_hidden"))
    if ffn:
        run = replace(run, shape=replace(run.shape, ffn_hidden=ffn))
    if (cell_int(row.get("moe_experts")) or 0) > 0 or str(row.get("attention")).lower() == "mla":
        why = ("a torchtitan MoE or MLA model (deepseek_v3, llama4, qwen3 MoE): its sizes are "
               "read as a dense Llama 3 here, so it is not simulated")  # fmt: skip
        run = replace(
            run, args=(*run.args, ArgNote("model", str(row.get("model")), "unmapped", why))
        )
    return run

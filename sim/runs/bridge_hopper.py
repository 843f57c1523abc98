"""Megatron-Bridge's H100 performance presets, for an H100 Bridge row without a recipe-table
entry (:mod:`sim.runs.bridge_fallback`).

``measurements/megatron-bridge/hopper_recipes.csv`` has one row per H100 configuration of each
release 25.09 .. 26.08 (NVIDIA-NeMo/Megatron-Bridge at the release's tag, each row with its
``tag:file:line``; built by ``measurements/megatron-bridge/build_hopper_recipes.py``): 25.09's
``perf_matrix: h100`` YAML and ``run_script.py`` rules (v0.1.0rc3), 25.11 .. 26.06.01's
``scripts/performance/configs/*/*workload_base_configs.py`` presets ``*_H100_*`` (v0.2.0 ..
v0.5.1) with the H100 functions' userbuffers TP overlap, 26.08's flat recipes
``src/megatron/bridge/perf_recipes/*/h100/`` (v0.6.0). Each row: the layout and what the
recipe sets beyond the shared settings (recompute, CUDA graphs, flex dispatcher, EP overlap,
token drop, Megatron FSDP, pipeline layout, TP overlap, ``overlap_param_gather_with_optimizer_
step``). Its columns are those of ``recipes.csv``, so :func:`sim.runs.bridge_recipes.recipe_flags`
turns an entry into Megatron flags as it does a Blackwell recipe row.

A row matches an entry of the same model, GPU (H100), precision and, where the row gives
them, TP, PP, CP, VP, EP, MBS and GPU count (:func:`matches`); the entry of the row's own
release is taken, else that of the latest release that has one (an assumption: a preset a
later release keeps unchanged runs the same). H200 has no preset in any release: no ``*_H200_*``
name, and the launcher's ``-g`` refuses ``h200`` (``scripts/performance/argument_parser.py:54`` at
v0.1.0rc3 .. ``30-38``, ``NUM_GPUS_PER_NODE_MAP``, at v0.6.0): an H200 row keeps the shared
fallback. Switches a preset turns off: :mod:`sim.runs.bridge_offswitch`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from sim.runs.bridge_recipes import recipe_flags
from sim.runs.csv_shape import cell_int

SHIPPED = Path(__file__).resolve().parents[2] / "measurements" / "megatron-bridge" / (
    "hopper_recipes.csv")  # fmt: skip
"""The preset table of a source checkout (absent from an installed package: no entry)."""
LAYOUT = ("tp", "pp", "cp", "vp", "ep", "mbs", "num_gpus")
"""Layout columns a row must agree on where it gives them (empty: any)."""
SETTINGS = ("recompute_granularity", "recompute_modules", "recompute_method",
            "recompute_num_layers", "activation_offloading", "cuda_graph_impl",
            "cuda_graph_scope", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
            "moe_a2a_overlap", "delay_wgrad_compute", "moe_token_drop", "megatron_fsdp",
            "tp_comm_overlap_effective", "settings_from", "launcher_cli",
            "overlap_param_gather_with_optimizer_step", "pipeline_model_parallel_layout")  # fmt: skip
"""The setting columns an entry carries (``recipes.csv``'s names; ``settings_from`` and
``launcher_cli`` give the allocator option, :func:`sim.runs.bridge_env.expandable_segments`)."""


@dataclass(frozen=True)
class HopperEntry:
    """One matched preset: its Megatron flags and the approximation the row states."""

    flags: dict[str, Any]
    note: str
    release: str = ""
    """The release whose preset it is (:mod:`sim.runs.bridge_offswitch` keys on it)."""


def model_key(name: str) -> str:
    """A model name without case, punctuation or an MTP remark (``"DeepSeekV3 (w/ MTP)"`` and
    ``"DEEPSEEK_V3"`` are ``deepseekv3``); other remarks (``tokendrop``) stay and so match
    no preset."""
    text = re.sub(r"\(w/o? mtp\)", "", name.lower())
    return re.sub(r"[^a-z0-9]", "", text)


def precision_key(label: str) -> str:
    """``FP8-CS`` for current scaling (``FP8``, ``FP8-CS``), ``FP8-SC`` for blockwise
    (``FP8-SC``, the 25.09 tables' "FP8 alt granularity", blockwise on H100), else the label
    upper-cased (``BF16``, ``FP8-DS``: no H100 preset)."""
    text = label.strip().upper()
    if text.startswith("FP8-SC") or "ALT GRANULARITY" in text:
        return "FP8-SC"
    if text in ("FP8", "FP8-CS") or text.startswith("FP8 (") or text.startswith("FP8-CS"):
        return "FP8-CS"
    return text.split(" ")[0]


def matches(row: pd.Series | dict, entry: dict[str, Any]) -> bool:
    """Whether ``row`` is ``entry``'s configuration (module doc); VP and EP empty or 1 alike.

    >>> e = {"model": "LLAMA3_8B", "gpu": "H100", "precision": "FP8-CS", "task": "pretrain",
    ...      "tp": 1, "pp": 1, "cp": 1, "vp": 1, "ep": 1, "mbs": 1, "num_gpus": 8}
    >>> matches({"model": "LLAMA3_8B", "gpu": "H100 SXM", "precision": "FP8", "tp": 1,
    ...          "vp": "", "num_gpus": 8}, e)
    True
    >>> matches({"model": "LLAMA3_8B", "gpu": "H100", "precision": "FP8", "cp": 2}, e)
    False
    """
    if model_key(str(row.get("model", ""))) != model_key(str(entry["model"])):
        return False
    if not str(row.get("gpu", "")).upper().startswith(str(entry["gpu"])):
        return False
    if precision_key(str(row.get("precision", ""))) != entry["precision"]:
        return False
    task = str(row.get("task") or "pretrain")
    if task not in ("nan", entry["task"]):
        return False
    for col in LAYOUT:
        got = cell_int(row.get(col))
        if col in ("vp", "ep") and got is None:
            got = 1
        if got is not None and got != cell_int(entry[col]):
            return False
    return True


@cache
def _table(path: str) -> tuple[dict[str, Any], ...]:
    p = Path(path)
    return tuple(pd.read_csv(p, dtype=str).to_dict("records")) if p.exists() else ()


def _rank(entry: dict[str, Any], release: str, gbs: int | None) -> tuple[bool, bool, str]:
    return (entry["release"] == release, cell_int(entry["gbs"]) == gbs, entry["release"])


def hopper_entry(row: pd.Series | dict, release: str = "",
                 path: str | Path = SHIPPED) -> HopperEntry | None:  # fmt: skip
    """The preset of an H100 Bridge row (module doc), None where no entry matches.

    Args:
        row: a measured-CSV row (``model``, ``gpu``, ``precision``, ``task``, layout columns).
        release: the row's release (``26.04.01``); its own entry is preferred, then one of
            the same global batch, then the latest release.
        path: the preset table.
    """
    found = [e for e in _table(str(path)) if matches(row, e)]
    if not found:
        return None
    best = max(found, key=lambda e: _rank(e, release, cell_int(row.get("gbs"))))
    rec = {k: v for k, v in best.items() if k in SETTINGS and isinstance(v, str)}
    flags = recipe_flags(rec)
    own = "" if best["release"] == release else (
        f" (the row's release {release or '?'} has no such preset: {best['release']}'s used,"
        " assumption)")  # fmt: skip
    set_ = (
        ", ".join(
            f"{k}={v}"
            for k, v in rec.items()
            if v != "False" and k not in ("settings_from", "launcher_cli")
        )
        or "none"
    )
    note = (f"recipe: Megatron-Bridge H100 preset {best['preset']} of {best['release']}{own} "
            f"({best['source']}; sim.runs.bridge_hopper): {set_}; with the settings every "
            "recipe shares (sim.runs.bridge_fallback); the model's base recipe and the NCCL "
            "environment are not traced")  # fmt: skip
    return HopperEntry(flags, note, best["release"])

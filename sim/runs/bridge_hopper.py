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
step``; for 26.08 also what the starting library recipe sets: the precision-aware optimizer,
MTP depth, router and loss fusion, HybridEP's SMs, the embedding/loss pipeline split). Its columns are those of ``recipes.csv``, so :func:`sim.runs.bridge_recipes.recipe_flags`
turns an entry into Megatron flags as it does a Blackwell recipe row.

A row matches an entry of the same model, GPU (H100), precision and, where the row gives
them, TP, PP, CP, VP, EP, MBS and GPU count (:func:`matches`); the entry of the row's own
release is taken, else that of the latest release that has one (an assumption: a preset a
later release keeps unchanged runs the same). From 25.11 on the launcher runs a preset at any
``-ng`` (:data:`ANY_COUNT`): a row at another GPU count then takes the preset of the same
model, precision and layout (the row's own release first, then the exact count), its data
parallelism following the count and its GBS scaled by the release's rule (:func:`scaled_gbs`);
25.09 keys its presets by GPU count (:data:`EXACT_COUNT`). H200 has no preset in any release:
no ``*_H200_*`` name, and the launcher's ``-g`` refuses ``h200``
(``scripts/performance/argument_parser.py:54`` at v0.1.0rc3 .. ``30-38``,
``NUM_GPUS_PER_NODE_MAP``, at v0.6.0): an H200 row keeps the shared fallback. Switches a preset turns off: :mod:`sim.runs.bridge_offswitch`.
"""

from __future__ import annotations

import math
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
            "overlap_param_gather_with_optimizer_step", "pipeline_model_parallel_layout",
            "precision_aware_optimizer", "mtp_num_layers", "moe_router_fusion",
            "cross_entropy_loss_fusion", "moe_hybridep_num_sms",
            "account_for_embedding_loss_in_pp_split")  # fmt: skip
"""The setting columns an entry carries (``recipes.csv``'s names; ``settings_from`` and
``launcher_cli`` give the allocator option, :func:`sim.runs.bridge_env.expandable_segments`)."""
EXACT_COUNT = frozenset({"25.09"})
"""Releases whose launcher applies a preset at its own GPU count only: v0.1.0rc3 reads
``perf_matrix.<gpu>.num_gpus_<-ng>`` (``scripts/performance/utils/common.py:25-30``) and, with
no such key, skips every preset override (``utils/helpers.py:140-144``): the library recipe
runs. A 25.09 row at another count takes no 25.09 preset, and no preset at another count."""
ANY_COUNT = {
    "v0.2.0": "v0.2.0:scripts/performance/utils/helpers.py:265-298",
    "v0.3.0": "v0.3.0:scripts/performance/utils/overrides.py:428-443",
    "v0.3.1": "v0.3.1:scripts/performance/utils/overrides.py:444-461",
    "v0.4.0": "v0.4.0:scripts/performance/utils/overrides.py:469-485",
    "v0.4.1": "v0.4.1:scripts/performance/utils/overrides.py:469-485",
    "v0.5.0": "v0.5.0:scripts/performance/utils/overrides.py:524-543",
    "v0.5.1": "v0.5.1:scripts/performance/utils/overrides.py:524-543",
    "v0.6.0": "v0.6.0:scripts/performance/run_script.py:97-130, utils/overrides.py:674-705",
}  # fmt: skip
"""Tags whose launcher runs a preset at any ``-ng`` (``argument_parser.py``: required, any int),
and the line that does it: v0.2.0 .. v0.5.1 pick the preset by model, GPU, precision and
variant (``utils/utils.py`` ``get_workload_base_config``; ``num_gpus`` "for representation
purposes only", v0.2.0 ``utils/utils.py:28-35``), take DP = ``-ng`` / (TP PP CP) and scale the
GBS; v0.6.0 takes the flat recipe ``<model>_pretrain_<-ng>gpu_h100_<precision>_config`` and,
without one, the default recipe (:data:`FLAT_DEFAULT_GPUS`) with its GBS scaled by DP."""
FLAT_DEFAULT_GPUS = {("llama3_8b", "bf16"): 8, ("llama3_8b", "fp8cs"): 8,
                     ("qwen3_30b_a3b", "bf16"): 16, ("qwen3_30b_a3b", "fp8cs"): 16}  # fmt: skip
"""v0.6.0's default H100 flat recipe at another GPU count: these counts
(``scripts/performance/utils/utils.py:66-87``), else the largest (``utils.py:460-482``)."""


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


def matches(row: pd.Series | dict, entry: dict[str, Any], any_count: bool = False) -> bool:
    """Whether ``row`` is ``entry``'s configuration (module doc); VP and EP empty or 1 alike.
    ``any_count``: the GPU counts may differ where the row's count fits the layout
    (:func:`fits`).

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
        if col == "num_gpus" and any_count:
            if got is not None and not fits(entry, got):
                return False
            continue
        if col in ("vp", "ep") and got is None:
            got = 1
        if got is not None and got != cell_int(entry[col]):
            return False
    return True


def _dense(entry: dict[str, Any]) -> int:
    return math.prod(cell_int(entry[c]) or 1 for c in ("tp", "pp", "cp"))


def fits(entry: dict[str, Any], gpus: int) -> bool:
    """Whether ``entry``'s layout runs on ``gpus`` GPUs: TP PP CP and ETP EP PP (ETP empty: TP)
    divide it, the rule v0.6.0 checks (``scripts/common/benchmark_parallelism.py:86-121``);
    v0.2.0 .. v0.5.1 take DP = int(GPUs / (TP PP CP)) unchecked (``utils/overrides.py:428`` at
    v0.3.0): a count the grid does not divide is taken as not run (assumption).

    >>> fits({"tp": "4", "pp": "8", "cp": "1", "ep": "1", "etp": ""}, 96)
    True
    >>> fits({"tp": "4", "pp": "8", "cp": "1", "ep": "1", "etp": ""}, 48)
    False
    """
    etp = cell_int(entry.get("etp")) or cell_int(entry["tp"]) or 1
    expert = etp * (cell_int(entry["ep"]) or 1) * (cell_int(entry["pp"]) or 1)
    return gpus > 0 and gpus % _dense(entry) == 0 and gpus % expert == 0


def scaled_gbs(entry: dict[str, Any], gpus: int) -> int | None:
    """The GBS the launcher of ``entry``'s release runs it with on ``gpus`` GPUs (no ``-gb``).

    v0.2.0 .. v0.5.1: int(GBS / num_gpus * gpus) (``gbs_scaling_factor``, v0.2.0
    ``utils/utils.py:64-67``; :data:`ANY_COUNT`'s lines). v0.6.0: GBS * DP / DP of the recipe's
    own count, None where not an integer (the launcher then asks for ``--global_batch_size``,
    ``scripts/common/benchmark_parallelism.py:126-143``).

    >>> scaled_gbs({"tag": "v0.5.1", "gbs": "128", "num_gpus": "8"}, 24)
    384
    >>> scaled_gbs({"tag": "v0.6.0", "gbs": "256", "num_gpus": "64", "tp": "4", "pp": "8",
    ...             "cp": "1"}, 96)
    384
    """
    gbs, own = cell_int(entry["gbs"]) or 0, cell_int(entry["num_gpus"]) or 1
    if entry["tag"] != "v0.6.0":
        return int(gbs / own * gpus)
    base_dp, dp = own // _dense(entry), gpus // _dense(entry)
    return None if (gbs * dp) % base_dp else gbs * dp // base_dp


_FLAT_NAME = re.compile(r"^(.*)_pretrain_(\d+)gpu_h100_(\w+?)_config$")


def _default(entry: dict[str, Any], table: tuple[dict[str, Any], ...]) -> int:
    """How the launcher ranks ``entry`` as its preset at another count: v0.3.0 .. v0.5.1 take
    ``-cv v2``, else v1, else the unversioned name (``utils/utils.py:96-126`` at v0.3.0;
    ``argument_parser.py:699`` default v2), never ``LARGE_SCALE``; v0.6.0 its default count
    (:data:`FLAT_DEFAULT_GPUS`)."""
    name = str(entry["preset"])
    flat = _FLAT_NAME.match(name)
    if flat is None:
        return {"_V2": 3, "_V1": 2}.get(name[-3:], 0 if name.endswith("LARGE_SCALE") else 1)
    key = (flat.group(1), flat.group(3))
    counts = [int(m.group(2)) for e in table if e["release"] == entry["release"]
              if (m := _FLAT_NAME.match(str(e["preset"]))) and (m.group(1), m.group(3)) == key]  # fmt: skip
    return int(int(flat.group(2)) == FLAT_DEFAULT_GPUS.get(key, max(counts)))


@cache
def _table(path: str) -> tuple[dict[str, Any], ...]:
    p = Path(path)
    return tuple(pd.read_csv(p, dtype=str).to_dict("records")) if p.exists() else ()


def _candidates(row: pd.Series | dict, release: str,
                table: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:  # fmt: skip
    """The entries ``row`` matches: at its GPU count, and, unless its release is 25.09, those
    of a release whose launcher runs a preset at any count (:data:`ANY_COUNT`)."""
    any_count = release not in EXACT_COUNT
    return [e for e in table if matches(row, e)
            or (any_count and e["tag"] in ANY_COUNT and matches(row, e, any_count=True))]  # fmt: skip


def _key(e: dict[str, Any], row: pd.Series | dict, release: str,
         table: tuple[dict[str, Any], ...]) -> tuple[bool, bool, bool, int, str]:  # fmt: skip
    gpus, gbs = cell_int(row.get("num_gpus")), cell_int(row.get("gbs"))
    if gpus is None or cell_int(e["num_gpus"]) == gpus:
        return (e["release"] == release, True, cell_int(e["gbs"]) == gbs, 0, e["release"])
    return (e["release"] == release, False, scaled_gbs(e, gpus) == gbs, _default(e, table),
            e["release"])  # fmt: skip


def _at_count(rec: dict[str, str], entry: dict[str, Any], gpus: int) -> dict[str, str]:
    """``rec`` on ``gpus`` GPUs: the launcher turns ``overlap_param_gather_with_optimizer_step``
    on where DP > 1, PP > 1, VP > 1 at the count it runs (v0.5.1 ``utils/overrides.py:524-532``,
    v0.6.0 ``utils/overrides.py:678-689``); before v0.6.0 only there (the preset sets none),
    v0.6.0's flat recipe may set it itself."""
    pp, vp = (cell_int(entry[c]) or 1 for c in ("pp", "vp"))
    on = gpus // _dense(entry) > 1 and pp > 1 and vp > 1
    own = entry["tag"] == "v0.6.0" and rec.get("overlap_param_gather_with_optimizer_step") == "True"
    return rec | {"overlap_param_gather_with_optimizer_step": str(on or own)}


def hopper_entry(row: pd.Series | dict, release: str = "",
                 path: str | Path = SHIPPED) -> HopperEntry | None:  # fmt: skip
    """The preset of an H100 Bridge row (module doc), None where no entry matches.

    Args:
        row: a measured-CSV row (``model``, ``gpu``, ``precision``, ``task``, layout columns).
        release: the row's release (``26.04.01``); its own entry is preferred, then one at the
            row's GPU count, then one of the same global batch (scaled to the row's count,
            :func:`scaled_gbs`), then the launcher's default variant, then the latest release.
        path: the preset table.
    """
    table = _table(str(path))
    found = _candidates(row, release, table)
    if not found:
        return None
    best = max(found, key=lambda e: _key(e, row, release, table))
    rec = {k: v for k, v in best.items() if k in SETTINGS and isinstance(v, str)}
    own_gpus = cell_int(best["num_gpus"]) or 0
    gpus = cell_int(row.get("num_gpus")) or own_gpus  # no count in the row: the preset's
    other = gpus != own_gpus
    if other:
        rec = _at_count(rec, best, gpus)
    flags = recipe_flags(rec)
    own = "" if best["release"] == release else (
        f" (the row's release {release or '?'} has no such preset: {best['release']}'s used,"
        " assumption)")  # fmt: skip
    count = "" if not other else (
        f" read at {gpus} GPUs, the preset's own {best['num_gpus']} (the launcher runs a preset"
        f" at any -ng, DP following: {ANY_COUNT[best['tag']]}; GBS {best['gbs']} scales to"
        f" {scaled_gbs(best, gpus)})")  # fmt: skip
    set_ = (
        ", ".join(
            f"{k}={v}"
            for k, v in rec.items()
            if v != "False" and k not in ("settings_from", "launcher_cli")
        )
        or "none"
    )
    note = (f"recipe: Megatron-Bridge H100 preset {best['preset']} of {best['release']}{own}"
            f"{count} ({best['source']}; sim.runs.bridge_hopper): {set_}; with the settings "
            "every recipe shares (sim.runs.bridge_fallback); the model's base recipe (read "
            "for 26.08 only) and the NCCL environment are not traced")  # fmt: skip
    return HopperEntry(flags, note, best["release"])

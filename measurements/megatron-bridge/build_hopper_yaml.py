"""Rows of ``hopper_recipes.csv`` for 25.09 (v0.1.0rc3): the ``perf_matrix: h100:`` sections of
``scripts/performance/configs/*/*_llm_pretrain.yaml`` (layout, Megatron FSDP) and the H100
rules of ``scripts/performance/run_script.py`` (line numbers at v0.1.0rc3):

* DeepSeek-V3: DeepEP flex dispatcher (56), EP overlap with delayed wgrad (62, 82),
  selective recompute ``[mla_up_proj, mlp]`` (89), layout ``Et|(tt|)*30mL`` (72); its
  ``overlap_grad_reduce = False`` (95) is not encoded (the table's switches only turn on);
* Qwen3: token drop, capacity 1.0, padded (102, 109; ``training/utils/moe_token_drop.py:
  18-22``), TP overlap on (100, 107), effective with TP > 1;
* Llama 3 70B / 3.1 405B: userbuffers TP overlap (118; ``utils/helpers.py:35`` map, H100).
Used by ``build_hopper_recipes.py``.
"""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

TAG, RELEASE = "v0.1.0rc3", "25.09"
FILES = {"llama3/llama3_8b": "LLAMA3_8B", "llama3/llama3_70b": "LLAMA3_70B",
         "llama31/llama31_405b": "LLAMA3.1_405B", "deepseek/deepseek_v3": "DeepSeekV3",
         "qwen3/qwen3_30b_a3b": "Qwen3_30B_a3B", "qwen3/qwen3_235b_a22b": "Qwen3_235B_a22B"}  # fmt: skip
PRECISIONS = {"bf16": "BF16", "fp8_cs": "FP8-CS", "fp8_ds": "FP8-DS", "fp8_ss": "FP8-SC"}
RS = "v0.1.0rc3:scripts/performance/run_script.py"
RULES: dict[str, tuple[dict[str, Any], str]] = {
    "DeepSeekV3": ({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep",
                    "moe_a2a_overlap": True, "delay_wgrad_compute": True,
                    "recompute_granularity": "selective", "recompute_modules": "[mla_up_proj,mlp]",
                    "pipeline_model_parallel_layout": "Et|(tt|)*30mL"},
                   f"{RS}:56,62,72,82,89"),
    "Qwen3_30B_a3B": ({"moe_token_drop": "capacity_factor=1.0 pad_to_capacity=True",
                       "tp_comm_overlap": True}, f"{RS}:100,102"),
    "Qwen3_235B_a22B": ({"moe_token_drop": "capacity_factor=1.0 pad_to_capacity=True",
                         "tp_comm_overlap": True}, f"{RS}:107,109"),
    "LLAMA3_70B": ({"tp_comm_overlap": True}, f"{RS}:118 (utils/helpers.py:35)"),
    "LLAMA3.1_405B": ({"tp_comm_overlap": True}, f"{RS}:118 (utils/helpers.py:35)"),
}  # fmt: skip
"""Settings ``run_script.py`` makes for an H100 run of each model, and where."""


def yaml_rows(repo: str) -> list[dict]:
    """The 25.09 H100 rows (module doc)."""
    rows = []
    for stem, model in FILES.items():
        path = f"scripts/performance/configs/{stem}_llm_pretrain.yaml"
        src = subprocess.run(["git", "--git-dir", repo, "show", f"{TAG}:{path}"], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        line = next(i for i, t in enumerate(src.splitlines(), 1) if t.startswith("  h100:"))
        for gpus, body in yaml.safe_load(src)["perf_matrix"]["h100"].items():
            for prec, label in PRECISIONS.items():
                if prec not in body:
                    continue
                c = {**body["common"], **(body[prec] or {})}
                rows.append(_row(c, model, label, int(gpus.split("_")[-1]), f"{TAG}:{path}:{line}"))
    return rows


def _row(c: dict, model: str, prec: str, n: int, where: str) -> dict:
    tp, pp, cp, vp = c.get("tp") or 1, c.get("pp") or 1, c.get("cp") or 1, c.get("vp") or 1
    r: dict[str, Any] = {"release": RELEASE, "tag": TAG, "preset": f"perf_matrix.h100.num_gpus_{n}."
         f"{prec}", "model": model, "gpu": "H100", "precision": prec, "task": "pretrain",
         "num_gpus": n, "tp": tp, "pp": pp, "vp": vp, "cp": cp, "ep": c.get("ep") or 1,
         "etp": c.get("etp") or "", "mbs": c.get("mbs") or 1, "gbs": c.get("gbs")}  # fmt: skip
    settings, rule = RULES.get(model, ({}, ""))
    r |= {k: v for k, v in settings.items() if k != "tp_comm_overlap"}
    r["tp_comm_overlap_effective"] = bool(settings.get("tp_comm_overlap") and tp > 1)
    if c.get("use_megatron_fsdp"):
        r["megatron_fsdp"] = True
    dp = n // (tp * pp * cp)
    r["overlap_param_gather_with_optimizer_step"] = dp > 1 and pp > 1 and vp > 1
    r["source"] = where + (f"; {rule}" if rule else "")
    return r

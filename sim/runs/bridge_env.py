"""Whether a Megatron-Bridge performance run had ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.

The performance scripts set the caching allocator's options outside the recipe, by release
(NVIDIA-NeMo/Megatron-Bridge, ``scripts/performance``), and the recipe table
(``measurements/megatron-bridge/recipes.csv``) records which release's settings each row has
(``settings_from``), its launcher arguments (``launcher_cli``) and, for the recipes that carry
them, their environment (``env_vars``):

* ``v0.1.0rc3``: Llama 3.1 405B on GB200 in FP8 current scaling (``-c fp8 -fr cs``:
  ``scripts/performance/setup_experiment.py`` 116-118; ``utils/executors.py`` sets no allocator
  option);
* ``v0.2.0``: Llama 3.1 405B on GB200 in FP8 (``perf_plugins.py`` 250-252);
* ``v0.3.0``, ``v0.3.1``: Llama 3.1 405B pretraining on GB200 in FP8, DeepSeek-V3 pretraining on
  H100, Llama 3 70B SFT on H100 in FP8 current scaling (``perf_plugins.py`` 262-276, 302-305);
* ``v0.4.0``, ``v0.4.1``: Llama 3.1 405B pretraining on GB200/GB300 in FP8, DeepSeek-V3
  pretraining on H100/GB200, Qwen3-Next 80B pretraining on H100 in FP8 current scaling, Llama 3
  70B SFT in FP8 on GB300/H100 (``perf_plugins.py`` 262-326);
* ``v0.4.2``: as ``v0.4.0`` with Llama 3.1 405B NVFP4 on GB200, DeepSeek-V3 on B200, Qwen3-Next
  on GB300 in BF16/MXFP8, Nemotron-3 Super NVFP4 on GB300, Llama 3 70B FP8 SFT/LoRA on GB200 and
  MXFP8 pretraining on GB300 (``perf_plugins.py`` 265-320, 346);
* ``v0.5.0`` and later: every run (``utils/executors.py`` 39-50, ``PERF_ENV_VARS``);
* a recipe with its own environment (``main``'s ``src/megatron/bridge/perf_recipes``): its
  ``env_vars``.
"""

from __future__ import annotations

import re
from typing import Any

FP8 = ("fp8_cs", "fp8_mx")


def _args(cli: str) -> dict[str, str]:
    """``-m``, ``-mr``, ``-s``, ``-g``, ``-c``, ``-fr``, ``--task`` of a launcher command line."""
    out = dict(re.findall(r"(?:^|\s)(-mr|-m|-s|-g|-c|-fr|--task)\s+(\S+)", cli))
    if "-mr" not in out and "-m" in out:  # v0.2.0: -m llama31 -s 405b
        out["-mr"] = f"{out['-m']}_{out.get('-s', '')}"
    return out


def _rule_v04(recipe: str, gpu: str, dtype: str, task: str, v042: bool) -> bool:
    pretrain = task == "pretrain"
    if recipe == "llama31_405b" and pretrain and gpu in ("gb200", "gb300"):
        return dtype in FP8 or (v042 and dtype == "nvfp4" and gpu == "gb200")
    if recipe == "deepseek_v3" and pretrain:
        return gpu in (("h100", "gb200", "b200") if v042 else ("h100", "gb200"))
    if recipe == "qwen3_next_80b_a3b" and pretrain:
        return (gpu == "h100" and dtype == "fp8_cs") or (
            v042 and gpu == "gb300" and dtype in ("bf16", "fp8_mx")
        )
    if v042 and recipe == "nemotron_3_super" and pretrain:
        return gpu == "gb300" and dtype == "nvfp4"
    if recipe == "llama3_70b" and dtype in FP8:
        if task in (("sft", "lora") if v042 else ("sft",)):
            return gpu in (("gb300", "gb200", "h100") if v042 else ("gb300", "h100"))
        return v042 and pretrain and dtype == "fp8_mx" and gpu == "gb300"
    return False


def expandable_segments(rec: dict[str, Any]) -> bool:
    """Whether the run of recipe-table row ``rec`` (text cells) had
    ``expandable_segments:True`` (module doc)."""
    env = rec.get("env_vars", "")
    if "PYTORCH_CUDA_ALLOC_CONF" in env:
        return "expandable_segments:True" in env
    version = rec.get("settings_from", "").split(" ")[0]
    a = _args(rec.get("launcher_cli", ""))
    recipe, gpu, dtype = a.get("-mr", ""), a.get("-g", ""), a.get("-c", "")
    task = a.get("--task", "pretrain")
    if version.startswith("v0.5") or version.startswith("v0.6"):
        return True
    if version == "v0.1.0rc3":
        fp8_cs = dtype == "fp8" and a.get("-fr") == "cs"
        return recipe == "llama31_405b" and gpu == "gb200" and fp8_cs
    if version == "v0.2.0":
        return recipe == "llama31_405b" and gpu == "gb200" and dtype in FP8
    if version in ("v0.3.0", "v0.3.1"):
        return (
            (recipe == "llama31_405b" and task == "pretrain" and gpu == "gb200" and dtype in FP8)
            or (recipe == "deepseek_v3" and task == "pretrain" and gpu == "h100")
            or (recipe == "llama3_70b" and task == "sft" and gpu == "h100" and dtype == "fp8_cs")
        )
    if version in ("v0.4.0", "v0.4.1", "v0.4.2"):
        return _rule_v04(recipe, gpu, dtype, task, version == "v0.4.2")
    return False

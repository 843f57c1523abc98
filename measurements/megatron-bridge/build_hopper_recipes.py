"""Build ``hopper_recipes.csv``: the H100 / H200 performance presets of each Megatron-Bridge
release (``scripts/performance/configs/*/*workload_base_configs.py``, names
``*_H100_*`` / ``*_H200_*``), read from a mirror of NVIDIA-NeMo/Megatron-Bridge at its tags.

Each preset is evaluated with the release's own ``WorkloadBaseConfig`` dataclass (taken from
that tag's ``scripts/performance/utils/utils.py``) and turned into the recipe-table columns
``sim.runs.bridge_recipes.recipe_flags`` reads, by the rules of the release's
``scripts/performance/utils/overrides.py`` (v0.5.1 lines 139-162, 218-263):
``recompute_num_layers`` -> full / block recompute of that many layers;
``recompute_modules`` -> selective recompute of those modules; ``cuda_graph_impl`` /
``cuda_graph_scope`` as given; ``moe_flex_dispatcher_backend`` -> the flex dispatcher with it,
else ``alltoall``; ``moe_a2a_overlap`` -> EP communication overlap with delayed wgrad;
``pp_layout`` -> the pipeline layout. Plus the H100 functions' TP overlap with userbuffers
(Llama 3 70B and Llama 3.1 405B, :data:`TP_OVERLAP`) and ``CommOverlapConfig``'s rule
``overlap_param_gather_with_optimizer_step`` = DP > 1 and PP > 1 and VP > 1
(``training/comm_overlap.py:562-586``). The model's base recipe (``recipes/<family>/...``) is
not traced: settings it makes that the preset does not override are not in the table.

Usage: ``python measurements/megatron-bridge/build_hopper_recipes.py MIRROR_GIT_DIR OUT.csv``
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from build_hopper_flat import flat_rows  # noqa: E402
from build_hopper_yaml import yaml_rows  # noqa: E402

RELEASES = (("25.11", "v0.2.0"), ("26.02", "v0.3.0"), ("26.02.01", "v0.3.1"),
            ("26.04", "v0.4.0"), ("26.04.01", "v0.4.1"), ("26.06", "v0.5.0"),
            ("26.06.01", "v0.5.1"))  # fmt: skip
MODELS = (("LLAMA31_405B", "LLAMA3.1_405B"), ("LLAMA3_70B", "LLAMA3_70B"),
          ("LLAMA3_8B", "LLAMA3_8B"), ("DEEPSEEK_V3", "DeepSeekV3"),
          ("GPT_OSS_120B", "GPT OSS 120B"), ("QWEN3_235B_A22B", "Qwen3_235B_a22B"),
          ("QWEN3_30B_A3B", "Qwen3_30B_a3B"), ("KIMI_K2", "Kimi_K2"),
          ("NEMOTRON_3_NANO", "Nemotron_3_Nano"), ("NEMOTRON_3_SUPER", "Nemotron_3_Super"),
          ("NEMOTRONH_56B", "NemotronH_56B"))  # fmt: skip
PRECISIONS = (("FP8_CS", "FP8-CS"), ("FP8_SC", "FP8-SC"), ("FP8_MX", "MXFP8"),
              ("NVFP4", "NVFP4"), ("BF16", "BF16"))  # fmt: skip
TP_OVERLAP = {"LLAMA3_70B": "h8192_tp4", "LLAMA31_405B": "h16384_tp8"}
"""Presets whose H100 function sets ``comm_overlap.tp_comm_overlap_cfg`` to a userbuffers
config (``userbuffers_{bf16,fp8}_h100_<this>...``; the line is cited per release)."""
NAME = re.compile(r"^([A-Z0-9_]+_(?:H100|H200)_[A-Z0-9_]+)\s*=", re.M)


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True,
                          capture_output=True, text=True).stdout  # fmt: skip


def workload_class(src: str) -> type:
    """The ``WorkloadBaseConfig`` dataclass of one release's ``utils/utils.py`` source."""
    tree = ast.parse(src)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef)
                and n.name == "WorkloadBaseConfig")  # fmt: skip
    ns: dict = {"dataclass": dataclasses.dataclass, **vars(typing)}
    exec(compile(ast.Module([node], []), "utils.py", "exec"), ns)  # noqa: S102
    return ns["WorkloadBaseConfig"]


def parse_name(name: str) -> tuple[str, str, str, str] | None:
    """``(model, gpu, precision, task)`` of a preset name, None if not a full one."""
    model = next((t for p, t in MODELS if name.startswith(p + "_")), None)
    gpu = "H100" if "_H100_" in name else "H200"
    tail = name.split(f"_{gpu}_", 1)[1]
    prec = next((t for p, t in PRECISIONS if tail.startswith(p)), None)
    task = "pretrain" if "PRETRAIN" in name or "BASE_CONFIG" in name else None
    if model is None or prec is None or task is None or name.startswith("_"):
        return None
    return model, gpu, prec, task


def tp_overlap_line(repo: str, tag: str, base: str, prec: str) -> str:
    """``tag:file:line`` where the H100 function picks its userbuffers config, "" if none."""
    dtype = "bf16" if prec == "BF16" else "fp8"
    pattern = f"comm_overlap_cfg = userbuffers_{dtype}_h100_{TP_OVERLAP[base]}"
    hits = subprocess.run(
        ["git", "--git-dir", repo, "grep", "-n", pattern, tag, "--", "scripts/performance/configs"],
        capture_output=True,
        text=True,
    )
    return hits.stdout.split("\n")[0].rsplit(":", 1)[0] if hits.stdout else ""


def row_of(cfg, release: str, tag: str, name: str, where: str, repo: str) -> dict:
    c = dataclasses.asdict(cfg)
    model, gpu, prec, task = parse_name(name)  # type: ignore[misc]
    tp, pp, cp = (c.get(k) or 1 for k in ("tensor_model_parallel_size",
                  "pipeline_model_parallel_size", "context_parallel_size"))  # fmt: skip
    vp = c.get("virtual_pipeline_model_parallel_size") or 1
    dp = c["num_gpus"] // (tp * pp * cp)
    r = {"release": release, "tag": tag, "preset": name, "model": model, "gpu": gpu,
         "precision": prec, "task": task, "num_gpus": c["num_gpus"], "tp": tp, "pp": pp,
         "vp": vp, "cp": cp, "ep": c.get("expert_model_parallel_size") or 1,
         "etp": c.get("expert_tensor_parallel_size") or "", "mbs": c["micro_batch_size"],
         "gbs": c["global_batch_size"]}  # fmt: skip
    if c.get("recompute_num_layers") is not None:
        r |= {"recompute_granularity": "full", "recompute_method": "block",
              "recompute_num_layers": c["recompute_num_layers"]}  # fmt: skip
    if c.get("recompute_modules") is not None:
        r |= {"recompute_granularity": "selective",
              "recompute_modules": "[" + ",".join(c["recompute_modules"]) + "]"}  # fmt: skip
    if c.get("cpu_offloading_num_layers"):
        r["activation_offloading"] = f"cpu_offloading num_layers={c['cpu_offloading_num_layers']}"
    if c.get("cuda_graph_impl") not in (None, "none"):
        scope = c.get("cuda_graph_scope") or ""
        r |= {
            "cuda_graph_impl": c["cuda_graph_impl"],
            "cuda_graph_scope": ",".join(scope) if isinstance(scope, list) else scope,
        }
    backend = c.get("moe_flex_dispatcher_backend")
    if backend:
        r |= {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": backend}
    if c.get("moe_a2a_overlap"):
        r |= {"moe_a2a_overlap": True, "delay_wgrad_compute": True}
    if c.get("pp_layout"):
        r["pipeline_model_parallel_layout"] = c["pp_layout"]
    base = next(p for p, t in MODELS if t == model)
    tpo = tp_overlap_line(repo, tag, base, prec) if base in TP_OVERLAP and tp > 1 else ""
    r["tp_comm_overlap_effective"] = bool(tpo)
    r["overlap_param_gather_with_optimizer_step"] = dp > 1 and pp > 1 and vp > 1
    r["source"] = where + (f"; TP overlap (userbuffers): {tpo}" if tpo else "")
    return r


def release_rows(repo: str, release: str, tag: str) -> list[dict]:
    cls = workload_class(git(repo, "show", f"{tag}:scripts/performance/utils/utils.py"))
    files = [f for f in git(repo, "ls-tree", "-r", "--name-only", tag,
                            "scripts/performance/configs").split()
             if f.endswith("workload_base_configs.py")]  # fmt: skip
    rows = []
    for path in files:
        src = git(repo, "show", f"{tag}:{path}")
        ns: dict = {"replace": dataclasses.replace, "WorkloadBaseConfig": cls}
        body = re.sub(r"^from .* import .*$", "", src, flags=re.M)
        exec(compile(body, path, "exec"), ns)  # noqa: S102
        for m in NAME.finditer(src):
            name = m.group(1)
            if parse_name(name) and isinstance(ns.get(name), cls):
                line = src[: m.start()].count("\n") + 1
                where = f"{tag}:{path}:{line}"
                rows.append(row_of(ns[name], release, tag, name, where, repo))
    return rows


COLUMNS = ("release", "tag", "preset", "model", "gpu", "precision", "task", "num_gpus", "tp",
           "pp", "vp", "cp", "ep", "etp", "mbs", "gbs", "recompute_granularity",
           "recompute_modules", "recompute_method", "recompute_num_layers",
           "activation_offloading", "cuda_graph_impl", "cuda_graph_scope",
           "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "moe_a2a_overlap",
           "delay_wgrad_compute", "moe_token_drop", "megatron_fsdp", "tp_comm_overlap_effective",
           "overlap_param_gather_with_optimizer_step", "pipeline_model_parallel_layout",
           "precision_aware_optimizer", "mtp_num_layers", "moe_router_fusion",
           "cross_entropy_loss_fusion", "moe_hybridep_num_sms",
           "account_for_embedding_loss_in_pp_split", "settings_from", "launcher_cli", "source")  # fmt: skip


RECIPE = {"LLAMA3_8B": "llama3_8b", "LLAMA3_70B": "llama3_70b", "LLAMA3.1_405B": "llama31_405b",
          "DeepSeekV3": "deepseek_v3", "GPT OSS 120B": "gpt_oss_120b",
          "Qwen3_30B_a3B": "qwen3_30b_a3b", "Qwen3_235B_a22B": "qwen3_235b_a22b",
          "Kimi_K2": "kimi_k2", "Nemotron_3_Nano": "nemotron_3_nano",
          "Nemotron_3_Super": "nemotron_3_super", "NemotronH_56B": "nemotronh_56b"}  # fmt: skip
DTYPE = {"BF16": "bf16", "FP8-CS": "fp8_cs", "FP8-SC": "fp8_sc", "FP8-DS": "fp8_ds",
         "MXFP8": "fp8_mx", "NVFP4": "nvfp4"}  # fmt: skip


def with_launcher(r: dict) -> dict:
    """``settings_from`` and ``launcher_cli`` as ``recipes.csv`` writes them, which
    ``sim.runs.bridge_env.expandable_segments`` reads (the allocator option by release)."""
    cli = f"-mr {RECIPE[r['model']]} -g h100 -c {DTYPE[r['precision']]} --task pretrain"
    return r | {"settings_from": r["tag"], "launcher_cli": cli}


def main(repo: str, out: str) -> None:
    rows = yaml_rows(repo)
    rows += [r for release, tag in RELEASES for r in release_rows(repo, release, tag)]
    rows += [r for r in flat_rows(repo) if r["gbs"] and r["tp"] and r["_layout"]]
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(with_launcher(r) for r in rows)
    print(len(rows), "rows")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

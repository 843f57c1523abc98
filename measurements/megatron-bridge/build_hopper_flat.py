"""Rows of ``hopper_recipes.csv`` for 26.08 (v0.6.0): Megatron-Bridge's flat H100 recipes
(``src/megatron/bridge/perf_recipes/<family>/h100/*.py``, functions
``<model>_pretrain_<n>gpu_h100_<precision>_config``), read with :mod:`ast`.

Each function's statements are read in order, a call ``_helper(cfg)`` of a function of the
same file read in its place: ``cfg.model.<field> = <constant>`` (layout, recompute, CUDA
graphs, dispatcher, pipeline layout, MTP), ``cfg.train.{global,micro}_batch_size``,
``cfg.optimizer.use_precision_aware_optimizer`` and its ``*_dtype`` fields (``torch.<dtype>``),
``cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=...)``,
``cfg.comm_overlap.tp_comm_overlap_cfg = <userbuffers config>`` (TP overlap) and
``_enable_overlap_param_gather_with_optimizer_step(cfg)`` (``perf_recipes/_common.py:90-94``).
TP overlap is effective with TP > 1 and sequence parallelism (``training/comm_overlap.py``,
``recipes.csv``'s rule). A function that starts from a library recipe of another file
(:data:`LIBRARY`) reads that recipe's statements first; DeepSeek-V3's layout helper
(:data:`LAYOUT_HELPER`) is evaluated where it is called. Used by ``build_hopper_recipes.py``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from typing import Any

FUNC = re.compile(r"^(\w+?)_pretrain_(\d+)gpu_h100_(\w+?)_config$")
MODELS = {"llama3_8b": "LLAMA3_8B", "llama3_70b": "LLAMA3_70B", "llama31_405b": "LLAMA3.1_405B",
          "deepseek_v3": "DeepSeekV3", "gpt_oss_120b": "GPT OSS 120B",
          "qwen3_30b_a3b": "Qwen3_30B_a3B", "qwen3_235b_a22b": "Qwen3_235B_a22B",
          "kimi_k2": "Kimi_K2", "nemotron_3_nano": "Nemotron_3_Nano",
          "nemotron_3_super": "Nemotron_3_Super"}  # fmt: skip
LIBRARY = {
    "nemotron_3_super_pretrain_config": (
        "src/megatron/bridge/recipes/nemotronh/h100/nemotron_3_super.py",
        "_nemotron_3_super_pretrain_64gpu_h100_bf16_config",
    ),
    "_qwen3_30b_a3b_default_pretrain_config": (
        "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py",
        "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
    ),
}
"""Library recipes a flat H100 recipe starts from, by the name the perf file binds ->
(file, function it is) at v0.6.0. ``perf_recipes/nemotronh/h100/nemotronh.py:27, 73`` imports
and calls ``recipes/nemotronh/nemotron_3_super.py:32-34``, which returns the H100 file's 64-GPU
function (its layout, recompute and dispatcher; it starts from the 16-GPU function of the same
file). ``perf_recipes/qwen/h100/qwen3_moe.py:30-32, 37`` imports the library's 16-GPU BF16
function under this name and starts its 16-GPU BF16 recipe (and, ``:249``, the 64-GPU one)
from it: ``recipes/qwen/h100/qwen3_moe.py:146-225`` (layout :169-178, no recompute :163-165,
precision-aware optimizer :157 with fp32 dtypes :190-193, HybridEP :205-209, CUDA graphs
:213-214), which starts from the 8-GPU function :32-143 of that file. Only this alias: the FP8
rows start from ``qwen3_30b_a3b_pretrain_config`` and set their layout themselves."""
LAYOUT_HELPER = "set_deepseek_v3_pipeline_model_parallel_layout"
"""``recipes/deepseek/h100/deepseek_v3.py:50-88`` at v0.6.0 (re-exported by
``recipes/deepseek/deepseek_v3.py:19-21``, imported by ``perf_recipes/deepseek/common.py``):
a layout argument is the layout (:61-63); without one, the entry of its ``layout_map``
(:69-77) for (PP, VP), the last stage ``["mtp"] * mtp_num_layers + ["loss"]`` (:65-66; the
library recipe sets ``mtp_num_layers = 1``, :123)."""
LAYOUT_FILE = "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py"
LETTERS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
"""Megatron's layer letters (``pipeline_parallel_layer_layout.py``'s ``char2layer_type``)."""
OPTIMIZER_DTYPES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
"""``cfg.optimizer`` dtype fields of the precision-aware optimizer (``OptimizerConfig``)."""
PRECISIONS = {"bf16": "BF16", "fp8cs": "FP8-CS", "fp8sc": "FP8-SC", "fp8mx": "MXFP8",
              "nvfp4": "NVFP4"}  # fmt: skip


def _target(node: ast.expr) -> str:
    return ast.unparse(node)


def _read(fn: ast.FunctionDef, helpers: dict[str, ast.FunctionDef], out: dict[str, Any],
          lines: dict[str, int]) -> None:  # fmt: skip
    for st in fn.body:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            name = _target(st.value.func)
            if name == "_enable_overlap_param_gather_with_optimizer_step":
                out["overlap_param_gather_with_optimizer_step"] = True
                lines["overlap_param_gather_with_optimizer_step"] = st.lineno
            elif name in helpers:
                _read(helpers[name], helpers, out, lines)
            elif name == LAYOUT_HELPER:
                out["pipeline_model_parallel_layout"] = _helper_layout(st.value, out)
                lines["pipeline_model_parallel_layout"] = st.lineno
            elif name == "set_cuda_graph_modules" and len(st.value.args) == 2:
                out["cuda_graph_scope"] = ast.literal_eval(st.value.args[1])
                lines["cuda_graph_scope"] = st.lineno
        if not isinstance(st, ast.Assign) or len(st.targets) != 1:
            continue
        tgt = _target(st.targets[0])
        call = st.value if isinstance(st.value, ast.Call) else None
        if tgt == "cfg" and call is not None:  # cfg = other_config() / _with_global_batch_size
            inner = call.args[0] if call.args and isinstance(call.args[0], ast.Call) else call
            if _target(inner.func) in helpers:
                _read(helpers[_target(inner.func)], helpers, out, lines)
            if _target(call.func) == "_with_global_batch_size":  # llama/common.py:44-46
                out["global_batch_size"] = ast.literal_eval(call.args[1])
                lines["global_batch_size"] = st.lineno
            continue
        if tgt == "cfg.comm_overlap" and isinstance(st.value, ast.Call):
            for kw in st.value.keywords:
                if kw.arg == "tp_comm_overlap" and isinstance(kw.value, ast.Constant):
                    out["tp_comm_overlap"], lines["tp_comm_overlap"] = kw.value.value, st.lineno
        elif tgt == "cfg.comm_overlap.tp_comm_overlap_cfg":
            out["tp_comm_overlap"], lines["tp_comm_overlap"] = True, st.lineno
        elif tgt.startswith("cfg.optimizer.") and tgt.endswith(("_dtype", "_optimizer")):
            v = st.value  # torch.bfloat16 -> "bfloat16"; use_precision_aware_optimizer: a bool
            field = tgt.rsplit(".", 1)[1]
            if isinstance(v, ast.Attribute) and _target(v.value) == "torch":
                out[field], lines[field] = v.attr, st.lineno
            elif isinstance(v, ast.Constant):
                out[field], lines[field] = v.value, st.lineno
        elif tgt.startswith(("cfg.model.", "cfg.train.", "cfg.comm_overlap.")):
            try:
                value = ast.literal_eval(st.value)
            except ValueError:
                continue
            field = tgt.rsplit(".", 1)[1]
            out[field], lines[field] = value, st.lineno


def flat_rows(repo: str, tag: str = "v0.6.0", release: str = "26.08") -> list[dict]:
    """The recipe rows of every H100 pre-training function at ``tag`` (module doc)."""
    files = subprocess.run(["git", "--git-dir", repo, "ls-tree", "-r", "--name-only", tag,
                            "src/megatron/bridge/perf_recipes"], check=True,
                           capture_output=True, text=True).stdout.split()  # fmt: skip
    rows = []
    for path in [f for f in files if "/h100/" in f and not f.endswith("__init__.py")]:
        src = subprocess.run(["git", "--git-dir", repo, "show", f"{tag}:{path}"], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        tree = ast.parse(src)
        own = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        funcs = _library(repo, tag, tree) | own
        helper_map = _layout_map(repo, tag) if LAYOUT_HELPER in src else None
        for name, fn in own.items():
            m = FUNC.match(name)
            if not m or m.group(1) not in MODELS or m.group(3) not in PRECISIONS:
                continue
            got: dict[str, Any] = {"_layout_map": helper_map}
            lines: dict[str, int] = {}
            _read(fn, funcs, got, lines)
            rows.append(_row(got, lines, release, tag, path, fn, m))
    return rows


def _library(repo: str, tag: str, tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The library recipes (:data:`LIBRARY`) the module ``tree`` imports, under the name it
    binds, with the functions of their file (which they call in turn)."""
    bound = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
             for a in n.names}  # fmt: skip
    out: dict[str, ast.FunctionDef] = {}
    for alias, (path, target) in LIBRARY.items():
        if alias not in bound:
            continue
        lib = subprocess.run(["git", "--git-dir", repo, "show", f"{tag}:{path}"], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        fns = {n.name: n for n in ast.parse(lib).body if isinstance(n, ast.FunctionDef)}
        out |= fns | {alias: fns[target]}
    return out


def _layout_map(repo: str, tag: str) -> ast.Dict:
    """The ``layout_map`` literal of :data:`LAYOUT_HELPER` at ``tag``."""
    lib = subprocess.run(["git", "--git-dir", repo, "show", f"{tag}:{LAYOUT_FILE}"], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    fn = next(n for n in ast.parse(lib).body
              if isinstance(n, ast.FunctionDef) and n.name == LAYOUT_HELPER)  # fmt: skip
    return next(n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                and _target(n.targets[0]) == "layout_map" and isinstance(n.value, ast.Dict))  # fmt: skip


def _helper_layout(call: ast.Call, got: dict[str, Any]) -> str:
    """The layout string :data:`LAYOUT_HELPER` sets for ``call`` given the settings ``got``
    read so far, ``got["_layout_map"]`` the helper's map (its layout argument, else the map's
    entry for (PP, VP); "" where none)."""
    args = call.args[1:] + [k.value for k in call.keywords if k.arg == "layout"]
    if args:
        return ast.literal_eval(args[0]) or ""
    pp = got.get("pipeline_model_parallel_size") or 1
    vp = got.get("virtual_pipeline_model_parallel_size") or 1
    last = ["mtp"] * got.get("mtp_num_layers", 1) + ["loss"]
    table: ast.Dict = got["_layout_map"]
    for key, value in zip(table.keys, table.values, strict=True):
        if key is not None and ast.literal_eval(key) == (pp, vp):
            stages = _list_expr(value, last)
            return "|".join("".join(LETTERS[k] for k in st) for st in stages) if stages else ""
    return ""


def _list_expr(node: ast.expr, last: list[str]) -> Any:
    """Evaluate the map's list arithmetic (lists, strings, ints, ``+``, ``*``, ``last_layer``)."""
    if isinstance(node, ast.Name) and node.id == "last_layer":
        return list(last)
    if isinstance(node, ast.List):
        return [_list_expr(e, last) for e in node.elts]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        a, b = _list_expr(node.left, last), _list_expr(node.right, last)
        return a + b if isinstance(node.op, ast.Add) else a * b
    raise ValueError(f"layout_map: unexpected {ast.unparse(node)!r}")


def _row(got: dict, lines: dict, release: str, tag: str, path: str, fn, m) -> dict:
    tp = got.get("tensor_model_parallel_size") or 1
    pp = got.get("pipeline_model_parallel_size") or 1
    cp = got.get("context_parallel_size") or 1
    vp = got.get("virtual_pipeline_model_parallel_size") or 1
    n = int(m.group(2))
    r: dict[str, Any] = {"release": release, "tag": tag, "preset": fn.name,
         "model": MODELS[m.group(1)], "gpu": "H100", "precision": PRECISIONS[m.group(3)],
         "task": "pretrain", "num_gpus": n, "tp": tp, "pp": pp, "vp": vp, "cp": cp,
         "ep": got.get("expert_model_parallel_size") or 1,
         "etp": got.get("expert_tensor_parallel_size") or "",
         "mbs": got.get("micro_batch_size") or 1, "gbs": got.get("global_batch_size")}  # fmt: skip
    gran = got.get("recompute_granularity")
    mods = got.get("recompute_modules")
    if gran in ("full", "selective") or mods:
        r["recompute_granularity"] = gran
        if gran == "full":
            r["recompute_method"] = got.get("recompute_method") or ""
            r["recompute_num_layers"] = got.get("recompute_num_layers") or ""
        if gran is None and mods:  # modules only act under selective (assumption: the
            gran = r["recompute_granularity"] = "selective"  # base recipe's, as 26.06.01's)
        if gran == "selective" and mods:
            r["recompute_modules"] = "[" + ",".join(mods) + "]"
    if got.get("cuda_graph_impl") not in (None, "none"):
        scope = got.get("cuda_graph_scope") or ""
        r["cuda_graph_impl"] = got["cuda_graph_impl"]
        r["cuda_graph_scope"] = ",".join(scope) if isinstance(scope, list) else scope
    disp = got.get("moe_token_dispatcher_type")
    if disp and MODELS[m.group(1)] not in ("LLAMA3_8B", "LLAMA3_70B", "LLAMA3.1_405B"):
        r["moe_token_dispatcher_type"] = disp
        if disp == "flex" and got.get("moe_flex_dispatcher_backend"):
            r["moe_flex_dispatcher_backend"] = got["moe_flex_dispatcher_backend"]
    if got.get("moe_a2a_overlap") or got.get("overlap_moe_expert_parallel_comm"):
        r["moe_a2a_overlap"] = True
        r["delay_wgrad_compute"] = bool(got.get("delay_wgrad_compute"))
    if got.get("pipeline_model_parallel_layout"):
        r["pipeline_model_parallel_layout"] = got["pipeline_model_parallel_layout"]
    aware = got.get("use_precision_aware_optimizer")
    if aware is not None:  # recipes.csv's form; only the dtypes the recipe sets (else fp32)
        dtypes = ", ".join(f"{k}={got[k]}" for k in OPTIMIZER_DTYPES if k in got)
        r["precision_aware_optimizer"] = f"{aware}; {dtypes}" if aware and dtypes else str(aware)
    r.update(_mtp_and_drop(got))
    sp = got.get("sequence_parallel", tp > 1)
    r["tp_comm_overlap_effective"] = bool(got.get("tp_comm_overlap") and tp > 1 and sp)
    r["overlap_param_gather_with_optimizer_step"] = bool(
        got.get("overlap_param_gather_with_optimizer_step")
    )
    cited = ", ".join(f"{k}@{v}" for k, v in sorted(lines.items(), key=lambda kv: kv[1])
                      if k not in ("seq_length",))  # fmt: skip
    lib = [p for a, (p, _) in LIBRARY.items() if a in ast.unparse(fn)]
    via = f"; from the library recipe {tag}:{lib[0]} (the lines of what it sets)" if lib else ""
    r["source"] = f"{tag}:{path}:{fn.lineno} ({fn.name}; {cited}{via})"
    r["_layout"] = "tensor_model_parallel_size" in got  # else the library recipe's (not read)
    return r


def _mtp_and_drop(got: dict) -> dict:
    """``mtp_num_layers`` and ``moe_token_drop`` in ``recipes.csv``'s forms (read by
    ``sim.runs.bridge_recipes.recipe_flags``): the depths, then ``; mtp_use_repeated_layer=True``
    where one MTP layer's weights serve every depth; ``capacity_factor=<c>
    pad_to_capacity=<bool>`` where the recipe sets a capacity factor (Super's 26.08 library
    recipe: 1.10, padded; ``recipes/nemotronh/h100/nemotron_3_super.py:203-204``).

    >>> _mtp_and_drop({"mtp_num_layers": 2, "mtp_use_repeated_layer": True,
    ...                "moe_expert_capacity_factor": 1.1, "moe_pad_expert_input_to_capacity": True})
    {'mtp_num_layers': '2; mtp_use_repeated_layer=True', 'moe_token_drop': 'capacity_factor=1.1 pad_to_capacity=True'}
    """
    out = {}
    if got.get("mtp_num_layers"):
        rep = "; mtp_use_repeated_layer=True" if got.get("mtp_use_repeated_layer") else ""
        out["mtp_num_layers"] = f"{got['mtp_num_layers']}{rep}"
    factor = got.get("moe_expert_capacity_factor")
    if factor is not None and factor > 0:  # < 0: None (transformer_config.py:1836-1838)
        pad = bool(got.get("moe_pad_expert_input_to_capacity"))
        out["moe_token_drop"] = f"capacity_factor={factor:g} pad_to_capacity={pad}"
    return out

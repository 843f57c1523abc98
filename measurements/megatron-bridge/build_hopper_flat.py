"""Rows of ``hopper_recipes.csv`` for 26.08 (v0.6.0): Megatron-Bridge's flat H100 recipes
(``src/megatron/bridge/perf_recipes/<family>/h100/*.py``, functions
``<model>_pretrain_<n>gpu_h100_<precision>_config``), read with :mod:`ast`.

Each function's statements are read in order, a call of a function that
:meth:`Source.lookup` resolves (the same file, or through ``from megatron.bridge.<module>
import <name> [as <alias>]`` to a file of :data:`LIBRARY_DIRS`: the starting library recipe
``recipes/.../h100/<model>.py``, ``_pretrain_common``, the perf family's ``common.py``) read in
its place, in its own file, with its constant arguments bound (``if <parameter> == <constant>``
takes its branch, :func:`_taken`); ``return <call>`` likewise: ``cfg.model.<field> =
<constant>`` (layout, recompute, CUDA graphs, dispatcher, router fusion, MTP, expert capacity,
offloading, the fused loss), ``cfg.train.{global,micro}_batch_size``, ``cfg.optimizer.
use_precision_aware_optimizer`` and its ``*_dtype`` fields (``torch.<dtype>``), the optimizer
kind of the factory that builds it (:func:`_optimizer_kind`), ``cfg.comm_overlap =
CommOverlapConfig(tp_comm_overlap=..., overlap_moe_expert_parallel_comm=...,
delay_wgrad_compute=...)``, ``cfg.comm_overlap.tp_comm_overlap_cfg = <userbuffers config>``
(TP overlap), ``_enable_overlap_param_gather_with_optimizer_step(cfg)``
(``perf_recipes/_common.py:90-94``) and :data:`FLEX` (flex dispatch on an H100). TP overlap
is effective with TP > 1 and sequence parallelism (``training/comm_overlap.py``,
``recipes.csv``'s rule); BF16 with Adam runs the precision-aware optimizer (:data:`BF16_ADAM`).
DeepSeek-V3's layout helper (:data:`LAYOUT_HELPER`) is evaluated where it is called. A line of
another file is cited ``<field>@<file under src/megatron/bridge/>:<line>``. Used by
``build_hopper_recipes.py``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from typing import Any

FUNC = re.compile(r"^(\w+?)_pretrain_(\d+)gpu_h100_(\w+?)_config$")
MODELS = {"llama3_8b": "LLAMA3_8B", "llama3_70b": "LLAMA3_70B", "llama31_405b": "LLAMA3.1_405B",
          "deepseek_v3": "DeepSeekV3", "gpt_oss_120b": "GPT OSS 120B",
          "qwen3_30b_a3b": "Qwen3_30B_a3B", "qwen3_235b_a22b": "Qwen3_235B_a22B",
          "kimi_k2": "Kimi_K2", "nemotron_3_nano": "Nemotron_3_Nano",
          "nemotron_3_super": "Nemotron_3_Super"}  # fmt: skip
ROOT = "src/megatron/bridge/"
"""Where a name is followed (its imports, ``from megatron.bridge.<module> import <name>``, read
at the tag): a perf function's starting library recipe (``recipes/...``) and the helpers it
calls, whatever the perf file binds it as (e.g. ``perf_recipes/qwen/common.py:22-24``:
``qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config as qwen3_30b_a3b_pretrain_config``)."""
LIBRARY_DIRS = (ROOT + "recipes/", ROOT + "perf_recipes/")
"""Files whose functions are read in place of a call: the library recipes and the perf
recipes' shared helpers (``_pretrain_common``, ``<family>/common.py``); nothing else (the
training code's functions act on ``model_config``, not ``cfg``)."""
FLEX = "apply_flex_dispatcher_backend"
"""``training/flex_dispatcher_backend.py:33-80`` at v0.6.0: on an H100 (compute capability
9) a ``deepep`` or ``hybridep`` backend sets ``moe_token_dispatcher_type = "flex"`` (78-79) and
``moe_shared_expert_overlap = False`` (80); another value is skipped (73-76)."""
BF16_ADAM = "scripts/performance/run_script.py:149-151"
"""The launcher's rule at v0.6.0: BF16 with Adam runs the precision-aware optimizer, whatever
the recipe set (its dtypes stay the recipe's)."""
LAYOUT_HELPER = "set_deepseek_v3_pipeline_model_parallel_layout"
"""``recipes/deepseek/h100/deepseek_v3.py:50-88`` at v0.6.0 (re-exported by
``recipes/deepseek/deepseek_v3.py:19-21``, imported by ``perf_recipes/deepseek/common.py``):
a layout argument is the layout (:61-63); without one, the entry of its ``layout_map``
(:69-77) for (PP, VP), the last stage ``["mtp"] * mtp_num_layers + ["loss"]`` (:65-66; the
library recipe sets ``mtp_num_layers = 1``, :123)."""
LAYOUT_FILE = "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py"
LETTERS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
"""Megatron's layer letters (``pipeline_parallel_layer_layout.py``'s ``char2layer_type``)."""
DENSE = ("LLAMA3_8B", "LLAMA3_70B", "LLAMA3.1_405B")
"""Models without experts: their dispatcher, capacity and router settings are moot."""
OPTIMIZER_DTYPES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
"""``cfg.optimizer`` dtype fields of the precision-aware optimizer (``OptimizerConfig``)."""
PRECISIONS = {"bf16": "BF16", "fp8cs": "FP8-CS", "fp8sc": "FP8-SC", "fp8mx": "MXFP8",
              "nvfp4": "NVFP4"}  # fmt: skip


class Source:
    """The Python files of ``repo`` at ``tag``, parsed once; :meth:`lookup` follows a name
    through its imports to the function it is (:data:`ROOT`)."""

    def __init__(self, repo: str, tag: str) -> None:
        self.repo, self.tag = repo, tag
        self.files = set(_git(repo, "ls-tree", "-r", "--name-only", tag, ROOT).split())
        self._trees: dict[str, ast.Module] = {}
        self.own = ""  # the perf file being read (its lines are cited bare)

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(_git(self.repo, "show", f"{self.tag}:{path}"))
        return self._trees[path]

    def module_file(self, module: str) -> str | None:
        base = "src/" + module.replace(".", "/")
        return next((p for p in (base + ".py", base + "/__init__.py") if p in self.files), None)

    def lookup(self, path: str, name: str, depth: int = 0) -> tuple[str, ast.FunctionDef] | None:
        """``(file, function)`` that ``name`` is in the module ``path``, None where it is not
        a function of :data:`ROOT` (or is one outside :data:`LIBRARY_DIRS` but ``path``)."""
        tree = self.tree(path)
        for n in tree.body:
            if isinstance(n, ast.FunctionDef) and n.name == name:
                return (path, n) if depth == 0 or path.startswith(LIBRARY_DIRS) else None
        for n in tree.body:
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("megatron.bridge."):
                for a in n.names:
                    if (a.asname or a.name) == name:
                        src = self.module_file(n.module or "")
                        return self.lookup(src, a.name, depth + 1) if src else None
        return None


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def _target(node: ast.expr) -> str:
    return ast.unparse(node)


def _read(fn: ast.FunctionDef, path: str, src: Source, out: dict[str, Any],
          lines: dict[str, str], env: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Read ``fn`` (of file ``path``) into ``out`` in statement order (module doc); a call of
    a function :meth:`Source.lookup` resolves is read in its place, in its own file."""

    def at(st: ast.stmt) -> str:
        return str(st.lineno) if path == src.own else f"{path.removeprefix(ROOT)}:{st.lineno}"

    def follow(call: ast.Call) -> None:
        found = src.lookup(path, _target(call.func))
        if found:  # its constant arguments bound to its parameters (for `if` branches)
            names = [a.arg for a in found[1].args.args]
            bound = {k.arg: k.value for k in call.keywords if k.arg} | dict(
                zip(names, call.args, strict=False)
            )
            env = {k: v.value for k, v in bound.items() if isinstance(v, ast.Constant)}
            _read(found[1], found[0], src, out, lines, env)

    for st in _taken(fn.body, env or {}, out):
        call = st.value if isinstance(st, (ast.Expr, ast.Return, ast.Assign)) else None
        call = call if isinstance(call, ast.Call) else None
        if isinstance(st, (ast.Expr, ast.Return)) and call is not None:
            name = _target(call.func)
            if name == "_enable_overlap_param_gather_with_optimizer_step":
                out["overlap_param_gather_with_optimizer_step"] = True
                lines["overlap_param_gather_with_optimizer_step"] = at(st)
            elif name == LAYOUT_HELPER:
                out["pipeline_model_parallel_layout"] = _helper_layout(call, out)
                lines["pipeline_model_parallel_layout"] = at(st)
            elif name == "set_cuda_graph_modules" and len(call.args) == 2:
                out["cuda_graph_scope"] = ast.literal_eval(call.args[1])
                lines["cuda_graph_scope"] = at(st)
            elif name == FLEX:
                if out.get("moe_flex_dispatcher_backend") in ("deepep", "hybridep"):
                    out["moe_token_dispatcher_type"] = "flex"
                    lines["moe_token_dispatcher_type"] = at(st)
            else:
                follow(call)
        if not isinstance(st, ast.Assign) or len(st.targets) != 1:
            continue
        if isinstance(st.targets[0], ast.Tuple) and call is not None:  # opt_cfg, sched = f()
            kind = _optimizer_kind(src, path, call)
            if kind:
                out["optimizer_type"], lines["optimizer_type"] = kind, at(st)
            continue
        tgt = _target(st.targets[0])
        if tgt == "cfg" and call is not None:  # cfg = other_config() / _with_global_batch_size
            inner = call.args[0] if call.args and isinstance(call.args[0], ast.Call) else call
            follow(inner)
            if _target(call.func) == "_with_global_batch_size":  # llama/common.py:44-46
                out["global_batch_size"] = ast.literal_eval(call.args[1])
                lines["global_batch_size"] = at(st)
            continue
        if tgt == "cfg.comm_overlap" and call is not None:  # a new CommOverlapConfig
            for k in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "tp_comm_overlap"):
                out.pop(k, None)
            for kw in call.keywords:
                if kw.arg in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
                    out[kw.arg], lines[kw.arg] = ast.literal_eval(kw.value), at(st)
                if kw.arg == "tp_comm_overlap" and isinstance(kw.value, ast.Constant):
                    out["tp_comm_overlap"], lines["tp_comm_overlap"] = kw.value.value, at(st)
        elif tgt == "cfg.comm_overlap.tp_comm_overlap_cfg":
            out["tp_comm_overlap"], lines["tp_comm_overlap"] = True, at(st)
        elif tgt.startswith("cfg.optimizer.") and tgt.endswith(("_dtype", "optimizer")):
            v = st.value  # torch.bfloat16 -> "bfloat16"; use_precision_aware_optimizer: a bool
            field = "optimizer_type" if tgt == "cfg.optimizer.optimizer" else tgt.rsplit(".", 1)[1]
            if isinstance(v, ast.Attribute) and _target(v.value) == "torch":
                out[field], lines[field] = v.attr, at(st)
            elif isinstance(v, ast.Constant):
                out[field], lines[field] = v.value, at(st)
        elif tgt.startswith(("cfg.model.", "cfg.train.", "cfg.comm_overlap.")):
            try:
                value = ast.literal_eval(st.value)
            except ValueError:
                continue
            field = tgt.rsplit(".", 1)[1]
            out[field], lines[field] = value, at(st)


def _taken(body: list[ast.stmt], env: dict[str, Any], got: dict[str, Any]) -> Iterator[ast.stmt]:
    """``body`` with each ``if <x> == <constant>`` whose ``<x>`` is known replaced by the
    statements of its taken branch; other ``if`` are skipped. ``<x>``: a parameter ``env``
    binds (``recipes/kimi/h100/kimi_k2.py:56-77`` at v0.6.0: ``_apply_kimi_k2_optimizer(cfg,
    "muon")``, :200) or ``getattr(cfg.model, "<field>", <default>)`` / ``cfg.model.<field>``
    of a field read so far (``perf_recipes/_common.py:86-87``: HybridEP's 32 SMs); a
    generator, so that a test sees the statements before it."""
    for st in body:
        test = st.test if isinstance(st, ast.If) else None
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                and isinstance(test.comparators[0], ast.Constant)):  # fmt: skip
            known, value = _known(test.left, env, got)
            if known:
                taken = st.body if value == test.comparators[0].value else st.orelse
                yield from _taken(taken, env, got)
        elif not isinstance(st, ast.If):
            yield st


def _known(node: ast.expr, env: dict[str, Any], got: dict[str, Any]) -> tuple[bool, Any]:
    """Whether :func:`_taken` knows the value of ``node``, and the value."""
    if isinstance(node, ast.Name):
        return node.id in env, env.get(node.id)
    field = None
    if isinstance(node, ast.Attribute) and _target(node.value) == "cfg.model":
        field = node.attr
    elif (isinstance(node, ast.Call) and _target(node.func) == "getattr" and len(node.args) >= 2
            and _target(node.args[0]) == "cfg.model" and isinstance(node.args[1], ast.Constant)):  # fmt: skip
        field = str(node.args[1].value)
    return (field in got, got.get(field)) if field else (False, None)


def _optimizer_kind(src: Source, path: str, call: ast.Call) -> str | None:
    """The ``optimizer`` keyword of the ``OptimizerConfig`` the library factory ``call``
    builds (``recipes/utils/optimizer_utils.py:78-79`` ``dist_muon``, 140-141 ``adam`` at
    v0.6.0), None where ``call`` is not such a factory."""
    found = src.lookup(path, _target(call.func))
    for n in ast.walk(found[1]) if found else ():
        if isinstance(n, ast.Call) and _target(n.func) == "OptimizerConfig":
            for k in n.keywords:
                if k.arg == "optimizer" and isinstance(k.value, ast.Constant):
                    return str(k.value.value)
    return None


def flat_rows(repo: str, tag: str = "v0.6.0", release: str = "26.08") -> list[dict]:
    """The recipe rows of every H100 pre-training function at ``tag`` (module doc)."""
    src = Source(repo, tag)
    rows = []
    for path in sorted(f for f in src.files if f.startswith(ROOT + "perf_recipes/")
                       and "/h100/" in f and f.endswith(".py") and not f.endswith("__init__.py")):  # fmt: skip
        src.own = path
        helper_map = _layout_map(src)
        for fn in src.tree(path).body:
            m = FUNC.match(fn.name) if isinstance(fn, ast.FunctionDef) else None
            if not m or m.group(1) not in MODELS or m.group(3) not in PRECISIONS:
                continue
            got: dict[str, Any] = {"_layout_map": helper_map}
            lines: dict[str, str] = {}
            _read(fn, path, src, got, lines)
            rows.append(_row(got, lines, release, tag, path, fn, m))
    return rows


def _layout_map(src: Source) -> ast.Dict:
    """The ``layout_map`` literal of :data:`LAYOUT_HELPER` at the tag."""
    fn = next(n for n in src.tree(LAYOUT_FILE).body
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
    if gran in ("full", "selective") or (mods and "recompute_granularity" not in got):
        r["recompute_granularity"] = gran
        if gran == "full":
            r["recompute_method"] = got.get("recompute_method") or ""
            r["recompute_num_layers"] = got.get("recompute_num_layers") or ""
        if gran is None and mods and "recompute_granularity" not in got:  # modules act
            gran = r["recompute_granularity"] = "selective"  # under selective (assumption)
        if gran == "selective" and mods:
            r["recompute_modules"] = "[" + ",".join(mods) + "]"
    if got.get("cuda_graph_impl") not in (None, "none"):
        scope = got.get("cuda_graph_scope") or ""
        r["cuda_graph_impl"] = got["cuda_graph_impl"]
        r["cuda_graph_scope"] = ",".join(scope) if isinstance(scope, list) else scope
    disp = got.get("moe_token_dispatcher_type")
    if disp and MODELS[m.group(1)] not in DENSE:
        r["moe_token_dispatcher_type"] = disp
        if disp == "flex" and got.get("moe_flex_dispatcher_backend"):
            r["moe_flex_dispatcher_backend"] = got["moe_flex_dispatcher_backend"]
    if got.get("moe_a2a_overlap") or got.get("overlap_moe_expert_parallel_comm"):
        r["moe_a2a_overlap"] = True
        r["delay_wgrad_compute"] = bool(got.get("delay_wgrad_compute"))
    if got.get("pipeline_model_parallel_layout"):
        r["pipeline_model_parallel_layout"] = got["pipeline_model_parallel_layout"]
    aware = got.get("use_precision_aware_optimizer")
    if r["precision"] == "BF16" and got.get("optimizer_type", "adam") == "adam":
        aware = True  # the launcher's rule (BF16_ADAM), whatever the recipe set
    if aware is not None:  # recipes.csv's form; only the dtypes the recipe sets (else fp32)
        dtypes = ", ".join(f"{k}={got[k]}" for k in OPTIMIZER_DTYPES if k in got)
        r["precision_aware_optimizer"] = f"{aware}; {dtypes}" if aware and dtypes else str(aware)
    r |= _library_columns(got, MODELS[m.group(1)])
    sp = got.get("sequence_parallel", tp > 1)
    r["tp_comm_overlap_effective"] = bool(got.get("tp_comm_overlap") and tp > 1 and sp)
    r["overlap_param_gather_with_optimizer_step"] = bool(
        got.get("overlap_param_gather_with_optimizer_step")
    )
    own = sorted((int(v), k) for k, v in lines.items() if v.isdigit())
    lib = sorted((v.split(":")[0], int(v.split(":")[1]), k) for k, v in lines.items()
                 if not v.isdigit())  # fmt: skip
    cited = ", ".join([f"{k}@{v}" for v, k in own if k != "seq_length"]
                      + [f"{k}@{f}:{v}" for f, v, k in lib if k != "seq_length"])  # fmt: skip
    r["source"] = f"{tag}:{path}:{fn.lineno} ({fn.name}; {cited})"
    r["_layout"] = "tensor_model_parallel_size" in got  # else no layout was read
    return r


def _library_columns(got: dict, model: str) -> dict[str, Any]:
    """``recipes.csv``'s columns of the settings a library recipe sets beyond the perf
    function's (module doc): MTP depth, activation offloading, expert capacity, the fused
    router and loss (an explicit ``False`` is an off-switch, ``bridge_recipes.recipe_flags``)."""
    r: dict[str, Any] = _mtp_and_drop(got)
    if model in DENSE:
        r.pop("moe_token_drop", None)
    if got.get("fine_grained_activation_offloading") and got.get("offload_modules"):
        r["activation_offloading"] = (
            "fine_grained offload_modules=[" + ",".join(got["offload_modules"]) + "]"
        )
    sms = got.get("moe_hybridep_num_sms") or got.get("moe_flex_dispatcher_num_sms")
    if got.get("moe_flex_dispatcher_backend") == "hybridep" and sms:  # the flex backend's SMs,
        r["moe_hybridep_num_sms"] = sms  # one option in pipesim (sim.runs.megatron_overlap)
    emb = got.get("account_for_embedding_in_pipeline_split")
    loss = got.get("account_for_loss_in_pipeline_split")
    if emb or loss:
        r["account_for_embedding_loss_in_pp_split"] = f"embedding={bool(emb)} loss={bool(loss)}"
    if got.get("moe_router_fusion") is not None and model not in DENSE:
        r["moe_router_fusion"] = bool(got["moe_router_fusion"])
    if got.get("cross_entropy_loss_fusion") is not None:
        r["cross_entropy_loss_fusion"] = bool(got["cross_entropy_loss_fusion"])
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

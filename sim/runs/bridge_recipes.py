"""Megatron-Bridge performance-recipe settings as Megatron-LM flags, for the rows of
``megatron_bridge_blackwell.csv``.

Megatron-Bridge's performance tables (``docs/performance-summary*.md``) omit the settings that
decide time and memory besides the layout: recompute, communication overlap, CUDA graphs, the
MoE dispatcher, MTP, the distributed optimizer. They live in the recipes of each release
(``scripts/performance``, ``src/megatron/bridge/perf_recipes/``); a recipe table (one row per
distinct configuration, keyed by the 13 columns of :data:`KEY`, with the traced settings and
the source line of each: ``measurements/megatron-bridge/recipes.csv``, read from NVIDIA's code at
each row's release, see its README) gives
them. This module turns one of its rows into the flags :mod:`sim.runs.megatron_args` maps, so
each setting is judged by the same table as a launch command's.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import InputError
from sim.runs.bridge_env import expandable_segments
from sim.runs.bridge_software import release_flags

SHIPPED = Path(__file__).resolve().parents[2] / "measurements" / "megatron-bridge" / "recipes.csv"
"""The recipe table of a source checkout (absent from an installed package: then None is given
and Bridge rows run with :mod:`sim.runs.bridge_fallback`)."""
KEY = ("model", "gpu", "num_gpus", "precision", "tp", "pp", "vp", "cp", "ep", "etp", "mbs",
       "gbs", "task")  # fmt: skip
"""Columns that identify a configuration in both the measured CSV and the recipe table."""


LORA_RANK, LORA_TARGETS = 16, ("q_proj", "k_proj", "v_proj")
"""Megatron-Bridge's performance LoRA recipes (the tables' ``lora`` rows, Llama-3 70B):
``LoRA(dim=16, alpha=32)`` (NVIDIA-NeMo/Megatron-Bridge@067f987df0
``src/megatron/bridge/recipes/llama/llama3.py:2472-2475``, ``llama3_70b_peft_config``) on
``target_modules=['linear_qkv']`` (``scripts/performance/configs/llama/llama3_llm_finetune.py``
lines 219 and 260, ``llama3_70b_lora_config_gb300`` / ``_gb200``; traced per release in
``/work/research/bridge/traces/t00315.json``, ``t00316``, ``t00369``, ``t00370``). pipesim's
adapters use Hugging Face's names: the fused ``linear_qkv`` is q, k and v."""
LORA_QKV = (
    "approximated: Megatron-Bridge's one LoRA adapter on the fused linear_qkv (A [h, 16], "
    "B [16, q + 2 kv]) is simulated as three adapters on q, k and v (A [h, 16] each): 2 h r "
    "more adapter parameters and two more rank-16 GEMMs per layer"
)
"""What the simulated adapters change of the run's."""


def _cell(v: Any) -> str:
    if isinstance(v, float) and math.isnan(v):
        return ""
    if isinstance(v, float) and v == int(v):
        return str(int(v))
    return str(v).strip()


def recipe_key(row: pd.Series | dict) -> tuple[str, ...]:
    """The :data:`KEY` of a row, as text (``8.0`` and ``8`` alike, empty for missing)."""
    return tuple(_cell(row.get(k)) for k in KEY)


def _true(text: str) -> bool:
    return text.strip().lower().startswith("true")


def _false(text: str) -> bool:
    return text.strip().lower().startswith("false")


def _offload_flags(text: str) -> dict[str, Any]:
    """The table's ``activation_offloading`` cell (``cpu_offloading num_layers=40
    weights=False``, ``fine_grained offload_modules=[fused_group_mlp]``) as Megatron's flags."""
    if text.startswith("cpu_offloading"):
        m = re.search(r"num_layers=(\d+)", text)
        return {"cpu-offloading": True, "cpu-offloading-num-layers": m.group(1) if m else "1"}
    if text.startswith("fine_grained"):
        m = re.search(r"offload_modules=\[([^\]]*)\]", text)
        return {"fine-grained-activation-offloading": True,
                "offload-modules": m.group(1) if m else ""}  # fmt: skip
    return {}


def _loss_flags(get: dict[str, str]) -> dict[str, Any]:
    """The table's ``cross_entropy_loss_fusion`` / ``cross_entropy_fusion_impl`` and
    ``gradient_accumulation_fusion`` cells as Megatron's flags (their memory:
    :func:`sim.runs.megatron_memory_flags.loss_options`). ``auto`` gradient-accumulation fusion is
    on where Transformer Engine or Apex is installed (Megatron-Bridge ``fusions.
    can_enable_gradient_accumulation_fusion``; the NeMo container has TE), so only ``False``
    turns it off."""
    f: dict[str, Any] = {}
    if _false(get.get("cross_entropy_loss_fusion", "")):
        f["cross-entropy-loss-fusion"] = False  # an explicit off (recipe_flags)
    if _true(get.get("cross_entropy_loss_fusion", "")):
        f["cross-entropy-loss-fusion"] = True
        impl = get.get("cross_entropy_fusion_impl", "").split(" ")[0]
        if impl:
            f["cross-entropy-fusion-impl"] = impl
    if _false(get.get("gradient_accumulation_fusion", "")):
        f["no-gradient-accumulation-fusion"] = True
    return f


def _kept16_flags(get: dict[str, str]) -> dict[str, Any]:
    """The table's ``first_last_layers_bf16`` cell (``True (start=0, end=14)``) and the
    ``keep_mtp_spec_in_bf16=True``, ``fp8_output_proj=True`` and
    ``quant_recipe=load_quantization_recipe("'<file>'",)`` entries of ``precision_other`` as the
    flags :mod:`sim.runs.precision_flags` reads."""
    f: dict[str, Any] = {}
    cell = get.get("first_last_layers_bf16", "")
    if _true(cell):
        f["first-last-layers-bf16"] = True
        for key in ("start", "end"):
            m = re.search(rf"{key}=(\d+)", cell)
            if m:
                f[f"num-layers-at-{key}-in-bf16"] = m.group(1)
    other = get.get("precision_other", "")
    if "keep_mtp_spec_in_bf16=True" in other:
        f["keep-mtp-spec-in-bf16"] = True
    if "fp8_output_proj=True" in other:  # the output layer in MXFP8 (sim.runs.precision_flags)
        f["fp8-output-proj"] = True
    m = re.search(r"load_quantization_recipe\([\"']*([^\"',)]+)", other)
    if m:
        f["quant-recipe"] = m.group(1)
    return f


def _token_drop_flags(text: str) -> dict[str, Any]:
    """The table's ``moe_token_drop`` cell (``capacity_factor=1.0 pad_to_capacity=True``, or
    ``dropless ...``) as Megatron's flags: with every expert padded to its capacity the
    dispatcher knows its sizes on the host and reads no token counts back
    (:mod:`sim.compute.moe`, step 2).

    >>> _token_drop_flags("capacity_factor=1.0 pad_to_capacity=True")
    {'moe-expert-capacity-factor': '1.0', 'moe-pad-expert-input-to-capacity': True}
    >>> _token_drop_flags("dropless (no capacity factor set)")
    {}
    """
    f: dict[str, Any] = {}
    m = re.search(r"capacity_factor=([0-9.]+)", text)
    if m:
        f["moe-expert-capacity-factor"] = m.group(1)
        if "pad_to_capacity=True" in text:
            f["moe-pad-expert-input-to-capacity"] = True
    return f


def _mtp_flags(text: str) -> dict[str, Any]:
    """The table's ``mtp_num_layers`` cell (``2``, ``2; mtp_use_repeated_layer=True``, ``0
    (default)``) as Megatron's flags: the depths, and ``--mtp-use-repeated-layer`` where one MTP
    layer's weights serve every depth (Megatron-Core ``MultiTokenPredictionBlock``; the Nemotron 3
    recipes set it: ``recipes.csv`` cites the line).

    >>> _mtp_flags("2; mtp_use_repeated_layer=True (recipes/nemotronh/nemotron_3_super.py:98)")
    {'mtp-num-layers': '2', 'mtp-use-repeated-layer': True}
    >>> _mtp_flags("1"), _mtp_flags("0 (default)")
    ({'mtp-num-layers': '1'}, {})
    """
    m = re.match(r"\s*(\d+)", text)
    if not m or int(m.group(1)) == 0:
        return {}
    f: dict[str, Any] = {"mtp-num-layers": m.group(1)}
    if "mtp_use_repeated_layer=True" in text:
        f["mtp-use-repeated-layer"] = True
    return f


NEMOTRON_H_ROUTER = {"moe-router-score-function": "sigmoid", "moe-router-dtype": "fp32",
                     "moe-router-load-balancing-type": "seq_aux_loss",
                     "moe-aux-loss-coeff": "1e-4"}  # fmt: skip
"""The Nemotron-H family's router, which its recipes do not state: Megatron-Bridge v0.4.1
``models/nemotronh/nemotron_h_provider.py`` lines 48-52 (the recipes that turn
``moe_router_fusion`` off are this family's; :mod:`sim.compute.router_unfused`). Nemotron 3
Ultra's rows keep the fused router but build the same router: their recipe
(NVIDIA-NeMo/Megatron-Bridge@067f987 ``perf_recipes/nemotronh/gb200/nemotronh.py`` line 237)
starts from ``recipes/nemotronh/h100/nemotron_3_ultra.py`` line 39, ``AutoBridge``, whose
``models/nemotronh/nemotron_h_bridge.py`` lines 310-314 set these (its loss is the fused
aux-loss kernels of :mod:`sim.compute.router_fused`); neither recipe overrides them."""


def recipe_flags(rec: dict[str, Any]) -> dict[str, Any]:
    """The Megatron-LM flags of one recipe-table row (module doc).

    A switch the row turns off (a :data:`SWITCHES` column, ``precision_aware_optimizer`` or
    ``cross_entropy_loss_fusion`` whose cell reads ``False ...``) is given as ``flag: False``:
    Megatron-LM's reader drops it (:func:`sim.runs.megatron_args.normalise`, the flag's default
    is off), and merged over flags that turn it on (the shared settings of
    :mod:`sim.runs.bridge_fallback`) it turns them off again
    (``measurements/megatron-bridge/hopper.md``, "Switches a recipe turns off").

    >>> recipe_flags({"overlap_grad_reduce": "False (run_script.py:95)"})
    {'overlap-grad-reduce': False}
    """
    get = {k: _cell(v) for k, v in rec.items()}
    f = _recompute_flags(get)
    f.update(_offload_flags(get.get("activation_offloading", "none")))
    graphs = get.get("cuda_graph_impl", "none")
    if graphs not in ("", "none") and "False" not in graphs:
        f["cuda-graph-impl"] = graphs
        if get.get("cuda_graph_scope"):
            f["cuda-graph-scope"] = get["cuda_graph_scope"]
    bucket = get.get("ddp_bucket_size", "").split(" ")[0]
    if bucket.isdigit():
        f["ddp-bucket-size"] = bucket
    f.update(_dispatch_flags(get))
    f.update(_token_drop_flags(get.get("moe_token_drop", "")))
    for col, flag in SWITCHES:
        if _true(get.get(col, "")):
            f[flag] = True
        elif _false(get.get(col, "")):
            f[flag] = False  # an explicit off (docstring)
    if "reuse_grad_buf_for_mxfp8_param_ag=true" in get.get("fp8_param_gather", "").lower():
        f["reuse-grad-buf-for-mxfp8-param-ag"] = True  # MXFP8 gather (sim.memory.precision)
    if "fp4_param_gather=true" in get.get("fp8_param_gather", "").lower():
        f["fp4-param-gather"] = True  # NVFP4 parameters gathered packed (sim.memory.param_cast)
    if _false(get.get("moe_router_fusion", "")):
        f["no-moe-router-fusion"] = True  # the eager router, stated (sim.compute.router_unfused)
    if get.get("model", "").startswith("Nemotron"):
        f.update(NEMOTRON_H_ROUTER)  # its provider's router, fused or eager (its doc)
    if _false(get.get("grad_reduce_in_fp32", "")):
        # Megatron-Core's gradient buffer in the parameters' dtype (sim.runs.megatron_args)
        f["grad-reduce-in-bf16"] = True
    f.update(_loss_flags(get))
    f.update(_kept16_flags(get))
    if "use_transformer_engine_op_fuser=True" in get.get("moe_other", ""):
        f["use-transformer-engine-op-fuser"] = True  # the fused grouped MLP (sim.compute.moe)
    if "moe_paged_stash=True" in get.get("moe_other", ""):
        f["moe-paged-stash"] = True  # its copies (sim.compute.paged_stash)
    f.update(_mtp_flags(get.get("mtp_num_layers", "")))
    if get.get("pipeline_model_parallel_layout"):
        # the table adds a legend after the string: "Etttt|...|tmL (E=embedding ...)"
        f["pipeline-model-parallel-layout"] = get["pipeline_model_parallel_layout"].split(" ")[0]
    split = get.get("account_for_embedding_loss_in_pp_split", "")  # "embedding=True loss=True"
    for part, flag in (("embedding=true", "account-for-embedding-in-pipeline-split"),
                       ("loss=true", "account-for-loss-in-pipeline-split")):  # fmt: skip
        if part in split.lower():
            f[flag] = True
    if expandable_segments(get):  # an environment variable of the run (sim.runs.bridge_env)
        f["pytorch-cuda-alloc-conf"] = "expandable_segments:True"
    f.update(_optimizer_flags(get))
    return f


SWITCHES = (
    ("moe_a2a_overlap", "overlap-moe-expert-parallel-comm"),
    ("delay_wgrad_compute", "delay-wgrad-compute"),
    ("tp_comm_overlap_effective", "tp-comm-overlap"),
    ("overlap_grad_reduce", "overlap-grad-reduce"),
    ("overlap_param_gather", "overlap-param-gather"),
    ("overlap_param_gather_with_optimizer_step", "overlap-param-gather-with-optimizer-step"),
    ("use_distributed_optimizer", "use-distributed-optimizer"),
    ("megatron_fsdp", "use-megatron-fsdp"),
    ("fp8_param_gather", "fp8-param-gather"),
    ("fp8_dot_product_attention", "fp8-dot-product-attention"),
    ("moe_router_fusion", "moe-router-fusion"),
    ("moe_router_force_load_balancing", "moe-router-force-load-balancing"),
    ("calculate_per_token_loss", "calculate-per-token-loss"),
)
"""``(column, flag)``: the recipe-table columns whose true cell is a Megatron-LM switch."""


def _recompute_flags(get: dict[str, str]) -> dict[str, Any]:
    """``--recompute-granularity`` (full or selective), its modules, method and layers."""
    f: dict[str, Any] = {}
    gran = get.get("recompute_granularity", "none")
    if gran in ("full", "selective"):
        f["recompute-granularity"] = gran
        mods = get.get("recompute_modules", "").split(" (")[0].strip("[]").replace(",", " ")
        if gran == "selective" and mods.strip():
            f["recompute-modules"] = mods
        for col in ("recompute_method", "recompute_num_layers"):
            if get.get(col):
                f[col.replace("_", "-")] = get[col]
    return f


def _dispatch_flags(get: dict[str, str]) -> dict[str, Any]:
    """The MoE token dispatcher, its flex backend and Hybrid-EP's SM count."""
    f: dict[str, Any] = {}
    sms = get.get("moe_hybridep_num_sms", "").split(" ")[0]
    if sms.isdigit() and get.get("moe_flex_dispatcher_backend", "").startswith("hybridep"):
        f["moe-hybridep-num-sms"] = sms
    disp = get.get("moe_token_dispatcher_type", "")
    if disp and not disp.startswith("n/a"):
        f["moe-token-dispatcher-type"] = disp.split(" ")[0]
        backend = get.get("moe_flex_dispatcher_backend", "")
        if disp.startswith("flex") and backend and not backend.startswith("n/a"):
            f["moe-flex-dispatcher-backend"] = backend
    return f


def _optimizer_flags(get: dict[str, str]) -> dict[str, Any]:
    """An optimizer other than Adam, and the precision-aware optimizer with its dtypes."""
    f: dict[str, Any] = {}
    opt = get.get("optimizer", "").split(" ")[0]
    if opt and opt != "adam":  # Kimi K2's dist_muon (sim.runs.megatron_layout_flags.LAYER_WISE)
        f["optimizer"] = opt
    aware = get.get("precision_aware_optimizer", "")
    if _false(aware):
        f["use-precision-aware-optimizer"] = False  # an explicit off (recipe_flags)
    if _true(aware):  # "True; main_grads_dtype=bfloat16, main_params_dtype=float32, ..."
        f["use-precision-aware-optimizer"] = True
        for key, value in re.findall(r"(\w+_dtype)=(\w+)", aware):
            f[key.replace("_", "-")] = value
    return f


EARLIER = "Earlier releases differ: "
"""How the recipe table's ``notes`` cell introduces the settings an earlier release's launcher
set differently from the row's own (``settings_release``): ``EARLIER`` then, per release,
``<release> (<tag>): <column>=<value>; <column>=<value>`` joined by `` | `` (the table's
builder compares the traced settings columns of every release a combination was measured in;
``measurements/megatron-bridge/README.md``)."""


def release_of(row: pd.Series | dict) -> str:
    """The release a measured row comes from: its ``table`` cell's first part (``26.04.01 /
    Pre-Training Performance / Model: ...`` is ``26.04.01``), "" without one."""
    return _cell(row.get("table")).split(" / ")[0].strip()


def earlier_releases(notes: str, columns: set[str]) -> dict[str, dict[str, str]]:
    """``{release: {column: value}}`` of the settings earlier releases set differently
    (:data:`EARLIER`); a ``; ``-separated part whose name is no column of the table continues
    the value before it (values such as ``precision_aware_optimizer`` hold ``; ``).

    Example:
        >>> earlier_releases("x. Earlier releases differ: 26.02 (v0.3.0): a=1; b=c=2; d=3",
        ...                  {"a", "b"})
        {'26.02': {'a': '1', 'b': 'c=2; d=3'}}
    """
    _, found, text = notes.partition(EARLIER)
    out: dict[str, dict[str, str]] = {}
    for part in text.split(" | ") if found else []:
        head, _, body = part.partition(": ")
        cells: dict[str, str] = {}
        last = ""
        for token in body.split("; "):
            name, eq, value = token.partition("=")
            if eq and name in columns:
                cells[name] = value
                last = name
            elif last:
                cells[last] += "; " + token
        out[head.split(" (")[0].strip()] = cells
    return out


def recipe_for(
    recipes: dict[tuple[str, ...], dict[str, Any]] | None, row: pd.Series | dict
) -> dict[str, Any] | None:
    """The recipe flags of one measured row: those its release's launcher set
    (:func:`read_recipes` keys them by :func:`recipe_key` and the release), else the table
    row's own, with the cuDNN frontend and the Transformer Engine its release's container
    ships (:mod:`sim.runs.bridge_software`); None where the table has no row for it."""
    if not recipes:
        return None
    key = recipe_key(row)
    release = release_of(row)
    flags = recipes.get((*key, release)) or recipes.get(key)
    extra = release_flags(release)
    if flags is None or not extra:
        return flags
    return {**flags, **extra}


def read_recipes(path: str | Path) -> dict[tuple[str, ...], dict[str, Any]]:
    """The recipe table at ``path``: flags by :func:`recipe_key`, and, for each earlier
    release whose launcher set some settings differently (:func:`earlier_releases`), the
    row's flags with those settings by the key and the release (:func:`recipe_for`).

    Raises:
        InputError: unreadable, or a key column missing.
    """
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read it as CSV ({exc})", file=str(path)) from None
    missing = [k for k in KEY if k not in df.columns]
    if missing:
        raise InputError(f"missing key column(s) {', '.join(missing)}", file=str(path),
                         field=missing[0])  # fmt: skip
    columns = set(df.columns)
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for rec in df.to_dict("records"):
        key = recipe_key(rec)
        out[key] = recipe_flags(rec)
        for release, cells in earlier_releases(_cell(rec.get("notes")), columns).items():
            out[(*key, release)] = recipe_flags(rec | cells)
    return out

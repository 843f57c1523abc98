"""A Megatron-Bridge (NeMo) config YAML as a :class:`~sim.runs.record.MeasuredRun`.

Megatron-Bridge's ``ConfigContainer`` (NVIDIA-NeMo/Megatron-Bridge@067f987df0,
``src/megatron/bridge/training/config.py``) is what a recipe builds and what
``ConfigContainer.to_yaml`` writes (and what an override YAML sets a part of): sections
``model`` (a ``GPTModelProvider``: Megatron-Core's ``TransformerConfig`` and
``ModelParallelConfig`` fields), ``train`` (``micro_batch_size``, ``global_batch_size``),
``dataset`` (``seq_length``), ``ddp`` (``use_distributed_optimizer``,
``overlap_grad_reduce``...), ``optimizer``, ``mixed_precision`` (a recipe name of
``training/mixed_precision.py``'s ``MIXED_PRECISION_RECIPES`` or its fields), ``comm_overlap``
and sections of logging, checkpointing and scheduling (:data:`IGNORED_SECTIONS`).

The fields carry Megatron-LM's argument names (``tensor_model_parallel_size`` is
``--tensor-model-parallel-size``), so each is turned into that flag and judged by
:mod:`sim.runs.megatron_args`; the few the provider names differently are in :data:`RENAMED`.
The GPU count is not in the config: the caller gives it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.errors import InputError
from sim.runs.megatron_args import read_megatron
from sim.runs.record import ArgNote, MeasuredRun
from sim.textio import load_yaml, read_text

RENAMED = {
    "num_moe_experts": ("num-experts", None),
    "gated_linear_unit": ("swiglu", None),
    "virtual_pipeline_model_parallel_size": ("num-virtual-stages-per-pipeline-rank", None),
    "share_embeddings_and_output_weights": ("untie-embeddings-and-output-weights", "not"),
    "add_bias_linear": ("disable-bias-linear", "not"),
    "grad_reduce_in_fp32": ("grad-reduce-in-bf16", "not"),
    "seq_length": ("seq-length", None),
}
"""Provider fields whose Megatron-LM flag has another name (``not``: the flag is the field's
negation)."""
MIXED_PRECISION = (
    ("nvfp4", {"bf16": True, "fp4-format": "e2m1", "fp4-recipe": "nvfp4"}),
    ("mxfp8", {"bf16": True, "fp8-format": "e4m3", "fp8-recipe": "mxfp8"}),
    ("current_scaling", {"bf16": True, "fp8-format": "hybrid", "fp8-recipe": "tensorwise"}),
    ("subchannel", {"bf16": True, "fp8-format": "e4m3", "fp8-recipe": "blockwise"}),
    ("delayed", {"bf16": True, "fp8-format": "hybrid", "fp8-recipe": "delayed"}),
    ("bf16", {"bf16": True}),
    ("fp16", {"fp16": True}),
)
"""``mixed_precision`` recipe names (first part that matches) -> Megatron-LM flags
(``bf16_with_mxfp8_mixed``, ``bf16_with_fp8_current_scaling_mixed``, ``bf16_mixed``...)."""
IGNORED_SECTIONS = {
    "logger": "logging", "checkpoint": "checkpointing, outside the timed steps",
    "scheduler": "learning-rate schedule", "rng": "random seeds", "tokenizer": "tokenizer "
    "files (the model's vocab_size is read)", "dist": "process-group set-up", "profiling":
    "profiler", "validation": "evaluation between steps", "ft": "fault tolerance",
    "straggler": "straggler detection", "nvrx_straggler": "straggler detection",
    "rerun_state_machine": "re-run checks", "env_vars": "environment", "inprocess_restart":
    "restart", "tensor_inspect": "debugging",
}  # fmt: skip
SECTIONS = ("model", "train", "dataset", "ddp", "optimizer", "comm_overlap")
"""Sections whose fields become Megatron-LM flags."""


def _flag(field: str, value: Any) -> tuple[str, Any]:
    name, negate = RENAMED.get(field, (field.replace("_", "-"), None))
    if negate:
        return name, (not value) if isinstance(value, bool) else value
    return name, value


def bridge_flags(cfg: dict[str, Any]) -> tuple[dict[str, Any], list[ArgNote]]:
    """The Megatron-LM flags of a ``ConfigContainer`` mapping, and the notes of the fields
    that are not flags (ignored sections, ``_target_``)."""
    flags: dict[str, Any] = {}
    notes: list[ArgNote] = []
    for section, body in cfg.items():
        if section in IGNORED_SECTIONS:
            notes.append(ArgNote(section, "...", "ignored", IGNORED_SECTIONS[section]))
        elif section == "mixed_precision":
            flags |= _precision(body, notes)
        elif section in SECTIONS and isinstance(body, dict):
            for field, value in body.items():
                if field == "_target_" or value is None or isinstance(value, dict | list):
                    why = "the provider class" if field == "_target_" else "nested or empty"
                    notes.append(ArgNote(f"{section}.{field}", str(value)[:60], "ignored", why))
                    continue
                name, v = _flag(field, value)
                flags[name] = v
                if name == "num-query-groups":
                    flags["group-query-attention"] = True
        else:
            notes.append(ArgNote(str(section), str(body)[:60], "unmapped", "not a "
                                 "ConfigContainer section pipesim knows: pass --ignore "
                                 f"{section}"))  # fmt: skip
    return flags, notes


def _precision(body: Any, notes: list[ArgNote]) -> dict[str, Any]:
    if isinstance(body, str):
        flags = next((f for part, f in MIXED_PRECISION if part in body), None)
        if flags is None:
            notes.append(ArgNote("mixed_precision", body, "unmapped", "unknown recipe"))
            return {}
        notes.append(ArgNote("mixed_precision", body, "mapped", "precision"))
        return dict(flags)
    if isinstance(body, dict):
        out = {k.replace("_", "-"): v for k, v in body.items() if v not in (None, False)}
        if body.get("fp8"):
            out["fp8-format"] = body["fp8"]
        return {k: v for k, v in out.items() if k in ("bf16", "fp16", "fp8-format", "fp8-recipe",
                                                       "fp4-format", "fp4-recipe")}  # fmt: skip
    return {}


def read_bridge_yaml(
    path: str | Path, *, num_gpus: int | None = None, gpu: str = ""
) -> MeasuredRun:
    """The run a Megatron-Bridge ``ConfigContainer`` YAML describes (module doc).

    Raises:
        InputError: not YAML, not a mapping, or no ``model`` section.
    """
    data = load_yaml(read_text(path, what="Megatron-Bridge config"), file=str(path))
    if isinstance(data, dict) and "models" in data and "model" not in data:
        raise InputError("is a pipesim experiment, not a measured run: `sim run` takes it; "
                         "sim compare and sim import take runs (logs, configs, measured-run "
                         "CSVs)", file=str(path))  # fmt: skip
    if not isinstance(data, dict) or "model" not in data:
        raise InputError("not a Megatron-Bridge config: no 'model' section", file=str(path),
                         field="model")  # fmt: skip
    flags, notes = bridge_flags(data)
    run = read_megatron(flags, name=Path(path).stem, source=str(path), strict=True, gpu=gpu,
                        num_gpus=num_gpus, framework="megatron-bridge")  # fmt: skip
    return replace(run, args=run.args + tuple(notes))

"""Rows of ``../shared/data/measured/*.csv`` as :class:`~sim.runs.record.MeasuredRun`.

The layout (its README): one measured run per row, the configuration in columns (``model,
family, layers, hidden, ffn_hidden, heads, kv_heads, head_dim, vocab, seq_len, moe_*,
attention, gpu, num_gpus, tp, pp, vp, cp, ep, etp, dp, fsdp, gbs, mbs, precision, recompute,
framework``...), the measurements in ``step_time_s`` (measured), ``step_time_derived_s``
(``gbs x seq / (tokens/s/GPU x GPUs)``, derived from a throughput table), ``peak_mem_gib``
(with ``mem_kind``), ``tokens_per_s_per_gpu``, ``tflops_per_gpu``; ``note`` holds what the
columns do not.

Each row becomes Megatron-LM flags and is read by
:func:`sim.runs.megatron_args.read_megatron`, so that a row and the same run's launch command
give the same run:

* Megatron-LM functional-test rows (``source_id`` ``megatron_golden_values``): the case's
  ``MODEL_ARGS``, verbatim in ``note``;
* other rows (SimuMax's B200 runs, Megatron-Bridge's tables): flags built from the columns and
  what ``note`` states ("distributed optimizer", "sequence parallel", "CP comm a2a", "no TP/DP
  comm overlap"); for Megatron-Bridge rows the recipe's settings (recompute, overlaps,
  distributed optimizer, MTP, CUDA graphs, dispatcher) when a recipe table is given
  (:mod:`sim.runs.bridge_recipes`), else the row says the settings are unknown. Model traits
  the columns cannot say are taken from the model's name
  (:data:`~sim.runs.csv_shape.NAMED_TRAITS`). The few Megatron-Bridge rows whose printed
  layout no preset of their release's launcher produces are read with the launcher's
  (:mod:`sim.runs.bridge_errata`), and say so among their approximations.

A source measured on one machine whose own figures pipesim ships as a hardware overlay runs
with it (:data:`NODE_OVERLAYS`): SimuMax's rows on SimuMax's B200 node.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import InputError
from sim.runs.bridge_errata import (
    corrected,
    erratum_for,
    erratum_note,
    recipe_erratum_for,
    recipe_note,
    recipe_row,
)
from sim.runs.bridge_fallback import FALLBACK_NOTE, NEMO_NOTE, fallback_flags
from sim.runs.bridge_hopper import hopper_entry
from sim.runs.bridge_nccl import overlay_for
from sim.runs.bridge_offswitch import off_switches
from sim.runs.bridge_recipes import LORA_QKV, LORA_RANK, LORA_TARGETS, recipe_for, release_of
from sim.runs.csv_cells import check_cells
from sim.runs.csv_precision import precision_flags
from sim.runs.csv_shape import cell_float, cell_int, known_shape, row_shape_flags
from sim.runs.megatron_args import read_megatron
from sim.runs.record import ArgNote, Measured, MeasuredRun
from sim.runs.te_environment import golden_environment
from sim.runs.torchtitan_csv import torchtitan_row_run

GiB = 2.0**30
NODE_OVERLAYS = (("simumax_b200", "simumax-b200"),)
"""``(source_id prefix, shipped overlay)``: the overlay of the machine a source's rows were
measured on (``sim/hardware/overlays/simumax-b200.yaml``: SimuMax's B200 node, whose efficiency
tests measured its BF16 GEMMs; the dgx-b200 preset carries Transformer Engine's benchmark)."""
NEEDED = ("model", "gpu", "tp", "pp", "gbs", "mbs", "precision", "seq_len")
"""Columns every row needs."""
NAMED_UNMAPPED = (
    (
        "distill",
        "knowledge distillation: a teacher model runs beside the student (its configuration "
        "is not in the arguments)",
    ),
)
"""Models whose architecture no flag of the table can say, with what they need."""


def _golden_flags(row: pd.Series) -> dict[str, Any] | None:
    m = re.search(r"MODEL_ARGS=(\{.*\})", str(row.get("note", "")))
    return json.loads(m.group(1)) if m else None


GOLDEN_TOKENIZER = {
    "gpt": {"--vocab-file": "(omitted)", "--merge-file": "(omitted)"},
    "bert": {"--vocab-file": "(omitted)", "--tokenizer-type": "BertWordPieceLowerCase"},
}
"""The tokenizer of a functional test whose ``MODEL_ARGS`` leave its data arguments out: GPT-2's
BPE files (``gpt2-vocab.json``, ``gpt2-merges.txt``), BERT's uncased WordPiece vocabulary
(30,522 tokens; an assumption, as ``benchmarks/accuracy/memory_rows.py`` reads it)."""
SIMUMAX_DROPOUT = {"attention-dropout": "0.0", "hidden-dropout": "0.0"}
"""SimuMax's launchers train without dropout (``run_pretrain_deepseekv2.sh`` ``MODEL_ARGS``;
the Llama 3 launcher taken to do the same, as ``benchmarks/accuracy/memory_rows.py`` reads
it)."""
SIMUMAX_MOE = {
    "moe-expert-capacity-factor": "1", "moe-pad-expert-input-to-capacity": True,
    "moe-router-load-balancing-type": "seq_aux_loss", "moe-aux-loss-coeff": "3e-3",
}  # fmt: skip
"""SimuMax's MoE launches (MooreThreads/SimuMax@1b8ca90 ``simu_tools/megatron_scripts/scripts/
run_pretrain_deepseekv2.sh`` ``MOE_ARGS``): capacity factor 1 with each expert's input padded
to it, and the sequence-level balancing loss (@4dcaae5 same file, lines 203 and 207:
:mod:`sim.compute.router_fused`)."""
SIMUMAX_CEF = {"cross-entropy-loss-fusion": True, "cross-entropy-fusion-impl": "te"}
"""SimuMax's ``_cef`` cases: Transformer Engine's fused cross entropy, added to the launchers'
arguments through ``EXTRA_ARGS`` (the same reading as ``benchmarks/accuracy/memory_rows.py``
had)."""


def _launcher_flags(row: pd.Series) -> dict[str, Any]:
    """What a source's launcher sets that its columns do not say: SimuMax's dropout
    (:data:`SIMUMAX_DROPOUT`), MoE capacity (:data:`SIMUMAX_MOE`) and, for its ``_cef`` cases (the case name in ``note``), the fused
    loss (:data:`SIMUMAX_CEF`)."""
    if not str(row.get("source_id", "")).startswith("simumax"):
        return {}
    f: dict[str, Any] = dict(SIMUMAX_DROPOUT)
    if cell_int(row.get("moe_experts")):
        f |= SIMUMAX_MOE
    case = re.search(r"case (\S+);", str(row.get("note", "")))
    if case and case.group(1).endswith("_cef"):
        f |= SIMUMAX_CEF
    return f


def _run_flags(row: pd.Series) -> dict[str, Any]:
    """Flags of a row that is not a functional test (module doc)."""
    f = row_shape_flags(row) | _launcher_flags(row)
    for col, flag in (("tp", "tensor-model-parallel-size"), ("pp", "pipeline-model-parallel-size"),
                      ("cp", "context-parallel-size"), ("ep", "expert-model-parallel-size"),
                      ("etp", "expert-tensor-parallel-size"), ("mbs", "micro-batch-size"),
                      ("gbs", "global-batch-size")):  # fmt: skip
        if cell_int(row.get(col)) is not None:
            f[flag] = cell_int(row.get(col))
    vp = cell_int(row.get("vp"))
    if vp and vp > 1:
        f["num-virtual-stages-per-pipeline-rank"] = vp
    if (cell_int(row.get("tp")) or 1) > 1:
        f["sequence-parallel"] = True
    if (cell_int(row.get("fsdp")) or 0) > 0:
        f["use-megatron-fsdp"] = True
    f.update(precision_flags(str(row.get("precision", "")), str(row.get("gpu", "")),
                             _framework(row)))  # fmt: skip
    note = str(row.get("note", "")).lower()
    if "distributed optimizer" in note:
        f["use-distributed-optimizer"] = True
    if "cp comm a2a" in note:
        f["cp-comm-type"] = "a2a"
    if str(row.get("task", "pretrain")) in ("sft", "finetune", "lora"):
        f["use-packed-sequence"] = True
    return f


def _row_notes(row: pd.Series, recipe: bool) -> list[ArgNote]:
    """What a row says that no flag can: LoRA, the model's own architecture, an unknown
    recompute setting, an inconsistent row."""
    out = []
    if str(row.get("task")) == "lora" and "bridge" not in str(row.get("framework", "")).lower():
        out.append(ArgNote("task", "lora", "unmapped", "LoRA: the adapters' rank and targets "
                           "are not in the table"))  # fmt: skip
    name = str(row.get("model", "")).lower()
    out += [ArgNote("model", str(row.get("model")), "unmapped", why)
            for part, why in NAMED_UNMAPPED if part in name]  # fmt: skip
    text = str(row.get("recompute", "none")).lower()
    if not recipe and not re.match(r"none|full (uniform|block) \d+|selective", text):
        if BARE_FULL.match(text):
            out.append(ArgNote("recompute", text, "approximated", FULL_NOTE.split(": ", 1)[1]))
        else:
            out.append(ArgNote("recompute", text, "unmapped", "the table does not give the "
                               "recipe's recompute setting"))  # fmt: skip
    if known_shape(row) is None and (cell_int(row.get("layers")) is None or
                                      cell_int(row.get("hidden")) is None):  # fmt: skip
        out.append(ArgNote("shape_ref", str(row.get("shape_ref", "")), "unmapped",
                           "the model's shape is not in the table"))  # fmt: skip
    return out


BARE_FULL = re.compile(r"full\s*$|full (recompute|activation)")
"""A ``recompute`` cell that says "full" without Megatron's method and layer count."""
FULL_EVERY_LAYER = {"recompute-granularity": "full", "recompute-method": "uniform",
                    "recompute-num-layers": 1}  # fmt: skip
"""What a bare "full" is read as: every layer recomputed whole (``uniform`` over 1 layer; Megatron
needs a method with full recompute, NVIDIA/Megatron-LM@d98e8a64dd
``megatron/core/transformer/transformer_config.py:1908-1917``; ``block`` over every layer of a
stage recomputes the same work), stated among the run's approximations."""
FULL_NOTE = ("approximated: a bare 'full' recompute is read as Megatron's --recompute-method "
             "uniform --recompute-num-layers 1 (every layer recomputed)")  # fmt: skip


def _recompute_flags(row: pd.Series) -> dict[str, Any]:
    text = str(row.get("recompute", "none")).lower()
    if text.startswith("none"):
        return {}
    m = re.match(r"full (uniform|block) (\d+)", text)
    if m:
        return {"recompute-granularity": "full", "recompute-method": m.group(1),
                "recompute-num-layers": m.group(2)}  # fmt: skip
    m = re.match(r"selective\s*\[(.*)\]", text)
    if m:
        return {"recompute-granularity": "selective", "recompute-modules": m.group(1)}
    if text.startswith("selective"):  # Megatron's default modules (core attention)
        return {"recompute-granularity": "selective"}
    if BARE_FULL.match(text):
        return dict(FULL_EVERY_LAYER)
    return {}


def measured_of(row: pd.Series) -> Measured:
    """The measurements of a row (seconds, bytes)."""
    t, derived = cell_float(row.get("step_time_s")), cell_float(row.get("step_time_derived_s"))
    mem = cell_float(row.get("peak_mem_gib"))
    mfu = cell_float(row.get("mfu"))
    kind = str(row.get("mem_kind", "")) if mem is not None else ""
    return Measured(
        iteration_time_s=t if t is not None else derived,
        time_rule="step_time_s (measured)" if t is not None else
        "step_time_derived_s = gbs x seq / (tokens/s/GPU x GPUs): derived from the throughput",
        peak_allocated_bytes=mem * GiB if mem is not None and "reserved" not in kind else None,
        peak_reserved_bytes=mem * GiB if mem is not None and "reserved" in kind else None,
        memory_kind=kind,
        tokens_per_s_per_gpu=cell_float(row.get("tokens_per_s_per_gpu")),
        tflops_per_gpu=cell_float(row.get("tflops_per_gpu")),
        mfu=mfu / 100 if mfu is not None and mfu > 1 else mfu,
    )  # fmt: skip


def row_run(
    row: pd.Series, *, source: str, recipe: dict[str, Any] | None = None, generated: str = ""
) -> MeasuredRun:
    """The run of one row (module doc); ``recipe``: Megatron-Bridge recipe flags for it;
    ``generated``: the date a functional test's golden values were generated (its TE image:
    :func:`sim.runs.te_environment.golden_environment`)."""
    golden = _golden_flags(row)
    framework = _framework(row)
    if golden is None and framework == "torchtitan":  # sim.runs.torchtitan_csv
        run = torchtitan_row_run(row, source=source)
        return replace(run, measured=measured_of(row), task=str(row.get("task", "pretrain")))
    fallback = golden is None and framework == "megatron-bridge" and recipe is None
    hopper = hopper_entry(row, release_of(row)) if fallback else None
    off = off_switches(str(row.get("model", "")), str(row.get("gpu", "")),
                       str(row.get("precision", "")), hopper.release if hopper else
                       release_of(row)) if fallback else None  # fmt: skip
    if fallback:  # no recipe-table entry: the settings every recipe shares (bridge_fallback)
        moe = (cell_int(row.get("moe_experts")) or 0) > 0
        tp, pp, cp = (cell_int(row.get(c)) or 1 for c in ("tp", "pp", "cp"))
        dp = (cell_int(row.get("num_gpus")) or 8) // (tp * pp * cp)
        recipe = fallback_flags(str(row.get("precision", "")), moe, dp, str(row.get("model")))
        recipe |= hopper.flags if hopper else {}  # an H100 preset (sim.runs.bridge_hopper)
        recipe |= off.flags if off else {}  # switches its recipe turns off (bridge_offswitch)
    family = str(row.get("model", "")).split("_")[0]
    arch = {"bert": "bert", "t5": "t5", "hybrid": "hybrid"}.get(family)
    if golden is not None:
        flags = dict(golden)
        if not {"--vocab-size", "--tokenizer-type", "--vocab-file"} & set(flags):
            flags |= GOLDEN_TOKENIZER.get(family, GOLDEN_TOKENIZER["gpt"])
    else:
        flags = _run_flags(row) | _recompute_flags(row) | (recipe or {})
        arch = "hybrid" if "hybrid" in str(row.get("family", "")) else "decoder"
    gpus = cell_int(row.get("num_gpus"))
    tag = re.search(r"\[[^\]]+\]", str(row.get("table", ""))) if golden is not None else None
    name = str(row.get("model")) + (tag.group(0) if tag else "")
    run = read_megatron(
        flags, name=name, source=source, strict=True, arch=arch,
        gpu=str(row.get("gpu", "")), num_gpus=gpus or 8, framework=framework,
        te_env=golden_environment(name, generated),
    )  # fmt: skip
    extra = []
    if gpus is None:
        extra.append("8 GPUs assumed (num_gpus empty)")
    name = str(row.get("model", "")).lower()
    notes = list(run.args) + (_row_notes(row, recipe is not None) if golden is None else [
        ArgNote("model", name, "unmapped", why) for part, why in NAMED_UNMAPPED if part in name
    ])  # fmt: skip
    cons = str(row.get("config_consistent", "True"))
    if cons not in ("True", "nan") and not cons.startswith("num_gpus assumed"):
        notes.append(ArgNote("config_consistent", cons, "unmapped", f"inconsistent row: {cons}"))
    if fallback:
        note = hopper.note if hopper else FALLBACK_NOTE
        notes.append(ArgNote("recipe", "", "approximated", note))
        if off:
            notes.append(ArgNote("recipe", "", "approximated", off.note))
    if golden is None and "nemo" in str(row.get("framework", "")).lower() and (
            "bridge" not in str(row.get("framework", "")).lower()):  # fmt: skip
        notes.append(ArgNote("framework", str(row.get("framework")), "approximated", NEMO_NOTE))
    shape = run.shape
    if golden is None and str(row.get("task")) == "lora" and "bridge" in run.framework:
        lora = f"lora={LORA_RANK}:{'+'.join(LORA_TARGETS)}"  # sim.runs.bridge_recipes
        shape = replace(shape, features=shape.features + (lora,))
        notes.append(ArgNote("task", "lora", "approximated", LORA_QKV.removeprefix(
            "approximated: ")))  # fmt: skip
    source_id = str(row.get("source_id", ""))
    overlay = next((o for prefix, o in NODE_OVERLAYS if source_id.startswith(prefix)), "")
    if not overlay and golden is None and "megatron-bridge" in run.framework:  # bridge_nccl
        release = str(row.get("table", "")).split(" ", 1)[0]
        overlay = overlay_for(release, str(row.get("model", "")), str(row.get("task", "")))
    return replace(
        run, measured=measured_of(row), task=str(row.get("task", "pretrain")), args=tuple(notes),
        notes=run.notes + tuple(extra), shape=shape, hardware_overlay=overlay,
    )  # fmt: skip


FRAMEWORK_NAMES = (
    ("bridge", "megatron-bridge"), ("automodel", "nemo-automodel"), ("nemo", "megatron-bridge"),
    ("torchtitan", "torchtitan"), ("megatron-deepspeed", "megatron-deepspeed"),
    ("megatron deepspeed", "megatron-deepspeed"), ("deepspeed", "deepspeed (ZeRO stage not given)"),
)  # fmt: skip
"""A ``framework`` cell (lower case) -> the reader's framework, first match; any other cell is
Megatron-LM. NeMo 2.0's performance recipes (NVIDIA/NeMo ``scripts/performance/llm``) train
Megatron-Core models as Megatron-Bridge's do and are read the same way
(:data:`~sim.runs.bridge_fallback.NEMO_NOTE`); NeMo AutoModel trains Hugging Face models under
PyTorch FSDP2, for which pipesim has no profile (the run is refused with that reason); torchtitan
rows are read as its job config (:mod:`sim.runs.torchtitan_csv`); Megatron-DeepSpeed rows with
its profile (Megatron's flags); a plain DeepSpeed row is refused (its ZeRO stage, which decides
memory and communication, is no column)."""


def _framework(row: pd.Series) -> str:
    text = str(row.get("framework", "")).lower()
    return next((name for part, name in FRAMEWORK_NAMES if part in text), "megatron-lm")


def read_measured_csv(
    path: str | Path,
    *,
    recipes: dict[tuple, dict[str, Any]] | None = None,
    generated: dict[str, str] | None = None,
) -> list[MeasuredRun]:
    """Every row of a measured-runs CSV (module doc), in file order.

    Args:
        recipes: Megatron-Bridge recipe flags by the row's key and release
            (:func:`sim.runs.bridge_recipes.read_recipes`, :func:`~sim.runs.bridge_recipes.recipe_for`),
            for its rows.
        generated: a functional test's golden-values file (the part of ``source_ref`` after
            ``:``) -> the date its values were generated (``benchmarks/accuracy/
            golden_generation.csv``); without it every run is taken to have had a recent TE
            (:data:`sim.runs.te_environment.LATER`).

    Raises:
        InputError: unreadable, a needed column missing, or a numeric cell that is no number
            of its kind (:func:`sim.runs.csv_cells.check_cells`), naming the file and column.
    """
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read it as CSV ({exc})", file=str(path)) from None
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s): {', '.join(missing)}", file=str(path),
                         field=missing[0])  # fmt: skip
    check_cells(df, str(path))
    out = []
    for i, row in df.iterrows():
        alias = recipe_erratum_for(row)  # a preset that cannot have run it (sim.runs.bridge_errata)
        recipe = recipe_for(recipes, recipe_row(row, alias) if alias else row)
        date = (generated or {}).get(str(row.get("source_ref", "")).split(":", 1)[-1], "")
        fix = erratum_for(row)  # a table row whose layout is not its run's (sim.runs.bridge_errata)
        run = row_run(corrected(row, fix) if fix else row, source=f"{path} row {int(str(i)) + 2}",
                      recipe=recipe, generated=date)  # fmt: skip
        notes = ((erratum_note(fix),) if fix else ()) + ((recipe_note(alias),) if alias else ())
        out.append(replace(run, args=run.args + notes) if notes else run)
    return out

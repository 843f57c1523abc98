"""Megatron-LM's arguments as a :class:`~sim.runs.record.MeasuredRun`.

The arguments come as flags (``{"tensor-model-parallel-size": "8", "bf16": True}``): from a
``pretrain_gpt.py`` command line (:mod:`sim.runs.argv`), from a functional test's
``MODEL_ARGS``, from the arguments block a training log prints (``tensor_model_parallel_size
...... 8``), or from a Megatron-Bridge config's fields (:mod:`sim.runs.bridge`). Each flag is
mapped, ignored, approximated or unmapped as :mod:`sim.runs.megatron_table` says; defaults and
derived sizes follow ``megatron/training/arguments.py::validate_args`` and
``megatron/core/transformer/transformer_config.py`` at NVIDIA/Megatron-LM@d98e8a64dd:

* ``ffn_hidden_size``: ``4 h``, or ``int(4 h * 2/3 / 64) * 64`` with ``--swiglu``;
  ``moe_ffn_hidden_size``: ``ffn_hidden_size``; ``kv_channels``: ``h / heads``;
  ``num_query_groups``: the heads unless ``--group-query-attention``;
* the padded vocabulary: the tokenizer's size rounded up to a multiple of
  ``make_vocab_size_divisible_by (128) x tp`` (``megatron/training/vocab_utils.py``);
* ``dp = world / (tp x pp x cp)``;
* recompute: ``--recompute-granularity full --recompute-method uniform`` recomputes every
  layer (``recompute:full``), ``block`` the first ``--recompute-num-layers`` of each stage
  (``recompute:full:N``; 0: none), ``selective`` the modules of ``--recompute-modules``
  (default ``core_attn``) (``transformer_block.py::_checkpointed_forward``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sim.compute.precision import HIGH_PRECISION
from sim.memory.te_attention import TeEnvironment
from sim.parallel.layout import ParallelLayout
from sim.runs import megatron_table as table
from sim.runs.megatron_features import run_features
from sim.runs.megatron_host_flags import read_host_options
from sim.runs.megatron_layout_flags import LAYER_WISE, read_layout, read_pipeline_layout, read_world
from sim.runs.megatron_memory_flags import (
    flag_memory_options,
    loss_options,
    read_memory_options,
    workspace_options,
)
from sim.runs.megatron_model_flags import activation_offload, optimizer_instances
from sim.runs.megatron_overlap import read_options
from sim.runs.megatron_reading import Reading
from sim.runs.megatron_shape import model_shape
from sim.runs.precision_flags import precision_flags
from sim.runs.record import ArgNote, MeasuredRun
from sim.runs.te_environment import LATER, run_attention


def normalise(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags spelled as the command line spells them (``-``, no ``--``), values as given;
    absent-valued ones (``None``, ``False``: a log's arguments block prints them) dropped."""
    out: dict[str, Any] = {}
    for name, value in flags.items():
        key = name.lstrip("-").replace("_", "-")
        if value is None or value is False or value in ("None", "False", "false"):
            if key == "gradient-accumulation-fusion" and value in (False, "False", "false"):
                out["no-gradient-accumulation-fusion"] = True
            continue
        out[key] = True if value in ("True", "true") else value
    return out


def read_megatron(
    flags: Mapping[str, Any],
    *,
    name: str,
    source: str,
    strict: bool = True,
    arch: str | None = None,
    gpu: str = "",
    num_gpus: int | None = None,
    framework: str = "megatron-lm",
    te_env: TeEnvironment = LATER,
) -> MeasuredRun:
    """The run Megatron-LM's ``flags`` describe (module doc); nothing measured yet.

    Args:
        flags: flag -> value (any spelling :func:`normalise` accepts).
        name, source: the run's name and where the flags came from.
        strict: an unknown flag is ``unmapped`` (an argument list the user wrote), else
            ``ignored`` (a log's arguments block, which prints every argument).
        arch: ``gpt``/``decoder``, ``bert``, ``t5``, ``hybrid`` when the caller knows the
            training script (``pretrain_bert.py``...); default: decided from the flags.
        gpu: the GPU as the user names it; num_gpus: the job's GPUs (``--world-size`` or the
            launcher's ``--nproc-per-node x --nnodes`` when not given).
        framework: ``megatron-lm`` or ``megatron-bridge``.
        te_env: the Transformer Engine and flash-attn the run had (its attention backend
            under ``--deterministic-mode``; :mod:`sim.runs.te_environment`).
    """
    r = Reading(normalise(flags), strict)
    world = read_world(r)  # the launcher's flags are read (mapped) even when num_gpus is given
    world = num_gpus or world
    lay, dist = read_layout(r, world)
    shape, seq = model_shape(r, lay, arch, grouped=framework == "megatron-bridge")
    shape = replace(shape, features=(*shape.features, *run_features(r, lay, framework)))
    recompute = _recompute(r)
    precision = _precision(r)
    gather = _param_gather(r, precision)
    r.mapped(
        "reuse-grad-buf-for-mxfp8-param-ag",
        "MXFP8 parameters all-gathered in bf16 through the gradient buffer: how pipesim runs "
        "TE's MXFP8 with param_gather, the only way Megatron-Core can (sim.memory.precision); "
        "no effect without --fp8-param-gather",
    )
    kept16 = precision_flags(r, precision)
    mbs, gbs = r.int("micro-batch-size", 1, minimum=1), r.int("global-batch-size", minimum=1)
    r.mapped("micro-batch-size", "micro-batch size b")
    r.mapped("global-batch-size", "samples per optimizer step")
    options = _options(r, lay, dist)
    memory = read_memory_options(r, dist)
    layout = read_pipeline_layout(r, lay)
    instances = optimizer_instances(r, lay, dist)
    offload = activation_offload(r, shape.layers or 0)
    _conditional(r, lay, dist)
    _rest(r, lay)
    sched = "interleaved_1f1b" if lay.vp > 1 else "1f1b"
    attention = _attention(r.flags, framework, gpu, te_env)
    return MeasuredRun(
        name=name,
        source=source,
        framework=framework,
        gpu=gpu,
        num_gpus=world,
        layout=lay,
        microbatch_size=mbs,
        global_batch=gbs,
        seq_len=seq,
        precision=precision,
        param_gather=gather,
        precision_options=tuple(kept16.items()),
        recompute=recompute,
        schedule=sched,
        attention=attention,
        distributed_optimizer=dist,
        shape=shape,
        args=tuple(r.notes),
        notes=tuple(r.assumptions),
        framework_options=tuple(options.items()),
        memory_options=tuple(memory.items()),
        pipeline_layout=layout,
        optimizer_instances=instances,
        activation_offload=offload,
        token_dispatcher=_dispatcher(r.flags, lay),
        optimizer=OPTIMIZERS.get(str(r.flags.get("optimizer", "adam")), "adam"),
    )


OPTIMIZERS = {"adam": "adam", "sgd": "sgd_momentum", "muon": "sgd_momentum",
              "dist_muon": "sgd_momentum"}  # fmt: skip
"""Megatron's ``--optimizer`` -> ``training.optimizer`` (its state per parameter,
:mod:`sim.memory.states`): SGD keeps a momentum buffer (``--sgd-momentum`` 0.9 by default),
Muon one momentum buffer per matrix (below)."""
MUON = (
    "Muon (--optimizer muon / dist_muon) counted as SGD with momentum: the fp32 master and one "
    "momentum buffer per parameter (Megatron-Core's TensorParallelMuon keeps one momentum per "
    "2-D weight; the embedding, output layer and norms it leaves to Adam, whose second moment "
    "is not counted: NVIDIA/Megatron-LM@d98e8a64 megatron/core/optimizer/"
    "emerging_optimizers.py lines 177-200 and 579-590); the 5 Newton-Schulz iterations per "
    "matrix (about 5 x (4 m^2 n + 2 m^3) FLOPs for an m x n weight, m <= n) are not timed"
)
"""What the simulation changes of a Muon run."""


def _dispatcher(flags: dict[str, Any], lay: ParallelLayout) -> str:
    """``allgather`` for Megatron's all-gather token dispatcher with experts spread over ranks
    (its default when the flag is absent, ``megatron/training/arguments.py``), else
    ``alltoall`` (the flex dispatchers are framework options)."""
    if not flags.get("num-experts") or lay.ep * lay.tp == 1:
        return "alltoall"
    disp = str(flags.get("moe-token-dispatcher-type", "allgather"))
    return "allgather" if disp == "allgather" else "alltoall"


def _options(r: Reading, lay: ParallelLayout, dist: bool) -> dict[str, str]:
    """The overlap, CUDA-graph and dispatcher flags (:mod:`sim.runs.megatron_overlap`) and
    the logging flags that add host work (:mod:`sim.runs.megatron_host_flags`) as framework
    options, each noted."""
    options, notes = read_options(r.flags, lay, dist)
    host, host_notes = read_host_options(r.flags)
    options |= host
    for flag, status, reason in notes + host_notes:
        r.done.add(flag)
        r.notes.append(ArgNote(flag, str(r.flags.get(flag, "")), status, reason))
    return options


def _attention(flags: dict[str, Any], framework: str, gpu: str, env: TeEnvironment) -> str:
    """``math`` for Megatron's unfused core attention (``--attention-backend unfused`` or
    ``local``; ``--transformer-impl local`` or Megatron-DeepSpeed without ``--use-flash-attn``;
    TE's own fallback under ``--deterministic-mode`` in ``env``:
    :func:`sim.runs.te_environment.run_attention`), else ``flash`` (a fused kernel)."""
    if framework == "megatron-deepspeed" and "attention-backend" not in flags:
        return "flash" if flags.get("use-flash-attn") else "math"
    return run_attention(flags, gpu, env)


def _recompute(r: Reading) -> str:
    gran = r.text("recompute-granularity")
    if r.switch("recompute-activations"):
        gran = "selective"
    method = r.text("recompute-method")
    n = r.int("recompute-num-layers")
    modules = (r.text("recompute-modules") or "core_attn").strip("[]").replace(",", " ").split()
    offloaded = _offloaded_modules(r)
    if offloaded and gran != "selective":
        gran, modules = "selective", []
    modules += offloaded
    out = "none"
    if gran == "full" and method == "block":
        out = f"full:block:{n}" if n else "none"
    elif gran == "full":
        out = "full" if (n or 1) == 1 else f"full:uniform:{n}"
    elif gran == "selective":
        out = "selective" if modules == ["core_attn"] else f"selective:{'+'.join(modules)}"
    for f in ("recompute-granularity", "recompute-method", "recompute-num-layers",
              "recompute-modules", "recompute-activations"):  # fmt: skip
        r.mapped(f, f"recompute {out}")
    return out


def _offloaded_modules(r: Reading) -> list[str]:
    """``["fused_group_mlp"]`` where Megatron's fine-grained activation offloading offloads the
    fused grouped MLP (``--fine-grained-activation-offloading --offload-modules
    fused_group_mlp``): its saved tensors leave the GPU (memory choice ``fused_group_mlp``,
    :mod:`sim.compute.recompute_modules`); other offload modules stay unmodelled (empty)."""
    mods = (r.text("offload-modules") or "").strip("[]").replace(",", " ").split()
    if not r.switch("fine-grained-activation-offloading") or "fused_group_mlp" not in mods:
        return []
    why = (
        "fine-grained activation offloading of fused_group_mlp: the fused grouped MLP's saved "
        "tensors are kept off the GPU (memory choice fused_group_mlp); the copies are not timed"
        + (
            f"; {', '.join(m for m in mods if m != 'fused_group_mlp')} not modelled"
            if len(mods) > 1
            else ""
        )
    )
    for flag in ("fine-grained-activation-offloading", "offload-modules"):
        if flag in r.flags:
            r.done.add(flag)
            r.notes.append(ArgNote(flag, str(r.flags[flag]), "approximated", why))
    return ["fused_group_mlp"]


def _precision(r: Reading) -> str:
    fp8, fp4 = r.text("fp8-format"), r.text("fp4-format")
    base = "bf16" if r.switch("bf16") else "fp16" if r.switch("fp16") else "fp32"
    out = base
    if fp8:
        out = f"fp8-{r.text('fp8-recipe', 'delayed')}"
    if fp4:
        out = r.text("fp4-recipe", "nvfp4") or "nvfp4"
    for f in ("bf16", "fp16", "fp8-format", "fp8-recipe", "fp4-format", "fp4-recipe"):
        r.mapped(f, f"precision {out}")
    return out


def _param_gather(r: Reading, precision: str) -> bool:
    """Whether the parameters are kept and all-gathered quantized: ``--fp8-param-gather`` with
    an FP8 recipe, ``--fp4-param-gather`` with NVFP4 (Megatron's ``TransformerConfig.fp8_param``
    needs FP8 mode, ``fp4_param`` FP4 mode: NVIDIA/Megatron-LM@d98e8a64
    ``megatron/core/transformer/transformer_config.py:602, 683-685, 1566-1579``)."""
    nvfp4 = precision == "nvfp4"
    fp8 = r.switch("fp8-param-gather") and precision not in HIGH_PRECISION and not nvfp4
    fp4 = r.switch("fp4-param-gather") and nvfp4
    r.mapped("fp8-param-gather", "training.precision_options.param_gather (FP8 parameters)")
    r.mapped("fp4-param-gather", "training.precision_options.param_gather (NVFP4 parameters)")
    return fp8 or fp4


def _conditional(r: Reading, lay: ParallelLayout, dist: bool) -> None:
    for flag, (matters, why, harmless) in table.CONDITIONAL.items():
        if flag in r.flags:
            r.done.add(flag)
            if matters(lay, dist):
                r.notes.append(ArgNote(flag, str(r.flags[flag]), "unmapped", why))
            else:
                r.notes.append(ArgNote(flag, str(r.flags[flag]), "ignored", harmless))


def _rest(r: Reading, lay: ParallelLayout) -> None:
    """The flags not read yet: the tables' verdicts, the options read here, the unknown."""
    backend = str(r.flags.get("attention-backend", "auto"))
    opt = str(r.flags.get("optimizer", "adam"))
    disp = str(r.flags.get("moe-token-dispatcher-type", "allgather"))
    special = {
        "attention-backend": ("mapped", "attention core: unfused (s^2 scores in memory)"
                              if backend in ("unfused", "local") else "attention core: fused"),
        "use-flash-attn": ("mapped", "attention core: fused (flash)"),
        "optimizer": ("mapped", f"optimizer {opt}: training.optimizer {OPTIMIZERS[opt]}")
        if opt in ("adam", "sgd") else ("approximated", MUON) if opt == "muon"
        else ("approximated", f"{MUON}; {LAYER_WISE}") if opt == "dist_muon"
        else ("unmapped", f"optimizer {opt!r}: pipesim counts Adam's or SGD's state"),
        "moe-token-dispatcher-type": ("mapped", "token exchange by all-to-all")
        if disp == "alltoall" or lay.ep * lay.tp == 1 else ("mapped", "DeepEP / HybridEP "
        "kernels (framework option moe_token_dispatcher)") if disp == "flex" else ("mapped",
        "all-gather / reduce-scatter dispatcher: routing '+allgather' (sim.parallel.expert)")
        if disp == "allgather" else ("unmapped", f"{disp!r} token dispatcher: not in pipesim"),
    }  # fmt: skip
    for flag, value in r.flags.items():
        if flag in r.done:
            continue
        if flag in special:
            status, reason = special[flag]
        else:
            verdict = table.classify(flag)
            meant = table.nearest_flag(flag) if r.strict else None
            status, reason = verdict or (
                ("unmapped", f"not in pipesim's Megatron table: a misspelling of --{meant}? "
                 f"(else pass --ignore {flag} if it changes neither time nor memory)") if meant else
                ("unmapped", "not in pipesim's Megatron table (sim/runs/megatron_table.py): "
                 "pass --ignore " + flag + " if it changes neither time nor memory")
                if r.strict else
                ("ignored", "printed in the arguments block; not in pipesim's table (assumed "
                 "not to change time or memory)")
            )  # fmt: skip
        r.notes.append(ArgNote(flag, str(value), status, reason))  # type: ignore[arg-type]


__all__ = [
    "MUON",
    "OPTIMIZERS",
    "flag_memory_options",  # re-exported: sim.runs.megatron_memory_flags
    "loss_options",
    "normalise",
    "read_megatron",
    "workspace_options",
]

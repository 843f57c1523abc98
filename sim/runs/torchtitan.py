"""torchtitan's job config (TOML) as a :class:`~sim.runs.record.MeasuredRun` (its training log:
:mod:`sim.runs.torchtitan_log`, which reads the config the log prints with this module).

Read as pytorch/torchtitan@238fa9953e (the last release of the TOML job config, before the
Python config registry of #2386) defines them:

* the job config (``torchtitan/config/job_config.py``): sections ``[model]`` (``name``,
  ``flavor``, ``converters``), ``[training]`` (``local_batch_size``, ``global_batch_size``,
  ``seq_len``, ``mixed_precision_param``), ``[parallelism]`` (``data_parallel_replicate_degree``,
  ``data_parallel_shard_degree`` (-1: the GPUs left), ``tensor_parallel_degree``,
  ``pipeline_parallel_degree``, ``context_parallel_degree``, ``expert_parallel_degree``,
  ``pipeline_parallel_schedule``, ``pipeline_parallel_microbatch_size``...),
  ``[activation_checkpoint]`` (``mode``, ``selective_ac_option``), ``[compile]``,
  ``[float8]``/``[quantize]``, ``optimizer.implementation`` (the profile's option
  ``optimizer_implementation``); every other section is logging, checkpointing, data or
  optimizer hyperparameters (:data:`IGNORED_SECTIONS`);
* the model flavours of ``torchtitan/models/llama3/__init__.py`` (:data:`LLAMA3_FLAVORS`) and
  the FFN width rule of ``torchtitan/models/llama3/model/model.py::FeedForward``
  (:func:`ffn_width`);
* in the log (:mod:`sim.runs.torchtitan_log`): ``[titan] ... - INFO - message``): ``Running with configs: {json}`` (the job
  config, when ``job.print_config``), ``Building <name> <flavor>with {json}`` (the model
  args), ``Building device mesh with parallelism: pp=.., dp_replicate=.., dp_shard=.., cp=..,
  tp=.., ep=.., etp=..`` (``torchtitan/distributed/parallel_dims.py``), ``CUDA capacity: <GPU>
  with <x>GiB memory`` and the step lines of ``torchtitan/components/metrics.py::log``:
  ``step: N  loss: ..  grad_norm: ..  memory: <max_reserved>GiB(<%>)  tps: <tokens/s per
  device>  tflops: ..  mfu: ..%``. The iteration time is ``local_batch_size x seq_len /
  (tps x cp x tp x pp)`` (``tps`` divides the rank's tokens by the non-data-parallel size);
  warm-up by :mod:`sim.runs.warmup`.

FSDP2 (``data_parallel_shard_degree > 1``) shards weights, gradients and optimizer state:
pipesim runs it as the layout's ``dp_shard`` with the torchtitan profile's FSDP2
(:mod:`sim.memory.fsdp`), HSDP with ``dp_replicate`` above 1 too. Replicas alone
(``data_parallel_shard_degree`` 1) ran DDP at 238fa9953e (``apply_ddp``): the profile's option
``data_parallel`` ``ddp`` (its default, ``fully_shard``, is torchtitan since e1847f439).
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.compute.recompute_modules import SAC
from sim.errors import InputError, whole_number
from sim.parallel.layout import ParallelLayout
from sim.runs.record import ArgNote, MeasuredRun, ModelShape
from sim.runs.torchtitan_async_tp import async_tp_options
from sim.textio import read_text

GiB = 2.0**30
LLAMA3_FLAVORS: dict[str, dict[str, Any]] = {
    "8B": {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8,
           "ffn_dim_multiplier": 1.3, "multiple_of": 1024},
    "70B": {"dim": 8192, "n_layers": 80, "n_heads": 64, "n_kv_heads": 8,
            "ffn_dim_multiplier": 1.3, "multiple_of": 4096},
    "405B": {"dim": 16384, "n_layers": 126, "n_heads": 128, "n_kv_heads": 8,
             "ffn_dim_multiplier": 1.2, "multiple_of": 4096},
    "debugmodel": {"dim": 256, "n_layers": 6, "n_heads": 16, "vocab_size": 2048},
}  # fmt: skip
"""torchtitan's Llama 3 flavours (``llama3_configs`` @238fa9953e; vocabulary 128,256 unless
given: ``TransformerModelArgs.vocab_size``)."""
SCHEDULES = {
    "1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved_1f1b",
    "loopedbfs": "looped_bfs", "interleavedzerobubble": "interleaved_zero_bubble",
    "zbvzerobubble": "zbv_zero_bubble", "dualpipev": "dualpipe_v",
}  # fmt: skip
"""torchtitan's ``pipeline_parallel_schedule`` names (torch.distributed.pipelining) ->
pipesim's schedules."""
IGNORED_SECTIONS = {
    "job": "job name and output folder", "profiling": "profiler traces, written around steps",
    "metrics": "logging", "optimizer": "optimizer hyperparameters (AdamW's state is counted)",
    "lr_scheduler": "learning-rate schedule", "checkpoint": "checkpointing, outside timed "
    "steps", "validation": "evaluation between steps", "comm": "timeouts and trace buffers",
    "fault_tolerance": "TorchFT set-up", "memory_estimation": "a dry run before training",
    "experimental": "custom imports",
}  # fmt: skip
"""Sections that change neither iteration time nor memory."""
IGNORED_KEYS = {
    "training.dataset", "training.dataset_path", "training.steps", "training.max_norm",
    "training.gc_freq", "training.gc_debug", "training.seed", "training.deterministic",
    "training.mixed_precision_reduce", "training.dtype", "model.hf_assets_path",
    "model.tokenizer_path", "model.print_after_conversion", "training.dataloader",
    "parallelism.pipeline_parallel_first_stage_less_layers", "activation_checkpoint.early_stop",
    "parallelism.pipeline_parallel_last_stage_less_layers", "activation_checkpoint.debug",
    "parallelism.context_parallel_load_balancer", "activation_checkpoint.preserve_rng_state",
    "activation_checkpoint.determinism_check", "parallelism.disable_loss_parallel",
}  # fmt: skip
"""Keys that change neither (data, run length, numerics, stage-size hints pipesim's uniform
split stands for: approximated below when set)."""


def ffn_width(dim: int, multiple_of: int = 256, multiplier: float | None = None) -> int:
    """torchtitan's SwiGLU width: ``int(2 (4 dim) / 3)``, times ``multiplier``, rounded up to
    a multiple of ``multiple_of`` (``FeedForward.__init__``).

    >>> ffn_width(4096, 1024, 1.3), ffn_width(8192, 4096, 1.3), ffn_width(16384, 4096, 1.2)
    (14336, 28672, 53248)
    """
    hidden = int(2 * 4 * dim / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _flat(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and not key.startswith("training.dataloader"):
            out |= _flat(v, key + ".")
        else:
            out[key] = v
    return out


def _shape(model: str, flavor: str, args: dict[str, Any] | None, notes: list) -> ModelShape:
    if args is None and model == "llama3":
        args = LLAMA3_FLAVORS.get(flavor)
    if args is None:
        notes.append(ArgNote("model.flavor", f"{model} {flavor}", "unmapped", "the model's "
                             "sizes are not known offline (give the log that prints 'Building "
                             f"{model} {flavor}with ...', or use a llama3 flavour)"))  # fmt: skip
        return ModelShape(arch="unknown")
    dim = int(args["dim"])
    ffn = ffn_width(dim, int(args.get("multiple_of", 256)), args.get("ffn_dim_multiplier"))
    heads = int(args["n_heads"])
    kv = args.get("n_kv_heads")
    return ModelShape(
        arch="decoder", layers=int(args["n_layers"]), hidden=dim, heads=heads,
        kv_heads=int(kv) if kv and int(kv) != heads else None, ffn_hidden=ffn,
        vocab=int(args.get("vocab_size", 128256)), gated_mlp=True, tied_embeddings=False,
        features=("position=rope", "norm=RMSNorm"), source=f"torchtitan {model} {flavor}",
    )  # fmt: skip


def _degrees(
    c: dict[str, Any], world: int | None, mesh: dict[str, int] | None, source: str
) -> dict[str, int]:
    """Each parallel degree of the config (0 or absent: 1; the shard degree -1: every GPU the
    others leave), or of a log's device ``mesh``.

    Raises:
        InputError: a degree that is no whole number, below 1 (the shard degree: -1 or >= 1,
            as torchtitan's ``ParallelDims`` checks), naming ``source`` and the key.
    """
    names = (
        "tensor_parallel",
        "pipeline_parallel",
        "context_parallel",
        "expert_parallel",
        "data_parallel_replicate",
        "expert_tensor_parallel",
    )
    d = {k: whole_number(c.get(f"parallelism.{k}_degree", 1) or 1, f"parallelism.{k}_degree",
                         source) for k in names}  # fmt: skip
    shard = whole_number(c.get(SHARD_KEY, -1), SHARD_KEY, source, minimum=-1)
    if shard == 0:
        raise InputError("must be -1 (every GPU the other degrees leave) or >= 1, got 0",
                         file=source, field=SHARD_KEY)  # fmt: skip
    if mesh:
        return {"tensor_parallel": mesh["tp"], "pipeline_parallel": mesh["pp"],
                "context_parallel": mesh["cp"], "expert_parallel": mesh["ep"],
                "data_parallel_replicate": mesh["dp_replicate"],
                "expert_tensor_parallel": mesh["etp"], "data_parallel_shard": mesh["dp_shard"]}  # fmt: skip
    if shard == -1:
        rest = d["tensor_parallel"] * d["pipeline_parallel"] * d["context_parallel"]
        shard = max(1, (world or rest) // (rest * d["data_parallel_replicate"]))
    d["data_parallel_shard"] = shard
    return d


def read_torchtitan_config(
    cfg: dict[str, Any],
    *,
    source: str,
    name: str = "",
    num_gpus: int | None = None,
    gpu: str = "",
    model_args: dict[str, Any] | None = None,
    mesh: dict[str, int] | None = None,
    strict: bool = True,
) -> MeasuredRun:
    """The run a torchtitan job config describes (module doc); nothing measured yet.

    ``strict``: a key not in the tables is ``unmapped`` (a TOML the user wrote), else
    ``ignored`` (a log's printed config, which holds every field).
    """
    c = _flat(cfg)
    notes: list[ArgNote] = []
    used: dict[str, str] = {}
    d = _degrees(c, num_gpus, mesh, source)
    tp, pp, cp = d["tensor_parallel"], d["pipeline_parallel"], d["context_parallel"]
    rep, shard, ep = d["data_parallel_replicate"], d["data_parallel_shard"], d["expert_parallel"]
    etp = d["expert_tensor_parallel"]
    sched = SCHEDULES.get(str(c.get("parallelism.pipeline_parallel_schedule", "1F1B")).lower())
    multi = sched in ("interleaved_1f1b", "looped_bfs", "interleaved_zero_bubble",
                      "zbv_zero_bubble", "dualpipe_v")  # fmt: skip
    lay = ParallelLayout(pp=pp, vp=2 if multi and pp > 1 else 1, dp_replicate=rep, dp_shard=shard,
                         cp=cp, tp=tp, sp=tp > 1, ep=ep, etp=etp if etp != tp else None)  # fmt: skip
    local = whole_number(c.get("training.local_batch_size", 8), "training.local_batch_size",
                         source)  # fmt: skip
    glob = whole_number(c.get("training.global_batch_size", -1), "training.global_batch_size",
                        source, minimum=-1)  # fmt: skip
    glob = glob if glob > 0 else local * rep * shard
    mb_key = "parallelism.pipeline_parallel_microbatch_size"
    mbs = whole_number(c.get(mb_key, 1), mb_key, source) if pp > 1 else local
    seq = whole_number(c.get("training.seq_len", 2048), "training.seq_len", source)
    model, flavor = str(c.get("model.name", "llama3")), str(c.get("model.flavor", "debugmodel"))
    shape = _shape(model, flavor, model_args, notes)
    shape = replace(shape, features=shape.features + _kernels(c, model, used))
    for k in ("model.name", "model.flavor"):
        used[k] = "model shape"
    for k in ("training.local_batch_size", "training.global_batch_size", "training.seq_len",
              "parallelism.pipeline_parallel_microbatch_size"):  # fmt: skip
        used[k] = "batch and sequence"
    for k in d:
        used[f"parallelism.{k}_degree"] = "layout"
    used["parallelism.pipeline_parallel_schedule"] = f"schedule {sched}"
    if sched is None:
        notes.append(ArgNote("parallelism.pipeline_parallel_schedule",
                             str(c.get("parallelism.pipeline_parallel_schedule")), "unmapped",
                             "schedule not known to pipesim"))  # fmt: skip
    if multi and pp > 1:
        notes.append(ArgNote("parallelism.pipeline_parallel_layers_per_stage",
                             str(c.get("parallelism.pipeline_parallel_layers_per_stage")),
                             "approximated", "2 stages per rank assumed for a multi-stage "
                             "schedule (torchtitan sizes stages by layers per stage)"))  # fmt: skip
    assumed = _world_assumed(c, num_gpus, mesh, lay.gpus)
    if assumed:
        notes.append(ArgNote(SHARD_KEY, "-1", "approximated", assumed))
    recompute = _recompute(c, notes, used, (shape.layers or 0) // max(1, pp))
    precision = _precision(c, notes, used)
    _options(c, lay, notes, used, rep, shard)
    options = async_tp_options(c, lay, notes, used)
    impl = c.get("optimizer.implementation")  # fused (the default), foreach, for-loop
    if impl is not None:
        used["optimizer.implementation"] = "option optimizer_implementation"
        options += (("optimizer_implementation", str(impl)),) if impl != "fused" else ()
    if shard == 1 and rep > 1:  # DDP at 238fa9953e (apply_ddp), not b5bcd76's fully_shard
        options += (("data_parallel", "ddp"),)
    _rest(c, notes, used, strict)
    return MeasuredRun(
        name=name or f"{model}-{flavor}", source=source, framework="torchtitan", gpu=gpu,
        num_gpus=num_gpus or lay.gpus, layout=lay, microbatch_size=mbs, global_batch=glob,
        seq_len=seq, precision=precision, recompute=recompute, schedule=sched or "1f1b",
        zero_stage=3 if shard > 1 else 0, shape=replace(shape), args=tuple(notes),
        framework_options=options,
        notes=(f"{SHARD_KEY}: {assumed}",) if assumed else (),
    )  # fmt: skip


SHARD_KEY = "parallelism.data_parallel_shard_degree"


def _world_assumed(
    c: dict[str, Any], num_gpus: int | None, mesh: dict[str, int] | None, gpus: int
) -> str:
    """What was assumed for a shard degree of -1 (torchtitan: the GPUs the other dimensions
    leave) when neither the job's GPU count (``--gpus``) nor a log's device mesh says how
    many GPUs that is; "" when nothing was."""
    if mesh or num_gpus or int(c.get(SHARD_KEY, -1)) != -1:
        return ""
    return (
        f"-1 is every GPU the other dimensions leave, and the file does not say how many "
        f"GPUs the job has: {gpus} assumed (give --gpus N)"
    )


def _kernels(c: dict[str, Any], model: str, used: dict) -> tuple[str, ...]:
    """The eager kernels of torchtitan's Llama 3 as shape features (:mod:`sim.compute.
    torchtitan_ops`): ``rope=complex`` (``apply_rotary_emb``); a config with ``model.norm_type``
    is torchtitan before its removal (#1131, 2025-04-23), so also before GQA without repeats
    (#2259, 2026-01-27): ``kv_repeat=1``, and ``norm_ops=fp32`` for ``rmsnorm`` (its own fp32
    ``RMSNorm``; ``fused_rmsnorm`` is one Triton kernel each way, as pipesim's fused norm).
    Without ``norm_type``: ``nn.RMSNorm``, taken as one fused kernel (torch 2.13 has
    ``aten::_fused_rms_norm``; an assumption for older torch)."""
    if model != "llama3":
        return ()
    norm = c.get("model.norm_type")
    if norm is None:
        return ("rope=complex",)
    used["model.norm_type"] = f"kernels ({norm})"
    return ("rope=complex", "kv_repeat=1") + (("norm_ops=fp32",) if norm == "rmsnorm" else ())


def _recompute(c: dict[str, Any], notes: list, used: dict, per_stage: int) -> str:
    """The run's recompute (:attr:`MeasuredRun.recompute`) from ``[activation_checkpoint]``:
    ``none``; ``full`` (also layer SAC of every layer); per-op SAC (``op``) as
    :data:`~sim.compute.recompute_modules.SAC`; layer SAC of every ``N``-th layer
    (``_apply_layer_sac``: the layers whose count is a multiple of ``N``) as the first
    ``per_stage // N`` layers of each stage, stated; anything else unmapped."""
    mode = str(c.get("activation_checkpoint.mode", "selective"))
    opt = str(c.get("activation_checkpoint.selective_ac_option", "2"))
    used["activation_checkpoint.mode"] = used["activation_checkpoint.selective_ac_option"] = (
        "recompute"
    )
    if mode == "none":
        return "none"
    if mode == "full" or (mode == "selective" and opt == "1"):
        return "full"
    if mode == "selective" and opt == "op":  # pipesim's recompute:sac (sim.memory.recompute)
        return SAC
    if mode == "selective" and opt.isdigit() and int(opt) > 1:
        k = per_stage // int(opt)
        notes.append(ArgNote("activation_checkpoint.selective_ac_option", opt, "approximated",
                             f"every {opt}th layer checkpointed whole (torchtitan's layer SAC): "
                             f"simulated as the first {k} layers of each stage (recompute:full:"
                             f"{k}: as many layers, others)"))  # fmt: skip
        return f"full:block:{k}" if k else "none"
    what = (
        "per-op selective AC (every second matmul saved)"
        if opt == "op"
        else (f"every {opt}th layer checkpointed" if opt.isdigit() else f"{mode} {opt}")
    )
    notes.append(ArgNote("activation_checkpoint.mode", f"{mode} ({opt})", "unmapped",
                         f"{what}: issue 26 item 5 (torchtitan's SAC)"))  # fmt: skip
    return f"selective:torchtitan-{opt}"


def _precision(c: dict[str, Any], notes: list, used: dict) -> str:
    conv = c.get("model.converters") or []
    used["model.converters"] = "precision"
    used["training.mixed_precision_param"] = "precision"
    if any("float8" in str(x) for x in conv):
        return "fp8-" + str(
            c.get("float8.recipe_name")
            or c.get("quantize.linear.float8.recipe_name")
            or "tensorwise"
        )
    if any("mx" in str(x) for x in conv):
        return "mxfp8"
    return {"float32": "fp32"}.get(str(c.get("training.mixed_precision_param")), "bf16")


def _options(c: dict[str, Any], lay: ParallelLayout, notes: list, used: dict, rep: int,
             shard: int) -> None:  # fmt: skip
    checks = (
        ("training.enable_cpu_offload", bool(c.get("training.enable_cpu_offload")),
         "FSDP2 CPU offload (not a pipesim policy)"),
        ("parallelism.fsdp_reshard_after_forward", str(c.get(
            "parallelism.fsdp_reshard_after_forward", "default")) == "never" and shard > 1,
         "FSDP2 without resharding after forward (issue 26 item 3)"),
        ("parallelism.expert_parallel_comm_backend", str(c.get(
            "parallelism.expert_parallel_comm_backend", "standard")) != "standard",
         "DeepEP dispatcher (issue 26 item 2)"),
    )  # fmt: skip
    if "compile.enable" in c:
        used.setdefault("compile.enable", "option")  # off: mapped, as the other options
    if c.get("compile.enable"):
        notes.append(ArgNote("compile.enable", str(c.get("compile.enable")), "approximated",
                             COMPILE_APPROXIMATION))  # fmt: skip
    for key, bad, why in checks:
        if key in c:
            used.setdefault(key, "option")
        if bad:
            notes.append(ArgNote(key, str(c.get(key)), "unmapped", why))


COMPILE_APPROXIMATION = (
    "torch.compile of each TransformerBlock (torchtitan distributed/compile.py) simulated as "
    "eager: the kernels Inductor fuses and the host work it removes are not modelled "
    "(assumption: an upper bound on the step)"
)
"""What a compiled torchtitan run is simulated as (the torchtitan profile's ``compile`` option
says the same: :mod:`sim.framework.torchtitan`)."""


def _rest(c: dict[str, Any], notes: list, used: dict, strict: bool) -> None:
    noted = {n.name for n in notes}
    for key, value in c.items():
        if key in noted:
            continue
        section = key.split(".", 1)[0]
        if key in used:
            notes.append(ArgNote(key, str(value), "mapped", used[key]))
        elif section in IGNORED_SECTIONS:
            notes.append(ArgNote(key, str(value), "ignored", IGNORED_SECTIONS[section]))
        elif key in IGNORED_KEYS or key.startswith("training.dataloader"):
            notes.append(ArgNote(key, str(value), "ignored", "data, run length or numerics"))
        elif section in ("float8", "quantize", "mx", "compile"):
            notes.append(ArgNote(key, str(value), "ignored", "used only with a converter "
                                 "(model.converters) or with compile.enable"))  # fmt: skip
        elif not strict or value in (None, "", [], False):
            notes.append(ArgNote(key, str(value), "ignored", "printed in the job config; not "
                                 "in pipesim's table (assumed not to change time or memory)"))  # fmt: skip
        else:
            notes.append(ArgNote(key, str(value), "unmapped", "not in pipesim's torchtitan "
                                 "table (sim/runs/torchtitan.py): pass --ignore " + key))  # fmt: skip


def read_torchtitan_toml(path: str | Path, **kw: Any) -> MeasuredRun:
    """The run a torchtitan TOML job config describes.

    Raises:
        InputError: not TOML (naming the file and line).
    """
    try:
        cfg = tomllib.loads(read_text(path, what="torchtitan TOML"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not TOML ({exc})", file=str(path)) from None
    return read_torchtitan_config(cfg, source=str(path), name=Path(path).stem, **kw)

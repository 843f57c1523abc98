"""A DeepSpeed job (JSON config, launch command, log) as a :class:`~sim.runs.record.MeasuredRun`.

Read as deepspeedai/DeepSpeed@edaa7221 defines them:

* the JSON config (``deepspeed/runtime/config.py``, ``zero/config.py``):
  ``train_batch_size``, ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``
  (``train_batch_size = micro x accumulation x dp``), ``fp16.enabled``, ``bf16.enabled``,
  ``zero_optimization.stage`` and its ``offload_optimizer``/``offload_param`` devices,
  ``optimizer.type``; logging, monitoring and scheduler keys are ignored
  (:data:`IGNORED_KEYS`), the rest judged by :data:`KEYS`;
* the launch command (``deepspeed/launcher/runner.py``): ``deepspeed --num_gpus N
  --num_nodes M script.py ...``. A Megatron-DeepSpeed script (its flags name the model:
  ``--num-layers``...) is read by :mod:`sim.runs.megatron_args` as the ``megatron-deepspeed``
  framework, with its ``--zero-stage`` and ``--checkpoint-activations`` (full recompute in
  Megatron-DeepSpeed); any other script needs the model's Hugging Face ``config.json``
  (:mod:`sim.trace.hf_config`);
* the log: the throughput timer's ``epoch=../micro_step=../global_step=N,
  RunningAvgSamplesPerSec=.., CurrSamplesPerSec=S, MemAllocated=..GB, MaxMemAllocated=M GB``
  (``deepspeed/utils/timer.py::ThroughputTimer.stop``: ``S = train_batch_size / step time``,
  ``M`` in 2^30 bytes) and the printed config (``DeepSpeedEngine configuration:`` ... ``json =
  {...}``, ``runtime/config.py::print_user_config``).

ZeRO stage 0 is plain data parallelism, 1 the distributed optimizer (``dist_opt``), 2 with the
optimizer offloaded ZeRO-Offload (``zero_offload``), 3 ``zero3`` (``:offload`` with
``offload_param``). ZeRO-2 without offload (gradients partitioned too) has no policy yet.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.errors import InputError, whole_number
from sim.parallel.layout import ParallelLayout
from sim.runs.argv import Command, parse_command
from sim.runs.megatron_args import read_megatron
from sim.runs.record import ArgNote, Measured, MeasuredRun, ModelShape
from sim.runs.warmup import WarmupError, steady_time
from sim.textio import read_text
from sim.trace.hf_config import shape_from_config

GiB = 2.0**30
IGNORED_PREFIXES = ("tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler",
                    "scheduler", "steps_per_print", "wall_clock_breakdown", "dump_state",
                    "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
                    "zero_allow_untested_optimizer", "optimizer.params", "fp16.loss_scale",
                    "fp16.initial_scale_power", "fp16.loss_scale_window", "fp16.hysteresis",
                    "fp16.min_loss_scale", "fp16.auto_cast", "timers", "seed",
                    "memory_breakdown", "checkpoint", "data_efficiency")  # fmt: skip
"""Config keys (and prefixes) that change neither time nor memory: logging, schedulers,
clipping, loss scaling, checkpoints."""
KEYS: dict[str, tuple[str, str]] = {
    "zero_optimization.overlap_comm": ("approximated", "ZeRO's reduction overlapped with "
                                       "the backward (two buckets)"),
    "zero_optimization.contiguous_gradients": ("approximated", "gradients copied into one "
                                               "buffer as produced"),
    "zero_optimization.reduce_bucket_size": ("approximated", "ZeRO's reduction bucket"),
    "zero_optimization.allgather_bucket_size": ("approximated", "ZeRO's all-gather bucket"),
    "zero_optimization.reduce_scatter": ("approximated", "reduce-scatter instead of "
                                         "all-reduce"),
    "zero_optimization.round_robin_gradients": ("approximated", "gradient partition order"),
    "zero_optimization.stage3_prefetch_bucket_size": ("approximated", "ZeRO-3 prefetch size"),
    "zero_optimization.stage3_param_persistence_threshold": ("approximated", "small "
                                                             "parameters kept whole"),
    "zero_optimization.stage3_max_live_parameters": ("approximated", "ZeRO-3 live limit"),
    "zero_optimization.stage3_max_reuse_distance": ("approximated", "ZeRO-3 reuse"),
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": ("ignored", "checkpoint"),
    "zero_optimization.sub_group_size": ("approximated", "optimizer step sub-groups"),
    "communication_data_type": ("approximated", "gradient reduction dtype"),
    "activation_checkpointing.partition_activations": ("unmapped", "checkpointed "
                                                       "activations split over TP ranks"),
    "activation_checkpointing.cpu_checkpointing": ("unmapped", "checkpoints offloaded to "
                                                   "the host"),
    "activation_checkpointing.contiguous_memory_optimization": ("approximated", "checkpoint "
                                                                "buffer layout"),
    "activation_checkpointing.number_checkpoints": ("approximated", "checkpoint buffers"),
    "activation_checkpointing.synchronize_checkpoint_boundary": ("approximated", "a sync "
                                                                 "per checkpoint"),
    "activation_checkpointing.profile": ("ignored", "logging"),
    "amp.enabled": ("unmapped", "Apex AMP (not a pipesim precision)"),
}  # fmt: skip
"""Config keys with a fixed verdict (status, reason); the ones read into the run are mapped."""
MAPPED = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
          "fp16.enabled", "bf16.enabled", "zero_optimization.stage", "optimizer.type",
          "zero_optimization.offload_optimizer.device", "zero_optimization.offload_param.device",
          "zero_optimization.offload_optimizer.pin_memory",
          "zero_optimization.offload_param.pin_memory"}  # fmt: skip
DS_FLAGS = {"deepspeed": "the DeepSpeed engine (framework)", "deepspeed-config": "this config",
            "deepspeed_config": "this config", "zero-stage": "ZeRO stage",
            "checkpoint-activations": "full recompute (Megatron-DeepSpeed)",
            "deepspeed-activation-checkpointing": "DeepSpeed's checkpointing of Megatron's "
            "layers (the recompute above)", "local-rank": "launcher rank"}  # fmt: skip
"""Megatron-DeepSpeed flags read here rather than by the Megatron table."""
TIMER = re.compile(r"global_step=(\d+),.*?CurrSamplesPerSec=([0-9.eE+-]+).*?"
                   r"MaxMemAllocated=([0-9.]+)GB")  # fmt: skip
MARKER = "CurrSamplesPerSec="


def _flat(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _config_notes(c: dict[str, Any]) -> list[ArgNote]:
    out = []
    for key, value in c.items():
        if key in MAPPED:
            out.append(ArgNote(key, str(value), "mapped", "batch, precision or ZeRO stage"))
        elif key in KEYS:
            status, why = KEYS[key]
            out.append(ArgNote(key, str(value), status, why))  # type: ignore[arg-type]
        elif key.startswith(IGNORED_PREFIXES) or key.endswith(".enabled"):
            out.append(ArgNote(key, str(value), "ignored", "logging, scheduler, clipping, "
                               "loss scaling or checkpointing"))  # fmt: skip
        else:
            out.append(ArgNote(key, str(value), "unmapped", "not in pipesim's DeepSpeed "
                               "table (sim/runs/deepspeed.py): pass --ignore " + key))  # fmt: skip
    return out


def _batch(c: dict[str, Any], dp: int, source: str) -> tuple[int, int]:
    """``(micro-batch, global batch)``: DeepSpeed's rule ``train = micro x accumulation x dp``.

    Raises:
        InputError: a batch size or accumulation count that is no whole number >= 1, naming
            ``source`` and the key.
    """
    for k in ("train_micro_batch_size_per_gpu", "train_batch_size", "gradient_accumulation_steps"):
        if c.get(k) == "auto":
            raise InputError("'auto' is filled in by Hugging Face's Trainer at launch: write the "
                             "value the run used", file=source, field=k)  # fmt: skip
    micro, train, acc = (
        None if c.get(k) is None else whole_number(c[k], k, source)
        for k in ("train_micro_batch_size_per_gpu", "train_batch_size",
                  "gradient_accumulation_steps")
    )  # fmt: skip
    if micro is None and train is not None:
        micro = train // ((acc or 1) * dp)
    if train is None:
        train = (micro or 1) * (acc or 1) * dp
    return micro or 1, train


def _model(command: Command | None, hf: dict[str, Any] | None, seq: int | None,
           notes: list[ArgNote]) -> ModelShape:  # fmt: skip
    if hf is not None and seq:
        s = shape_from_config(hf, seq)
        return ModelShape(
            arch="decoder", layers=s.layers, hidden=s.hidden, heads=s.heads,
            kv_heads=s.kv_heads, ffn_hidden=s.ffn_hidden, vocab=s.vocab, gated_mlp=True,
            tied_embeddings=bool(hf.get("tie_word_embeddings")), source="Hugging Face config",
        )  # fmt: skip
    notes.append(ArgNote("model", command.script if command else "", "unmapped",
                         "the model's sizes: give its Hugging Face config.json "
                         "(sim import --model-config) and --seq-len"))  # fmt: skip
    return ModelShape()


def read_deepspeed(
    config: dict[str, Any],
    *,
    command: str | None = None,
    source: str,
    name: str = "",
    gpu: str = "",
    num_gpus: int | None = None,
    hf_config: dict[str, Any] | None = None,
    seq_len: int | None = None,
) -> MeasuredRun:
    """The run a DeepSpeed config (and launch command) describe (module doc)."""
    cmd = parse_command(command, file=source) if command else None
    c = _flat(config)
    notes = _config_notes(c)
    launch = cmd.launcher_flags if cmd else {}
    world = num_gpus or int(launch.get("num-gpus", 0) or 0) * int(launch.get("num-nodes", 1) or 1)
    for k in launch:
        notes.append(ArgNote(f"launcher {k}", str(launch[k]), "mapped" if k in (
            "num-gpus", "num-nodes") else "ignored", "GPUs in the job" if k in (
            "num-gpus", "num-nodes") else "launcher set-up"))  # fmt: skip
    flags = dict(cmd.flags) if cmd else {}
    zero = whole_number(c.get("zero_optimization.stage", flags.get("zero-stage", 0)) or 0,
                        "zero_optimization.stage", source, minimum=0)  # fmt: skip
    recompute = "full" if flags.get("checkpoint-activations") else "none"
    ds_notes = [ArgNote(k, str(flags.pop(k)), "mapped", why) for k, why in DS_FLAGS.items()
                if k in flags]  # fmt: skip
    prec = "bf16" if c.get("bf16.enabled") else "fp16" if c.get("fp16.enabled") else "fp32"
    if "num-layers" in flags:
        run = read_megatron(flags | {"world-size": world or None}, name=name, source=source,
                            gpu=gpu, framework="megatron-deepspeed")  # fmt: skip
        lay = run.layout
        base = replace(run, args=run.args + tuple(ds_notes))
    else:
        lay = ParallelLayout(dp_replicate=max(1, world))
        notes += [ArgNote(k, str(v), "ignored", "the training script's own argument")
                  for k, v in flags.items()]  # fmt: skip
        base = MeasuredRun(name=name, source=source, framework="deepspeed", gpu=gpu,
                           num_gpus=world or None, layout=lay, seq_len=seq_len,
                           shape=_model(cmd, hf_config, seq_len, notes))  # fmt: skip
    mbs, gbs = _batch(c, lay.dp, source)
    offload = "+".join(k for k in ("optimizer", "param")
                       if c.get(f"zero_optimization.offload_{k}.device") == "cpu")  # fmt: skip
    return replace(
        base, microbatch_size=mbs, global_batch=gbs, precision=prec, zero_stage=zero,
        recompute=recompute if recompute != "none" else base.recompute, offload=offload,
        args=base.args + tuple(notes),
    )  # fmt: skip


def read_deepspeed_json(path: str | Path, **kw: Any) -> MeasuredRun:
    """A DeepSpeed JSON config file (and ``command=``...) as a run.

    Raises:
        InputError: not JSON, or not a mapping.
    """
    try:
        cfg = json.loads(read_text(path, what="DeepSpeed config"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc})", file=str(path)) from None
    if not isinstance(cfg, dict):
        raise InputError("a DeepSpeed config is a JSON object", file=str(path))
    if not {"train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization"} & set(cfg):
        raise InputError("not a DeepSpeed config: it sets none of train_batch_size, "
                         "train_micro_batch_size_per_gpu, zero_optimization", file=str(path),
                         field="train_batch_size")  # fmt: skip
    return read_deepspeed(cfg, source=str(path), name=kw.pop("name", "") or Path(path).stem, **kw)


def read_deepspeed_log(path: str | Path, *, command: str | None = None, **kw: Any) -> MeasuredRun:
    """A DeepSpeed training log as a run: its printed config, the launch ``command`` for the
    model, the throughput timer for time and memory (module doc).

    Raises:
        InputError: no throughput-timer line, too few steps, or no printed config.
    """
    text = read_text(path, what="DeepSpeed log")
    at = text.find("json = {")
    if at < 0:
        raise InputError("no printed config ('json = {...}' after 'DeepSpeedEngine "
                         "configuration:'): give the JSON config instead", file=str(path))  # fmt: skip
    try:
        cfg, _ = json.JSONDecoder().raw_decode(text[text.find("{", at) :])
    except json.JSONDecodeError as exc:
        raise InputError(f"the printed config is not JSON ({exc})", file=str(path)) from None
    run = read_deepspeed(cfg, command=command, source=str(path), name=Path(path).stem, **kw)
    steps = {int(m.group(1)): m for m in TIMER.finditer(text)}
    if not steps:
        raise InputError(f"no throughput-timer line ('{MARKER}'): set steps_per_print",
                         file=str(path))  # fmt: skip
    gbs = run.global_batch or 1
    times = {s: gbs / float(m.group(2)) for s, m in steps.items()}
    try:
        t, rule = steady_time(times)
    except WarmupError as exc:
        raise InputError(str(exc), file=str(path), field="global_step") from None
    return replace(run, measured=Measured(
        iteration_time_s=t, iteration_times_s=tuple(times[s] for s in sorted(times)),
        time_rule=f"train_batch_size / CurrSamplesPerSec: {rule}",
        peak_allocated_bytes=max(float(m.group(3)) for m in steps.values()) * GiB,
        memory_kind="largest MaxMemAllocated of the throughput timer (rank 0)",
    ))  # fmt: skip

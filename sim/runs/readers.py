"""Any input a user has, read as measured runs: :func:`read_runs`.

The format is recognised from the file (:func:`detect`), in this order:

==================================  ===========================================================
input                               reader
==================================  ===========================================================
CSV with ``iteration_time_ms``      vTrain's layout (:mod:`sim.runs.vtrain`)
CSV with ``step_time_s``            ``../shared/data/measured/`` layout (:mod:`sim.runs.measured_csv`)
JSON with ``iteration-time``        Megatron-LM functional-test golden values
                                    (:mod:`sim.runs.megatron_golden`, with the
                                    ``model_config.yaml`` beside it or ``config``)
JSON with ``train_batch_size``...   a DeepSpeed config (:mod:`sim.runs.deepspeed`; ``command``
                                    gives the launch command)
TOML                                a torchtitan job config (:mod:`sim.runs.torchtitan`)
YAML with ``MODEL_ARGS``            a functional test's ``model_config.yaml`` (no measurement)
YAML with ``model:``                a Megatron-Bridge ``ConfigContainer`` (:mod:`sim.runs.bridge`)
text with ``elapsed time per        a Megatron-LM log (:mod:`sim.runs.megatron_log`)
iteration (ms)``
text with ``tps:`` and ``step:``    a torchtitan log
text with ``CurrSamplesPerSec=``    a DeepSpeed log
any other text, or a string that    a launch command: Megatron-LM (``pretrain_*.py``,
is not a file                       torchrun) or DeepSpeed (``deepspeed`` launcher)
==================================  ===========================================================
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.errors import InputError
from sim.runs import deepspeed, megatron_log, torchtitan, torchtitan_log
from sim.runs.argv import parse_command
from sim.runs.bridge import read_bridge_yaml
from sim.runs.measured_csv import read_measured_csv
from sim.runs.megatron_args import read_megatron
from sim.runs.megatron_golden import model_args, read_golden
from sim.runs.record import ArgNote, MeasuredRun
from sim.runs.vtrain import read_vtrain
from sim.textio import load_yaml, read_text

SCRIPT_ARCH = {"pretrain_bert": "bert", "pretrain_t5": "t5", "pretrain_mamba": "hybrid",
               "pretrain_hybrid": "hybrid", "pretrain_gpt": None}  # fmt: skip
"""Megatron-LM training scripts and the model family each builds."""


def detect(path: Path) -> str:
    """The format of ``path`` (module doc): ``vtrain``, ``measured``, ``golden``,
    ``deepspeed-config``, ``torchtitan-config``, ``golden-config``, ``bridge``,
    ``megatron-log``, ``torchtitan-log``, ``deepspeed-log`` or ``command``.

    Raises:
        InputError: unreadable.
    """
    text = read_text(path, what="run file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        head = text.split("\n", 1)[0]
        return "vtrain" if "iteration_time_ms" in head else "measured"
    if suffix == ".json":
        golden = '"iteration-time"' in text or path.name.startswith("golden_values")
        return "golden" if golden else "deepspeed-config"
    if suffix == ".toml":
        return "torchtitan-config"
    if suffix in (".yaml", ".yml"):
        return "golden-config" if "MODEL_ARGS" in text else "bridge"
    if megatron_log.MARKER in text:
        return "megatron-log"
    if deepspeed.MARKER in text:
        return "deepspeed-log"
    if torchtitan_log.MARKER in text and "step:" in text:
        return "torchtitan-log"
    return "command"


def read_command(
    text: str, *, source: str, gpu: str = "", num_gpus: int | None = None,
    ds_config: str | Path | None = None, hf_config: dict | None = None,
    seq_len: int | None = None,
) -> MeasuredRun:  # fmt: skip
    """A launch command (module doc) as a run (nothing measured).

    Raises:
        InputError: unbalanced quotes, text that is no command (no launcher, no flags), or a
            DeepSpeed command whose config is not given.
    """
    cmd = parse_command(text, file=source)
    if not cmd.flags and not cmd.launcher and not ds_config:
        raise InputError(
            "not recognised: no launch command (--flags of Megatron-LM, torchrun or deepspeed), "
            "config (Megatron-Bridge YAML, torchtitan TOML, DeepSpeed JSON) or training log "
            "(Megatron-LM, torchtitan, DeepSpeed) in it; `sim import --help` lists what is read",
            file=source,
        )
    ds_path = ds_config or cmd.flags.get("deepspeed-config") or cmd.flags.get("deepspeed_config")
    if cmd.launcher == "deepspeed" or ds_path:
        if not isinstance(ds_path, str | Path) or not Path(ds_path).is_file():
            raise InputError("a DeepSpeed command needs its JSON config (--deepspeed_config "
                             "FILE that exists, or sim import --config FILE)", file=source)  # fmt: skip
        return deepspeed.read_deepspeed_json(ds_path, command=text, gpu=gpu, num_gpus=num_gpus,
                                             hf_config=hf_config, seq_len=seq_len)  # fmt: skip
    stem = Path(cmd.script).stem if cmd.script else "pretrain_gpt"
    flags = dict(cmd.flags)
    for k in ("nproc-per-node", "nnodes"):
        if k in cmd.launcher_flags:
            flags[k] = cmd.launcher_flags[k]
    run = read_megatron(flags, name=stem, source=source, arch=SCRIPT_ARCH.get(stem), gpu=gpu,
                        num_gpus=num_gpus)  # fmt: skip
    extra = [ArgNote(f"env {k}", v, "ignored", "environment variable") for k, v in cmd.env.items()]
    extra += [
        ArgNote(f"{cmd.launcher} {k}", str(v), "ignored", "launcher set-up")
        for k, v in cmd.launcher_flags.items()
        if k not in ("nproc-per-node", "nnodes")
    ]
    return replace(run, args=run.args + tuple(extra))


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False where the name cannot be a file's (a launch command longer
    than the 255 bytes a file name may have: ``is_file`` raises ENAMETOOLONG on Linux)."""
    try:
        return path.is_file()
    except OSError:
        return False


def read_runs(source: str | Path, **opts: Any) -> list[MeasuredRun]:
    """The runs in ``source`` (a file, or a launch command given as text).

    Args:
        source: the file or command.
        **opts: ``gpu``, ``num_gpus``, ``config`` (the companion file: a torchtitan TOML for
            its log, a ``model_config.yaml`` for a golden JSON, the DeepSpeed JSON for a
            command or log), ``command`` (a DeepSpeed log's launch command), ``hf_config``
            (a parsed Hugging Face ``config.json``), ``seq_len``, ``recipes``.

    Raises:
        InputError: unreadable or malformed input, naming the file and field.
    """
    path = Path(source)
    gpu, gpus = opts.get("gpu", ""), opts.get("num_gpus")
    if not _is_file(path):
        if isinstance(source, str) and (" --" in source or source.startswith("--")):
            return [read_command(source, source="<command>", gpu=gpu, num_gpus=gpus,
                                 ds_config=opts.get("config"), hf_config=opts.get("hf_config"),
                                 seq_len=opts.get("seq_len"))]  # fmt: skip
        if path.is_dir():
            raise InputError(f"is a folder: give the run files in it ({path}/*.log, "
                             f"{path}/*.csv ...)", file=str(path))  # fmt: skip
        raise InputError("not found (a run file, or a launch command in quotes)", file=str(path))
    if path.stat().st_size == 0:
        raise InputError("is empty: a run file holds a log, a config or measured-run rows",
                         file=str(path))  # fmt: skip
    kind = detect(path)
    cfg = opts.get("config")
    if kind == "vtrain":
        return read_vtrain(path)
    if kind == "measured":
        return read_measured_csv(path, recipes=opts.get("recipes"))
    if kind == "golden":
        return [read_golden(path, config=cfg, gpu=gpu, num_gpus=gpus)]
    if kind == "deepspeed-config":
        return [deepspeed.read_deepspeed_json(path, command=opts.get("command"), gpu=gpu,
                                              num_gpus=gpus, hf_config=opts.get("hf_config"),
                                              seq_len=opts.get("seq_len"))]  # fmt: skip
    if kind == "torchtitan-config":
        return [torchtitan.read_torchtitan_toml(path, gpu=gpu, num_gpus=gpus)]
    if kind == "golden-config":
        return [read_megatron(model_args(path), name=path.parent.name, source=str(path),
                              gpu=gpu, num_gpus=gpus)]  # fmt: skip
    if kind == "bridge":
        return [read_bridge_yaml(path, gpu=gpu, num_gpus=gpus)]
    if kind == "megatron-log":
        return [megatron_log.read_megatron_log(path, gpu=gpu, num_gpus=gpus)]
    if kind == "torchtitan-log":
        return [torchtitan_log.read_torchtitan_log(path, config=cfg, gpu=gpu, num_gpus=gpus)]
    if kind == "deepspeed-log":
        return [deepspeed.read_deepspeed_log(path, command=opts.get("command"), gpu=gpu,
                                             num_gpus=gpus, hf_config=opts.get("hf_config"),
                                             seq_len=opts.get("seq_len"))]  # fmt: skip
    return [read_command(read_text(path, what="launch command"), source=str(path), gpu=gpu,
                         num_gpus=gpus, ds_config=cfg, hf_config=opts.get("hf_config"),
                         seq_len=opts.get("seq_len"))]  # fmt: skip


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """A Hugging Face ``config.json``.

    Raises:
        InputError: not JSON or not a mapping.
    """
    try:
        data = json.loads(read_text(path, what="Hugging Face config"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc})", file=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("a config.json is a JSON object", file=str(path))
    return data


__all__ = ["detect", "read_command", "read_hf_config", "read_runs", "load_yaml"]

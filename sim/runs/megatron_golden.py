"""Megatron-LM's functional-test golden values as a :class:`~sim.runs.record.MeasuredRun`.

A test case of NVIDIA/Megatron-LM (``tests/functional_tests/test_cases/<family>/<case>/``,
@d98e8a64dd) holds ``model_config.yaml`` (``MODEL_ARGS``: the flags ``pretrain_*.py`` ran with)
and ``golden_values_<dev|lts>_<platform>.json``: per metric (``iteration-time`` in seconds,
``mem-allocated-bytes``, ``mem-max-allocated-bytes``, ``lm loss``...) a mapping
``{"start_step", "end_step", "step_interval", "values": {step: value}}``. Read here:

* the configuration: ``MODEL_ARGS`` of the ``model_config.yaml`` beside the JSON (or the one
  given), through :func:`sim.runs.megatron_args.read_megatron`; the family folder
  (``bert``, ``t5``, ``gpt``, ``moe``, ``hybrid``) names the training script;
* the iteration time: ``iteration-time`` through the warm-up rule (:mod:`sim.runs.warmup`);
* the peak: the largest ``mem-max-allocated-bytes`` (the logging rank's
  ``torch.cuda.max_memory_allocated``);
* the GPU from the platform (``dgx_a100``: A100-SXM-80GB, ``dgx_h100``: H100-SXM-80GB,
  ``dgx_gb200``: GB200); the GPU count is not in the case (it is in
  ``tests/test_utils/recipes``): 8 unless given, stated as an assumption.
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.errors import InputError
from sim.runs.megatron_args import read_megatron
from sim.runs.record import Measured, MeasuredRun
from sim.runs.warmup import WarmupError, steady_time
from sim.textio import load_yaml, read_text

PLATFORM_GPU = {"dgx_a100": "A100-SXM-80GB", "dgx_h100": "H100-SXM-80GB", "dgx_gb200": "GB200"}
"""Functional-test platforms (``tests/test_utils/recipes``) and their GPUs."""
DEFAULT_GPUS = 8
"""GPUs a test runs on when the caller does not say: the recipes' default ``nodes: 1, gpus: 8``
(an assumption per case)."""
FAMILY_ARCH = {"bert": "bert", "t5": "t5", "hybrid": "hybrid", "mamba": "hybrid"}
"""Test-case families whose training script is not ``pretrain_gpt.py``."""
TIME_KEY, MEM_KEY = "iteration-time", "mem-max-allocated-bytes"


def _series(data: dict[str, Any], key: str, file: str) -> dict[int, float]:
    entry = data.get(key)
    if entry is None:
        return {}
    values = entry.get("values") if isinstance(entry, dict) else None
    if isinstance(values, str):
        try:
            values = ast.literal_eval(values)
        except (ValueError, SyntaxError):
            values = None
    if not isinstance(values, dict):
        raise InputError("'values' must be a mapping of step to value", file=file, field=key)
    try:
        return {int(k): float(v) for k, v in values.items() if v not in ("nan", None)}
    except (TypeError, ValueError):
        raise InputError("a step or value is not a number", file=file, field=key) from None


def model_args(path: Path) -> dict[str, Any]:
    """``MODEL_ARGS`` of a functional test's ``model_config.yaml``.

    Raises:
        InputError: unreadable, or no ``MODEL_ARGS`` mapping.
    """
    data = load_yaml(read_text(path, what="model_config.yaml"), file=str(path))
    args = data.get("MODEL_ARGS") if isinstance(data, dict) else None
    if not isinstance(args, dict):
        raise InputError("no MODEL_ARGS mapping", file=str(path), field="MODEL_ARGS")
    return args


def read_golden(
    path: str | Path,
    *,
    config: str | Path | None = None,
    gpu: str = "",
    num_gpus: int | None = None,
) -> MeasuredRun:
    """The run a golden-values JSON records (module doc).

    Raises:
        InputError: not JSON, no ``iteration-time`` series, too few steps, or no
            ``model_config.yaml`` beside it and none given, naming the file and field.
    """
    p = Path(path)
    try:
        data = json.loads(read_text(p, what="golden-values JSON"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc})", file=str(p)) from None
    if not isinstance(data, dict) or TIME_KEY not in data:
        raise InputError(f"no '{TIME_KEY}' series", file=str(p), field=TIME_KEY)
    times = _series(data, TIME_KEY, str(p))
    peaks = _series(data, MEM_KEY, str(p))
    cfg = Path(config) if config else p.parent / "model_config.yaml"
    if not cfg.is_file():
        raise InputError(
            f"no {cfg.name} beside it: give the case's MODEL_ARGS (sim import --config FILE)",
            file=str(p),
        )
    platform = p.stem.split("_", 3)[-1] if p.stem.count("_") >= 3 else ""
    notes = []
    if num_gpus is None:
        notes.append(f"{DEFAULT_GPUS} GPUs assumed (the test recipes' default)")
    run = read_megatron(
        model_args(cfg), name=f"{p.parent.name}[{p.stem.removeprefix('golden_values_')}]",
        source=str(p), strict=True, arch=FAMILY_ARCH.get(p.parent.parent.name),
        gpu=gpu or PLATFORM_GPU.get(platform, ""), num_gpus=num_gpus or DEFAULT_GPUS,
    )  # fmt: skip
    try:
        t, rule = steady_time(times)
    except WarmupError as exc:
        raise InputError(str(exc), file=str(p), field=TIME_KEY) from None
    measured = Measured(
        iteration_time_s=t,
        iteration_times_s=tuple(times[s] for s in sorted(times)),
        time_rule=f"'{TIME_KEY}': {rule}",
        peak_allocated_bytes=max(peaks.values()) if peaks else None,
        memory_kind=f"largest '{MEM_KEY}' over logged steps (the logging rank)",
    )
    return replace(run, measured=measured, notes=run.notes + tuple(notes))

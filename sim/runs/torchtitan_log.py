"""torchtitan's training log as a :class:`~sim.runs.record.MeasuredRun`: the job config it
prints (or its TOML), the device mesh, the GPU of ``CUDA capacity: <GPU> with <x>GiB memory``
and the step lines of ``torchtitan/components/metrics.py::log`` (``step: N  loss: ..  memory:
<max_reserved>GiB(<%>)  tps: <tokens/s per device>  tflops: ..  mfu: ..%``), as
pytorch/torchtitan@238fa9953e writes them. The job config is read by
:func:`sim.runs.torchtitan.read_torchtitan_config`; the iteration time is ``local_batch_size x
seq_len / (tps x cp x tp x pp)`` (``tps`` divides the rank's tokens by the non-data-parallel
size), warm-up by :mod:`sim.runs.warmup`.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.errors import InputError
from sim.runs.record import Measured, MeasuredRun
from sim.runs.torchtitan import GiB, read_torchtitan_config
from sim.runs.warmup import WarmupError, steady_time
from sim.textio import read_text

STEP = re.compile(r"step:\s*(\d+)\s.*?memory:\s*([0-9.]+)GiB.*?tps:\s*([0-9,]+)"
                  r"(?:.*?tflops:\s*([0-9,.]+))?(?:.*?mfu:\s*([0-9.]+)%)?")  # fmt: skip
MESH = re.compile(r"Building device mesh with parallelism: (.*)")
CAPACITY = re.compile(r"(?:CUDA|GPU) capacity: (.*?) with ([0-9.]+)GiB memory")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
HBM2E_GIB = (85.0, 100.0)
"""CUDA totals (GiB) at which a log's plain ``H100`` is the 96 GB HBM2e part: it reports 94 GiB
(Ujeniya et al., arXiv:2604.11391, the Helma cluster's H100 HBM2e), the 80 GB HBM3 SXM5
79.6 GiB (81559 MiB, sim.hardware.capacity) and the H200 139.8 GiB; the bounds lie between."""


def capacity_gpu(name: str, gib: float) -> str:
    """The GPU a log's ``CUDA capacity: <name> with <gib>GiB memory`` line names: ``name``, with
    ``96GB HBM2e`` added for an H100 (not an NVL) of :data:`HBM2E_GIB` (the part torchtitan's
    published H100 runs used, ``grand-teton-h100-96gb``: sim.runs.express_hardware).

    >>> capacity_gpu("NVIDIA H100", 94.5), capacity_gpu("NVIDIA H100 80GB HBM3", 79.1)
    ('NVIDIA H100 96GB HBM2e', 'NVIDIA H100 80GB HBM3')
    """
    upper = name.upper()
    if "H100" in upper and "NVL" not in upper and HBM2E_GIB[0] < gib < HBM2E_GIB[1]:
        return f"{name} 96GB HBM2e"
    return name


MARKER = "tps:"


def _json_after(text: str, marker: str) -> dict[str, Any] | None:
    at = text.find(marker)
    if at < 0:
        return None
    start = text.find("{", at)
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def read_torchtitan_log(
    path: str | Path, *, config: str | Path | None = None, num_gpus: int | None = None,
    gpu: str = "",
) -> MeasuredRun:  # fmt: skip
    """The run a torchtitan log records (module doc); ``config``: its TOML when the log does
    not print the job config.

    Raises:
        InputError: no step line, too few steps, or no job config in the log and none given.
    """
    text = ANSI.sub("", read_text(path, what="torchtitan log"))
    cfg = _json_after(text, "Running with configs:")
    if cfg is None and config is not None:
        cfg = tomllib.loads(read_text(config, what="torchtitan TOML"))
    if cfg is None:
        raise InputError("the log does not print its job config (job.print_config): give the "
                         "TOML with --config", file=str(path))  # fmt: skip
    model_args = _json_after(text, "with {") if "Building " in text else None
    mesh_m = MESH.search(text)
    mesh = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", mesh_m.group(1))} if mesh_m else None
    cap = CAPACITY.search(text)
    run = read_torchtitan_config(
        cfg, source=str(path), name=Path(path).stem, num_gpus=num_gpus,
        gpu=gpu or (capacity_gpu(cap.group(1), float(cap.group(2))) if cap else ""), model_args=model_args, mesh=mesh,
        strict=False,
    )  # fmt: skip
    steps = {int(m.group(1)): m for m in STEP.finditer(text)}
    if not steps:
        raise InputError("no 'step: N ... tps: T' line: not a torchtitan training log",
                         file=str(path))  # fmt: skip
    non_dp = run.layout.tp * run.layout.pp * run.layout.cp
    local = (run.global_batch or 1) // max(1, run.layout.dp)
    tokens = local * (run.seq_len or 1)
    times = {s: tokens / (float(m.group(3).replace(",", "")) * non_dp) for s, m in steps.items()}
    try:
        t, rule = steady_time(times)
    except WarmupError as exc:
        raise InputError(str(exc), file=str(path), field="step") from None
    last = steps[max(steps)]
    measured = Measured(
        iteration_time_s=t, iteration_times_s=tuple(times[s] for s in sorted(times)),
        time_rule=f"local batch x seq / (tps x cp x tp x pp): {rule}",
        peak_reserved_bytes=max(float(m.group(2)) for m in steps.values()) * GiB,
        memory_kind="largest 'memory' (torch.cuda max_memory_reserved of the logging rank)",
        tokens_per_s_per_gpu=float(last.group(3).replace(",", "")),
        tflops_per_gpu=float(last.group(4).replace(",", "")) if last.group(4) else None,
        mfu=float(last.group(5)) / 100 if last.group(5) else None,
    )  # fmt: skip
    return replace(run, measured=measured)

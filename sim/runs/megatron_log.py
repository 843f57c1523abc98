"""A Megatron-LM training log as a :class:`~sim.runs.record.MeasuredRun`.

What Megatron-LM prints (NVIDIA/Megatron-LM@d98e8a64dd) and what is read of it:

* the arguments block of ``megatron/training/arguments.py::_print_args``, between
  ``---- arguments ----`` and ``---- end of arguments ----``, one ``  name ..... value`` per
  line: the configuration (:func:`sim.runs.megatron_args.read_megatron`, lenient: the block
  prints every argument, set or not);
* the iteration lines of ``megatron/training/training.py::training_log``:
  ``iteration N/ M | ... | elapsed time per iteration (ms): T | throughput per GPU
  (TFLOP/s/GPU): F | ...`` (mean over the log interval), taken through the warm-up rule
  (:mod:`sim.runs.warmup`);
* the memory lines of ``megatron/training/utils/common_utils.py::report_memory``:
  ``[Rank r] (after N iterations) memory (MB) | allocated: a | max allocated: b | reserved: c
  | max reserved: d`` (MB there is 2^20 bytes); the largest ``max allocated`` and ``max
  reserved`` over the ranks that print;
* the timers of ``megatron/core/timers.py`` (``(min, max) time across ranks (ms):`` then
  ``    name ....: (min, max)``, or ``max time across ranks (ms):`` and ``name ....: max``):
  each timer's maximum over ranks, per logged step, through the warm-up rule.

The GPU is not in the log: the caller names it (``sim import --gpu``), else it stays empty.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from sim.errors import InputError
from sim.runs.megatron_args import read_megatron
from sim.runs.record import Measured, MeasuredRun
from sim.runs.warmup import WarmupError, steady_time
from sim.textio import read_text

MiB = 2.0**20
ARGS_START = re.compile(r"-{3,} arguments -{3,}")
ARGS_END = re.compile(r"-{3,} end of arguments -{3,}")
ARG_LINE = re.compile(r"^\s*(?:\[.*?\]\s*)?([A-Za-z0-9_]+) \.+ (.*?)\s*$")
ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|")
ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.eE+-]+)")
TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([0-9.eE+-]+)")
MEMORY = re.compile(
    r"memory \(MB\) \| allocated: ([0-9.]+) \| max allocated: ([0-9.]+) \| reserved: "
    r"([0-9.]+) \| max reserved: ([0-9.]+)"
)
TIMER_HEAD = re.compile(r"time across ranks \(ms\):")
TIMER = re.compile(r"^\s*(?:\[.*?\]\s*)?([A-Za-z0-9_-]+) \.+: \(?([0-9.]+)(?:, ([0-9.]+)\))?")
MARKER = "elapsed time per iteration (ms)"
"""A line no other framework prints: how :mod:`sim.runs.readers` recognises the format."""


def _arguments(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    inside = False
    for line in lines:
        if ARGS_START.search(line) and not ARGS_END.search(line):
            inside = True
        elif ARGS_END.search(line):
            break
        elif inside and (m := ARG_LINE.match(line)):
            out[m.group(1)] = m.group(2)
    return out


def _series(lines: list[str]) -> tuple[dict[int, float], dict[int, float], dict[str, dict]]:
    """``{step: seconds}``, ``{step: TFLOP/s}`` and ``{timer: {step: seconds}}``."""
    times: dict[int, float] = {}
    tflops: dict[int, float] = {}
    timers: dict[str, dict[int, float]] = {}
    step, in_timers = 0, False
    for line in lines:
        if (m := ITERATION.search(line)) and (e := ELAPSED.search(line)):
            step = int(m.group(1))
            times[step] = float(e.group(1)) / 1e3
            if t := TFLOPS.search(line):
                tflops[step] = float(t.group(1))
            in_timers = False
        elif TIMER_HEAD.search(line):
            in_timers = True
        elif in_timers and (t := TIMER.match(line)):
            worst = float(t.group(3) or t.group(2))
            timers.setdefault(t.group(1), {})[step] = worst / 1e3
        else:
            in_timers = False
    return times, tflops, timers


def _memory(lines: list[str]) -> tuple[float | None, float | None]:
    alloc = reserved = None
    for line in lines:
        if m := MEMORY.search(line):
            a, r = float(m.group(2)) * MiB, float(m.group(4)) * MiB
            alloc, reserved = max(alloc or 0.0, a), max(reserved or 0.0, r)
    return alloc, reserved


def read_megatron_log(
    path: str | Path, *, gpu: str = "", num_gpus: int | None = None, arch: str | None = None
) -> MeasuredRun:
    """The run a Megatron-LM log records (module doc).

    Raises:
        InputError: no iteration line, too few steps for the warm-up rule, or no arguments
            block and no ``num_gpus`` (the layout is unknown), naming the file.
    """
    text = read_text(path, what="Megatron-LM log")
    lines = text.splitlines()
    args = _arguments(lines)
    times, tflops, timers = _series(lines)
    if not times:
        raise InputError(f"no line with '{MARKER}': not a Megatron-LM training log", file=str(path))
    if not args:
        raise InputError(
            "no arguments block ('---- arguments ----' ... '---- end of arguments ----'): the "
            "configuration is unknown; give the launch command with `sim import` instead",
            file=str(path),
        )
    try:
        t, rule = steady_time(times)
        cats = tuple((k, steady_time(v)[0]) for k, v in timers.items() if len(v) > 1)
    except WarmupError as exc:
        raise InputError(str(exc), file=str(path), field="iteration") from None
    alloc, reserved = _memory(lines)
    world = num_gpus or _int(args.get("world_size"))
    run = read_megatron(
        args, name=Path(path).stem, source=str(path), strict=False, arch=arch, gpu=gpu,
        num_gpus=world,
    )  # fmt: skip
    measured = Measured(
        iteration_time_s=t,
        iteration_times_s=tuple(times[s] for s in sorted(times)),
        time_rule=f"'elapsed time per iteration (ms)': {rule}",
        peak_allocated_bytes=alloc,
        peak_reserved_bytes=reserved,
        memory_kind="largest 'max allocated' / 'max reserved' of the report_memory lines "
        "(data-parallel rank 0 of each pipeline and tensor rank that prints)",
        tflops_per_gpu=steady_time(tflops)[0] if len(tflops) > 1 else None,
        categories=cats,
    )
    return replace(run, measured=measured)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None

"""Measure a GPU for issue 8: ``python -m backends.torch.calibrate.ground_truth STEP --dest DIR``.

``scripts/gpu_ground_truth.sh`` runs the steps in order, each under its own ``timeout``, on a
machine with one GPU; each step writes its rows as it measures them (a step that runs out of
time keeps what it measured) and stops starting new measurements after ``--budget-s``:

* ``calibrate``: :func:`backends.torch.calibrate.hardware.calibrate` on one GPU (``nproc=1``), as
  ``sim calibrate --device cuda --nproc 1`` does: ``hardware.yaml``, and ``calibration.csv``
  (GEMM by shape bf16/fp16, HBM copy, pinned H2D/D2H/both, kernel overhead, CPU Adam, runtime
  memory: context, cuBLAS, allocator).
* ``profile``: per-layer profiles (:func:`backends.torch.profile.layers.profile_model`, as ``sim
  profile``) of one GPT block, hidden 1024/2048/4096 x seq 1024/2048 x flash/math attention x
  b = 1, 2, 4, 8, 16, bf16: ``layers.csv``.
* ``grid``: the grid model (:data:`GRID_MODEL`) profiled at the grid's micro-batch sizes
  (``grid-trace.csv/.yaml``, for the prediction), then single-rank replays
  (:mod:`backends.torch.replay.single_rank`) of rank 0 of p = 2, 4, 8 for GPipe, 1F1B, 2BW and
  PipeDream under none / recompute / cpu_swap: ``single_rank.csv`` (iteration time,
  ``max_memory_allocated``, ``max_memory_reserved``).
* ``provenance``: ``provenance.json`` (GPU, driver, torch, CUDA, date, commands, the grid).

Nothing here predicts: ``sim.ground_truth`` compares the files with the simulator on any
machine (``tests/test_gpu_ground_truth.py``). ``--device cpu --tiny`` runs every step on a CPU
with small sizes (the CI test of this driver).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from backends.torch.calibrate.hardware import calibrate
from backends.torch.profile.concurrent import profile_concurrent
from backends.torch.profile.layers import profile_model
from backends.torch.replay.job import ReplayJob
from backends.torch.replay.single_rank import run_single_rank

GRID_MODEL: dict[str, Any] = dict(name="gt-gpt-h1024", kind="gpt", layers=22, hidden=1024, heads=8,
                  seq_len=1024, vocab=8192)  # fmt: skip
"""The single-rank grid's model: 24 layers in the chain, so p = 2, 4, 8 split it evenly."""
TINY_MODEL: dict[str, Any] = dict(
    name="gt-tiny", kind="gpt", layers=6, hidden=32, heads=2, seq_len=16, vocab=64
)
GRID: dict[str, Any] = dict(
    schedules=["gpipe", "1f1b", "pipedream_2bw", "pipedream"],
    stages=[2, 4, 8],
    policies=["none", "recompute", "cpu_swap"],
    microbatch_sizes=[2, 8],
    rank=0,
    iterations=2,
    warmup_iterations=1,
)
"""The grid: m = 2p micro-batches per iteration; the rank's chain is cut uniformly."""
PROFILE: dict[str, Any] = dict(hidden=[1024, 2048, 4096], seq_len=[1024, 2048], attention=["flash", "math"],
               microbatch_sizes=[1, 2, 4, 8, 16], head_dim=128, vocab=8192)  # fmt: skip
TINY_PROFILE: dict[str, Any] = dict(hidden=[32, 64], seq_len=[16], attention=["flash", "math"],
                    microbatch_sizes=[1, 2], head_dim=16, vocab=64)  # fmt: skip


def gpu_slug(device: str) -> str:
    """A folder name for the device: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``.

    Example:
        >>> gpu_slug("cpu")
        'cpu'
    """
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


class Rows:
    """A CSV written row by row (flushed each time), so a killed step keeps its rows."""

    def __init__(self, path: Path):
        self.path, self.fields = path, None  # type: ignore[var-annotated]
        self._file = path.open("w", newline="")
        self._writer: Any = None
        self.count = 0

    def add(self, row: dict[str, Any]) -> None:
        """Append ``row`` (the first row fixes the columns; later keys must be among them)."""
        if self._writer is None:
            self._writer = csv.DictWriter(self._file, fieldnames=list(row), extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerow(row)
        self._file.flush()
        self.count += 1


def step_calibrate(dest: Path, device: str, tiny: bool) -> None:
    """``hardware.yaml`` and ``calibration.csv`` (module docstring)."""

    cal = calibrate(nproc=1, device=device, path=dest / "hardware.yaml", reps=3 if tiny else 5)
    rows = Rows(dest / "calibration.csv")
    rank = cal.ranks[0]
    for key in ("gemm_by_shape", "gemm_by_shape_fp16"):
        for g in rank.get(key, []):
            dtype = "fp16" if key.endswith("fp16") else ("bf16" if device != "cpu" else "fp32")
            shape = f"{g['m']}x{g['n']}x{g['k']}"
            rows.add(dict(quantity=f"gemm_{dtype}", detail=shape, value=g["flops_per_s"], unit="FLOP/s"))  # fmt: skip
    rows.add(dict(quantity="matmul", detail="square", value=rank["matmul_flops"], unit="FLOP/s"))
    rows.add(dict(quantity="hbm_copy", detail="2*bytes/t", value=rank["copy_bandwidth_Bps"], unit="B/s"))  # fmt: skip
    rows.add(dict(quantity="kernel_overhead", detail="1-element add", value=rank["kernel_overhead_s"], unit="s"))  # fmt: skip
    sizes = [2**12, 2**20, 2**24, 2**26]
    for way, times in rank.get("host_copies", {}).items():
        for size, t in zip(sizes, times, strict=False):
            rows.add(dict(quantity=f"pinned_{way}", detail=f"{size} B", value=size / t, unit="B/s"))
    adam = cal.host["cpu_adam"]
    rows.add(dict(quantity="cpu_adam", detail=adam["implementation"], value=adam["params_per_s"], unit="params/s"))  # fmt: skip
    runtime = cal.host.get("runtime_memory", {})
    for key in ("context_bytes", "first_segment_bytes", "cublas_workspace_bytes"):
        if key in runtime:
            rows.add(dict(quantity=key, detail="fresh process", value=runtime[key], unit="B"))
    for key, value in runtime.get("allocator", {}).items():
        rows.add(dict(quantity=f"allocator_{key}", detail="fixed pattern", value=value, unit=""))


def _deadline(budget_s: float) -> float:
    return time.monotonic() + budget_s


def step_profile(dest: Path, device: str, tiny: bool, budget_s: float) -> None:
    """``layers.csv``: one GPT block (and its embedding and head) per shape (module doc)."""

    grid, end = (TINY_PROFILE if tiny else PROFILE), _deadline(budget_s)
    dtype = "fp32" if device == "cpu" else "bf16"
    rows = Rows(dest / "layers.csv")
    for hidden in grid["hidden"]:
        for seq in grid["seq_len"]:
            for attention in grid["attention"]:
                for b in grid["microbatch_sizes"]:
                    if time.monotonic() > end:
                        print(f"profile: budget of {budget_s:g} s spent; stopping", flush=True)
                        return
                    spec = dict(name=f"gpt-h{hidden}-s{seq}", kind="gpt", layers=1, hidden=hidden,
                                heads=hidden // grid["head_dim"], seq_len=seq, vocab=grid["vocab"])  # fmt: skip
                    base = dict(hidden=hidden, heads=spec["heads"], seq_len=seq, vocab=grid["vocab"],
                                attention=attention, microbatch_size=b, dtype=dtype)  # fmt: skip
                    try:
                        trace = profile_model(spec, microbatch_size=b, device=device, dtype=dtype,
                                              attention=attention, reps=5, warmup=2)  # fmt: skip
                    except (torch.OutOfMemoryError, RuntimeError) as exc:
                        rows.add({**base, "layer": "", "status": f"error: {str(exc)[:120]}"})
                        _free(device)
                        continue
                    for layer in trace.layers:
                        rows.add({**base, "layer": layer.name, "status": "ok", "fwd_s": layer.fwd_s,
                                  "bwd_s": layer.bwd_s, "act_bytes": layer.act_bytes,
                                  "param_bytes": layer.param_bytes, "out_bytes": layer.out_bytes,
                                  "flops": layer.flops})  # fmt: skip
                    print(f"profile h={hidden} s={seq} {attention} b={b}: ok", flush=True)
                    _free(device)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def step_grid(dest: Path, device: str, tiny: bool, budget_s: float) -> None:
    """``grid-trace.csv/.yaml`` and ``single_rank.csv`` (module docstring)."""

    end = _deadline(budget_s)
    model, dtype = (TINY_MODEL if tiny else GRID_MODEL), ("fp32" if device == "cpu" else "bf16")
    attention = None if device == "cpu" else "flash"
    profile_concurrent(model, copies=1, microbatch_sizes=GRID["microbatch_sizes"], device=device,
                       dtype=dtype, reps=5, attention=attention, path=dest / "grid-trace")  # fmt: skip
    rows = Rows(dest / "single_rank.csv")
    for p in GRID["stages"]:
        for policy in GRID["policies"]:
            for b in GRID["microbatch_sizes"]:
                for schedule in GRID["schedules"]:
                    if time.monotonic() > end and rows.count:  # at least one row, always
                        print(f"grid: budget of {budget_s:g} s spent; stopping", flush=True)
                        return
                    job = ReplayJob(model=model, schedule=schedule, stages=p, microbatches=2 * p,
                                    microbatch_size=b, memory_policy=policy, device=device,
                                    dtype=dtype, attention=attention, single_rank=GRID["rank"],
                                    iterations=GRID["iterations"],
                                    warmup_iterations=GRID["warmup_iterations"])  # fmt: skip
                    rows.add(_grid_row(job, run_single_rank, device))
                    _free(device)


def _grid_row(job: Any, run: Any, device: str) -> dict[str, Any]:
    row: dict[str, Any] = dict(schedule=job.schedule, stages=job.stages, rank=job.single_rank,
                               memory_policy=job.memory_policy, microbatch_size=job.microbatch_size,
                               microbatches=job.microbatches, iterations=job.iterations,
                               warmup_iterations=job.warmup_iterations)  # fmt: skip
    try:
        res = run(job)
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        return {**row, "status": f"error: {str(exc)[:160]}"}
    mem = res.memory[0]
    row |= dict(status="ok" if res.all_actions_done else "wrong actions",
                measured_iteration_s=res.iteration_time_s,
                measured_iterations_s=" ".join(f"{t:.6f}" for t in res.iteration_times_s),
                # CPU: the counted tensor bytes (what predicted_peak_bytes predicts); the
                # process's resident peak (allocator and library scratch included) beside it
                measured_peak_bytes=mem.get("counted_peak_bytes", res.peak_memory_bytes[0]),
                resident_peak_bytes=mem.get("resident_peak_bytes", ""),
                measured_reserved_bytes=mem.get("cuda_max_reserved", ""),
                act_peak_bytes=mem.get("act_peak_bytes", ""), versions=mem["versions"],
                device_name=res.device_name, notes="; ".join(res.notes))  # fmt: skip
    print(f"grid {job.schedule} p={job.stages} {job.memory_policy} b={job.microbatch_size}: "
          f"{res.iteration_time_s * 1e3:.2f} ms, {res.peak_memory_bytes[0] / 2**20:.0f} MiB", flush=True)  # fmt: skip
    return row


def _driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)  # fmt: skip
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def step_provenance(dest: Path, device: str, tiny: bool) -> None:
    """``provenance.json``: where and how the files in ``dest`` were measured."""
    cuda = device.startswith("cuda")
    info = dict(
        kind="gpu_ground_truth",
        device=device,
        gpu=torch.cuda.get_device_name(0) if cuda else "cpu",
        driver=_driver_version() if cuda else "",
        torch=torch.__version__,
        cuda=torch.version.cuda or "",
        host=platform.node(),
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        command="bash scripts/gpu_ground_truth.sh" + ("" if cuda else " (--device cpu --tiny)"),
        grid_model=TINY_MODEL if tiny else GRID_MODEL,
        grid=GRID,
        profile=TINY_PROFILE if tiny else PROFILE,
        files=sorted(p.name for p in dest.iterdir()),
    )
    (dest / "provenance.json").write_text(json.dumps(info, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``STEP --dest DIR [--device cuda] [--budget-s S] [--tiny]``; ``dest``
    prints the default folder (``$OUT/<gpu>`` or ``measurements/<gpu>``)."""
    ap = argparse.ArgumentParser(prog="python -m backends.torch.calibrate.ground_truth")
    ap.add_argument("step", choices=["dest", "calibrate", "profile", "grid", "provenance"])
    ap.add_argument("--dest", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args(argv)
    if args.step == "dest":
        print(gpu_slug(args.device))
        return 0
    if args.dest is None:
        ap.error("--dest is required")
    args.dest.mkdir(parents=True, exist_ok=True)
    if args.step == "calibrate":
        step_calibrate(args.dest, args.device, args.tiny)
    elif args.step == "profile":
        step_profile(args.dest, args.device, args.tiny, args.budget_s)
    elif args.step == "grid":
        step_grid(args.dest, args.device, args.tiny, args.budget_s)
    else:
        step_provenance(args.dest, args.device, args.tiny)
    return 0


if __name__ == "__main__":
    sys.exit(main())

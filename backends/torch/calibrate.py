"""Measure this machine as the replay uses it and write a hardware YAML (``sim/hardware/spec.py``).

:func:`calibrate` starts ``nproc`` ranks exactly as a replay does (:func:`backends.torch.launch.run_ranks`:
one process per rank, gloo on CPU, NCCL on GPUs) and measures on every rank at once:

* compute: the median time of an ``n x n`` matmul, ``peak_flops = 2 n^3 / t`` (fp32 on CPU,
  bf16 on GPUs). It is an *effective* peak, lower than a datasheet's.
* memory bandwidth: a large device-to-device ``copy_``, ``2 * bytes / t`` (read + write);
  written as ``hbm_bandwidth``.
* point-to-point: ping-pong between two ranks for several message sizes; the one-way time is
  half the round trip; ``t = latency + bytes / bandwidth`` gives the link's ``bandwidth`` (the
  least-squares slope) and ``latency`` (the smallest message, :func:`fit_latency_bandwidth`);
  neighbouring ranks by default, or every pair.
* host <-> device (GPUs only): pinned host buffers copied with ``non_blocking`` copies, fitted
  the same way, written as two directed ``pcie`` links ``cpu0 -> gpuK`` and ``gpuK -> cpu0``;
  also both directions at once (two streams), in the description and ``ranks``.
* runtime memory (:mod:`backends.torch.runtime_memory`, a fresh process): the CUDA context and
  cuBLAS workspace (written as ``cuda_context`` / ``cublas_workspace`` on GPUs) and the caching
  allocator's overhead on a fixed pattern; on CPU the process's resident memory.

* GEMM efficiency by shape: achieved FLOP/s of the GEMMs in :data:`GEMM_SHAPES` (the
  transformer shapes the compute model times, :mod:`sim.compute.kernels`); the best is written
  as ``peak_flops`` with ``matmul_efficiency: 1`` (an effective peak), the table goes into
  ``Calibration.ranks`` and the description (GPUs: bf16, and fp16 in ``ranks``). GPUs also get ``fp32_flops`` (fp32 matmul, TF32
  off), ``sm_count`` (``multi_processor_count``), ``hbm_efficiency: 1`` (the copy bandwidth is
  already effective) and ``kernel_overhead`` (median time per launch of a 1-element add in a
  loop of back-to-back launches).
* CPU Adam (:func:`cpu_adam_rate`): parameters per second of one ``torch.optim.Adam`` step on
  the host (``fused=True`` where torch supports it on CPU, else ``foreach``), written as the
  host's ``adam_params_per_s``.
* collectives (``nproc >= 2``; :mod:`backends.torch.calibrate_comm`): all-reduce, all-gather
  and reduce-scatter over all ranks from 1 KiB to 16 MiB through torch's functional collectives
  (gloo on CPU, NCCL on GPUs), written as the hardware's ``collectives:`` tables, which a
  communicator of ``nproc`` ranks then uses; and the tensor-parallel dispatch overhead per
  module (a tiny Colwise/Rowwise-parallel linear against a plain one), written as
  ``gpu.tp_module_overhead``.
* our pipeline runtime's per-action overhead and the replay's optimizer step per tensor and
  per byte (:mod:`backends.torch.calibrate_runtime`), written on CPU ranks as
  ``gpu.action_overhead`` and ``gpu.optimizer_step``.
* host time per op (:mod:`backends.torch.host_overhead`, in this process, one thread): a tiny
  transformer block's forward with and without autograd, its backward, and the checkpoint
  wrapper, per op as traces count ops. On GPUs it is written as ``host_overhead`` (the host
  issues, the device runs: :mod:`sim.compute.host`); on CPU it goes into the description and
  ``Calibration.host`` only, since a CPU rank's profiled times already contain its ops' host
  time (host and device are one thread).

On CPU each rank is a "device" named like a GPU (``gpu0`` ...) of model ``cpu-rank`` with a
``1/nproc`` share of host RAM; the host link of a CPU rank is its memory copy bandwidth
(``loopback``). Ranks share the cores, so each uses ``cores // nproc`` threads, as in a replay.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml

from backends.torch.calibrate_comm import (
    DEFAULT_COLLECTIVE_SIZES,
    collective_sweep,
    dtensor_overhead,
    tables,
)
from backends.torch.calibrate_runtime import measure_rank, runtime_fields
from backends.torch.host_overhead import describe_host_overhead
from backends.torch.launch import run_ranks
from backends.torch.profile import cpu_model_name, device_model_name, time_call
from backends.torch.runtime_memory import measure_fresh
from backends.torch.worker import RankContext
from sim.atomic import atomic_write_text

GEMM_SHAPES = (
    (256, 256, 256),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (2048, 4096, 4096),
    (2048, 11008, 4096),
    (2048, 4096, 11008),
    (512, 4096, 4096),
    (128, 4096, 4096),
)
"""``(m, n, k)`` of the GEMM-by-shape table: square sizes and Llama-2-7B projections at
2048 / 512 / 128 tokens."""

DEFAULT_SIZES = (2**10, 2**14, 2**18, 2**20, 2**22, 2**24)
"""Message sizes in bytes for the ping-pong fit (1 KiB .. 16 MiB)."""


def fit_latency_bandwidth(sizes: Sequence[float], times_s: Sequence[float]) -> tuple[float, float]:
    """``t = latency + size / bandwidth`` from one-way times: the bandwidth from the
    least-squares slope over all sizes, the latency from the smallest message (its time less
    its bytes at that bandwidth). An unweighted fit's intercept is set by the largest messages,
    whose times are thousands of latencies long, and can land anywhere below the smallest
    message's time, zero included; the smallest message measures the latency directly.

    Returns:
        ``(latency_s, bandwidth_Bps)``; latency is clamped at 0, and a non-positive slope
        falls back to the bandwidth of the largest message.
    """
    n = len(sizes)
    mx, my = sum(sizes) / n, sum(times_s) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    slope = (
        sum((x - mx) * (y - my) for x, y in zip(sizes, times_s, strict=True)) / sxx if sxx else 0.0
    )
    if slope <= 0:
        i = max(range(n), key=lambda k: sizes[k])
        return max(0.0, min(times_s)), sizes[i] / times_s[i]
    j = min(range(n), key=lambda k: sizes[k])
    return max(0.0, times_s[j] - sizes[j] * slope), 1.0 / slope


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _pingpong(
    rank: int, a: int, b: int, sizes: list[int], reps: int, dev: torch.device
) -> list[float]:
    """One-way seconds per size between ranks ``a`` and ``b`` (median of ``reps``)."""
    out = []
    for size in sizes:
        buf = torch.zeros(max(1, size // 4), dtype=torch.float32, device=dev)
        times = []
        for i in range(reps + 2):
            _sync(dev)
            t0 = time.perf_counter()
            if rank == a:
                dist.send(buf, b)
                dist.recv(buf, b)
            else:
                dist.recv(buf, a)
                dist.send(buf, a)
            _sync(dev)
            if i >= 2:
                times.append((time.perf_counter() - t0) / 2)
        out.append(statistics.median(times))
    return out


def _copy_time(nbytes: int, dev: torch.device, reps: int) -> float:
    """Median seconds of a device-to-device ``copy_`` of ``nbytes``."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    return time_call(lambda: dst.copy_(src), dev, reps=reps)


def _host_copies(dev: torch.device, sizes: list[int], reps: int) -> dict[str, list[float]]:
    """Seconds per pinned copy of each size: ``h2d``, ``d2h``, and ``both`` (one of each at
    once on two streams: the time until both are done)."""
    res: dict[str, list[float]] = {"h2d": [], "d2h": [], "both": []}
    streams = (torch.cuda.Stream(dev), torch.cuda.Stream(dev))
    for size in sizes:
        host = torch.empty(size // 4, dtype=torch.float32).pin_memory()
        host_out = torch.empty_like(host).pin_memory()
        gpu = torch.empty(size // 4, dtype=torch.float32, device=dev)
        gpu_out = torch.empty_like(gpu)
        res["h2d"].append(time_call(partial(gpu.copy_, host, non_blocking=True), dev, reps=reps))
        res["d2h"].append(time_call(partial(host.copy_, gpu, non_blocking=True), dev, reps=reps))

        def both(host=host, host_out=host_out, gpu=gpu, gpu_out=gpu_out) -> None:
            main = torch.cuda.current_stream(dev)
            for s, (dst, src) in zip(streams, ((gpu, host), (host_out, gpu_out)), strict=True):
                s.wait_stream(main)
                with torch.cuda.stream(s):
                    dst.copy_(src, non_blocking=True)
                main.wait_stream(s)

        res["both"].append(time_call(both, dev, reps=reps))
    return res


def gemm_by_shape(
    dev: torch.device, dtype: torch.dtype, shapes, reps: int = 5
) -> list[dict[str, float]]:
    """Achieved FLOP/s of ``[m, k] @ [k, n]`` for each ``(m, n, k)`` in ``shapes``.

    Returns:
        One dict per shape: ``m, n, k, seconds`` (median of ``reps``) and ``flops_per_s``.
    """
    out = []
    for m, n, k in shapes:
        a = torch.randn(m, k, dtype=dtype, device=dev)
        b = torch.randn(k, n, dtype=dtype, device=dev)
        t = time_call(partial(torch.matmul, a, b), dev, reps=reps)
        out.append({"m": m, "n": n, "k": k, "seconds": t, "flops_per_s": 2.0 * m * n * k / t})
    return out


def kernel_overhead_s(dev: torch.device, launches: int = 200) -> float:
    """Seconds per launch of a 1-element add, issued back to back (launch + dispatch cost)."""
    x = torch.zeros(1, device=dev)

    def loop() -> None:
        for _ in range(launches):
            x.add_(1.0)

    return time_call(loop, dev, reps=5) / launches


def cpu_adam_rate(params: int = 2**24, reps: int = 5, threads: int | None = None) -> dict[str, Any]:
    """Parameters per second of one CPU ``torch.optim.Adam`` step over ``params`` fp32 values.

    Uses ``fused=True`` when this torch supports fused Adam on CPU, else ``foreach=True``.

    Returns:
        ``{"params_per_s", "params", "seconds", "implementation", "threads"}`` (median step).
    """
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        p = torch.nn.Parameter(torch.randn(params))
        p.grad = torch.randn(params)
        try:
            opt = torch.optim.Adam([p], lr=1e-3, fused=True)
            opt.step()
            impl = "fused"
        except (RuntimeError, TypeError, ValueError):
            opt = torch.optim.Adam([p], lr=1e-3, foreach=True)
            impl = "foreach"
        t = time_call(opt.step, torch.device("cpu"), reps=reps)
        return {
            "params_per_s": params / t,
            "params": params,
            "seconds": t,
            "implementation": impl,
            "threads": torch.get_num_threads(),
        }
    finally:
        torch.set_num_threads(old)


def run_rank(payload: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function: measure compute, memory copy, p2p pairs (and host copies on GPUs)."""
    dev, n = ctx.device, payload["matmul_n"]
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    x = torch.randn(n, n, dtype=dtype, device=dev)
    dist.barrier()
    mm_s = time_call(lambda: x @ x, dev, reps=payload["reps"])
    copy_s = _copy_time(payload["copy_bytes"], dev, payload["reps"])
    pairs = []
    for a, b in payload["pairs"]:
        dist.barrier()
        if ctx.rank in (a, b):
            t = _pingpong(ctx.rank, a, b, payload["sizes"], payload["reps"], dev)
            if ctx.rank == a:
                pairs.append({"a": a, "b": b, "sizes": payload["sizes"], "one_way_s": t})
    dist.barrier()
    stats: dict[str, Any] = {
        "rank": ctx.rank,
        "matmul_flops": 2 * n**3 / mm_s,
        "copy_bandwidth_Bps": 2 * payload["copy_bytes"] / copy_s,
        "pairs": pairs,
        "device_name": device_model_name(dev),
    }
    if ctx.world_size >= 2 and payload.get("collective_sizes"):
        sizes, reps = payload["collective_sizes"], payload["reps"]
        stats["collectives"] = collective_sweep(ctx.world_size, dev, sizes, max(10, 2 * reps))
        stats["dtensor"] = dtensor_overhead(ctx.world_size, dev, max(20, 8 * reps))
    stats["runtime"] = measure_rank(ctx)
    stats["gemm_by_shape"] = gemm_by_shape(dev, dtype, payload["gemm_shapes"], payload["reps"])
    stats["kernel_overhead_s"] = kernel_overhead_s(dev)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        stats["memory_bytes"] = props.total_memory
        stats["sm_count"] = props.multi_processor_count
        stats["host_copies"] = _host_copies(dev, payload["host_sizes"], payload["reps"])
        shapes = payload["gemm_shapes"]
        stats["gemm_by_shape_fp16"] = gemm_by_shape(dev, torch.float16, shapes, payload["reps"])
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = gemm_by_shape(dev, torch.float32, [(n, n, n)], payload["reps"])
        stats["fp32_flops"] = fp32[0]["flops_per_s"]
    return stats


@dataclass
class Calibration:
    """What :func:`calibrate` measured, and the hardware description built from it.

    Attributes:
        hardware: the hardware YAML as a dict (``sim.hardware.spec.HardwareSpec`` fields).
        ranks: raw per-rank measurements (FLOP/s, GEMM by shape, copy bandwidth, ping-pong
            times, kernel overhead).
        host: host measurements (``cpu_adam``: :func:`cpu_adam_rate`'s result;
            ``runtime_memory``: :func:`backends.torch.runtime_memory.measure` in a fresh
            process).
    """

    hardware: dict[str, Any]
    ranks: list[dict[str, Any]] = field(default_factory=list)
    host: dict[str, Any] = field(default_factory=dict)

    def write_yaml(self, path: str | Path) -> Path:
        """Write :attr:`hardware` as YAML to ``path`` atomically (parent folders created)."""

        return atomic_write_text(path, yaml.safe_dump(self.hardware, sort_keys=False))


def _host_ram_bytes() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _links(ranks: list[dict[str, Any]], device: str, host_sizes: list[int]) -> list[dict[str, Any]]:
    links: list[dict[str, Any]] = []
    kind_p2p = "loopback" if device == "cpu" else "link"
    for r in ranks:
        for p in r["pairs"]:
            lat, bw = fit_latency_bandwidth(p["sizes"], p["one_way_s"])
            links.append(
                {
                    "a": f"gpu{p['a']}",
                    "b": f"gpu{p['b']}",
                    "bandwidth": f"{bw / 1e9:.4f} GB/s",
                    "latency": f"{lat * 1e6:.3f} us",
                    "kind": kind_p2p,
                }
            )
    for r in ranks:
        gpu = f"gpu{r['rank']}"
        if device == "cpu":
            links.append(
                {
                    "a": gpu,
                    "b": "cpu0",
                    "bandwidth": f"{r['copy_bandwidth_Bps'] / 2e9:.4f} GB/s",
                    "latency": "1 us",
                    "kind": "loopback",
                }
            )
            continue
        for key, (a, b) in (("h2d", ("cpu0", gpu)), ("d2h", (gpu, "cpu0"))):
            lat, bw = fit_latency_bandwidth(host_sizes, r["host_copies"][key])
            links.append(
                {
                    "a": a,
                    "b": b,
                    "bandwidth": f"{bw / 1e9:.4f} GB/s",
                    "latency": f"{lat * 1e6:.3f} us",
                    "kind": "pcie",
                    "directed": True,
                }
            )
    return links


def _gemm_summary(rank: dict[str, Any]) -> str:
    return ", ".join(
        f"{g['m']}x{g['n']}x{g['k']}: {g['flops_per_s'] / 1e12:.3g}" for g in rank["gemm_by_shape"]
    )


def _compute_fields(
    ranks: list[dict[str, Any]], kind: str, threads: int, flops: float
) -> dict[str, Any]:
    """The compute-model keys of the ``gpu`` mapping (module doc); effective numbers, so the
    efficiencies are 1."""
    out: dict[str, Any] = {
        "matmul_efficiency": 1.0,
        "hbm_efficiency": 1.0,
        "kernel_overhead": f"{max(r['kernel_overhead_s'] for r in ranks) * 1e6:.3f} us",
        "sm_count": ranks[0].get("sm_count", threads),
    }
    fp32 = min(r["fp32_flops"] for r in ranks) if kind == "cuda" else flops  # CPU: fp32 matmul
    out["fp32_flops"] = f"{fp32 / 1e12:.6f} TFLOPS"
    return out


def _runtime_memory(kind: str, hardware: dict[str, Any]) -> dict[str, Any]:
    """Measure the runtime reserve in a fresh process (:mod:`backends.torch.runtime_memory`);
    on CUDA write ``cuda_context`` and ``cublas_workspace`` into ``hardware['gpu']``."""

    try:
        runtime = measure_fresh(kind)
    except RuntimeError as exc:  # a reserve we could not measure keeps the sourced default
        return {"error": str(exc)}
    alloc = runtime["allocator"]
    hardware["description"] += (
        f" Runtime memory (fresh process): context {runtime['context_bytes'] / 2**20:.1f} MiB, "
        f"cuBLAS {runtime['cublas_workspace_bytes'] / 2**20:.1f} MiB, allocator "
        f"rounding x{alloc['rounding_ratio']:.4f}, reserved/allocated x{alloc['reserved_ratio']:.3f}."
    )
    if kind == "cuda":
        hardware["gpu"]["cuda_context"] = f"{runtime['context_bytes'] / 2**20:.1f} MiB"
        hardware["gpu"]["cublas_workspace"] = f"{runtime['cublas_workspace_bytes'] / 2**20:.2f} MiB"
    return runtime


def _comm_fields(
    hardware: dict[str, Any], ranks: list[dict[str, Any]], sizes: list[int], date: str, kind: str
) -> None:
    """Write the measured collective tables and the tensor-parallel module overhead (the
    slowest rank's) into ``hardware`` (:mod:`backends.torch.calibrate_comm`)."""
    lib = "NCCL" if kind == "cuda" else "gloo"
    source = (
        f"backends.torch.calibrate_comm.collective_sweep on {date}: {len(ranks)} ranks, {lib} "
        f"through torch functional collectives, torch {torch.__version__}; slowest rank's median"
    )
    hardware["collectives"] = tables(ranks, sizes, source)
    fwd = max(r["dtensor"]["forward_s"] for r in ranks)
    bwd = max(r["dtensor"]["backward_s"] for r in ranks)
    hardware["gpu"]["tp_module_overhead"] = {
        "forward": f"{fwd * 1e6:.2f} us",
        "backward": f"{bwd * 1e6:.2f} us",
    }
    hardware["description"] += (
        f" Collectives ({lib}, {len(ranks)} ranks, 1 KiB - 16 MiB) measured into 'collectives'; "
        f"tensor-parallel module overhead (DTensor dispatch of a tiny Colwise/Rowwise linear "
        f"beyond its plain compute and its all-reduce): forward {fwd * 1e6:.1f} us, backward "
        f"{bwd * 1e6:.1f} us."
    )


def calibrate(
    *,
    nproc: int = 2,
    device: str = "cpu",
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    reps: int = 5,
    all_pairs: bool = False,
    matmul_n: int | None = None,
    name: str | None = None,
    path: str | Path | None = None,
    timeout_s: float = 300.0,
    threads: int | None = None,
    collectives: bool = True,
) -> Calibration:
    """Measure ``nproc`` ranks on ``device`` and build a hardware description.

    Args:
        nproc: ranks (= pipeline stages of the replays this describes), >= 1; with 1 there
            is no rank-to-rank link to measure (a single-GPU machine: single-rank replays).
        device: ``cpu`` (gloo) or ``cuda`` (NCCL; needs ``nproc`` GPUs).
        sizes: ping-pong message sizes in bytes.
        reps: repetitions per measurement (median kept).
        all_pairs: measure every pair of ranks, not only neighbours ``(r, r+1)``.
        matmul_n: matmul size (default 1024 on CPU, 8192 on GPUs).
        name: hardware name (default ``calibrated-<host>-<device>``).
        path: write the YAML there.
        timeout_s: hard limit on the run.
        threads: CPU threads per rank (default cores // nproc).
        collectives: with ``nproc >= 2``, also measure the collectives and the
            tensor-parallel dispatch (module doc).

    Returns:
        The :class:`Calibration`; ``hardware`` loads with ``sim.hardware.spec.HardwareSpec``.

    Raises:
        backends.torch.launch.ReplayError: a rank failed or the run timed out.
    """
    if nproc < 1:
        raise ValueError(f"calibration needs nproc >= 1, got {nproc}")
    kind = device.split(":")[0]
    pairs = [[a, b] for a in range(nproc) for b in range(a + 1, nproc) if all_pairs or b == a + 1]
    host_sizes = [2**12, 2**20, 2**24, 2**26]
    payload = {
        "sizes": list(sizes),
        "reps": reps,
        "pairs": pairs,
        "host_sizes": host_sizes,
        "matmul_n": matmul_n or (8192 if kind == "cuda" else 1024),
        "copy_bytes": 2**30 if kind == "cuda" else 2**26,
        "collective_sizes": list(DEFAULT_COLLECTIVE_SIZES) if collectives else [],
        "gemm_shapes": [
            list(x)
            for x in (
                GEMM_SHAPES if kind == "cuda" else [(64, 64, 64), (256, 256, 256), (512, 512, 512)]
            )
        ],
    }
    ranks = run_ranks(
        "backends.torch.calibrate:run_rank",
        payload,
        nproc=nproc,
        device=kind,
        timeout_s=timeout_s,
        threads=threads,
    )
    best = [max(g["flops_per_s"] for g in r["gemm_by_shape"]) for r in ranks]
    flops = max(min(r["matmul_flops"] for r in ranks), min(best))
    hbm = min(r["copy_bandwidth_Bps"] for r in ranks)
    rank_threads = threads or max(1, (os.cpu_count() or 1) // nproc)
    adam = cpu_adam_rate(threads=os.cpu_count() or 1)
    memory = ranks[0].get("memory_bytes", _host_ram_bytes() / nproc)
    detail = ranks[0]["device_name"] if kind == "cuda" else cpu_model_name()
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    hardware: dict[str, Any] = {
        "name": name or f"calibrated-{platform.node()}-{kind}",
        "description": (
            f"Measured by backends.torch.calibrate on {date}: {nproc} ranks on {detail}, "
            f"{'NCCL' if kind == 'cuda' else 'gloo'}, torch {torch.__version__}. Effective numbers: "
            f"peak_flops = slowest rank's {payload['matmul_n']}^3 "
            f"{'bf16' if kind == 'cuda' else 'fp32'} matmul; hbm_bandwidth = 2*bytes/t of a copy; "
            "links = latency + bytes/bandwidth of ping-pong one-way times (bandwidth: "
            "least-squares slope; latency: the smallest message). "
            f"GEMM by shape (rank 0, m x n x k: TFLOP/s): {_gemm_summary(ranks[0])}. "
            f"CPU Adam: {adam['implementation']} torch.optim.Adam step over "
            f"{adam['params']} fp32 params with {adam['threads']} threads: "
            f"{adam['params_per_s']:.3g} params/s."
        ),
        "gpu": {
            "model": ranks[0]["device_name"],
            "memory": f"{memory / 2**30:.3f} GiB",
            "peak_flops": f"{flops / 1e12:.6f} TFLOPS",
            "hbm_bandwidth": f"{hbm / 1e9:.4f} GB/s",
            **_compute_fields(ranks, kind, rank_threads, flops),
        },
        "num_gpus": nproc,
        "hosts": [
            {
                "name": "cpu0",
                "dram": f"{_host_ram_bytes() / 2**30:.3f} GiB",
                "adam_params_per_s": float(f"{adam['params_per_s']:.4g}"),
            }
        ],
        "gpu_hosts": ["cpu0"] * nproc,
        "links": _links(ranks, kind, host_sizes),
    }
    if kind == "cuda":
        copies, big = ranks[0]["host_copies"], host_sizes[-1]
        hardware["description"] += (
            f" Pinned copies of {big / 2**20:.0f} MiB (rank 0): H2D {big / copies['h2d'][-1] / 1e9:.2f}, "
            f"D2H {big / copies['d2h'][-1] / 1e9:.2f}, both at once "
            f"{big / copies['both'][-1] / 1e9:.2f} GB/s each way. GEMM fp16 by shape: "
            + ", ".join(
                f"{g['m']}x{g['n']}x{g['k']}: {g['flops_per_s'] / 1e12:.3g}"
                for g in ranks[0]["gemm_by_shape_fp16"]
            )
            + " TFLOP/s."
        )
    if ranks[0].get("collectives"):
        _comm_fields(hardware, ranks, list(DEFAULT_COLLECTIVE_SIZES), date, kind)
    runtime_fields(hardware, ranks, kind)
    host = describe_host_overhead(kind, hardware, date)
    runtime = _runtime_memory(kind, hardware)
    result = Calibration(
        hardware, ranks, {"cpu_adam": adam, "runtime_memory": runtime, "host_overhead": host}
    )
    if path is not None:
        result.write_yaml(path)
    return result

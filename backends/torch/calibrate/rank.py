"""What every rank of ``sim calibrate`` measures (:mod:`backends.torch.calibrate.hardware` starts
them
and turns their results into a hardware description): an ``n x n`` matmul, a large copy, ping-pong
with its peers, GEMMs by shape, the launch overhead per kernel, host <-> device copies on GPUs,
the collectives and the tensor-parallel dispatch (:mod:`backends.torch.calibrate.comm`), our
runtime's per-action cost and step (:mod:`backends.torch.calibrate.runtime_costs`); and CPU Adam's
rate on the host (:func:`cpu_adam_rate`). Units: seconds, bytes, FLOP/s, bytes/s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from backends.torch.calibrate.comm import collective_sweep, dtensor_overhead
from backends.torch.calibrate.runtime_costs import measure_rank
from backends.torch.profile.layers import device_model_name, time_call
from backends.torch.replay.worker import RankContext

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

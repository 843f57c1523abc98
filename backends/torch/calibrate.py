"""Measure this machine as the replay uses it and write a hardware YAML (``sim/hardware/spec.py``).

:func:`calibrate` starts ``nproc`` ranks exactly as a replay does (:func:`backends.torch.launch.run_ranks`:
one process per rank, gloo on CPU, NCCL on GPUs) and measures on every rank at once:

* compute: the median time of an ``n x n`` matmul, ``peak_flops = 2 n^3 / t`` (fp32 on CPU,
  bf16 on GPUs). It is an *effective* peak, lower than a datasheet's.
* memory bandwidth: a large device-to-device ``copy_``, ``2 * bytes / t`` (read + write);
  written as ``hbm_bandwidth``.
* point-to-point: ping-pong between two ranks for several message sizes; the one-way time is
  half the round trip, and a least-squares fit ``t = latency + bytes / bandwidth`` gives the
  link's ``latency`` and ``bandwidth`` (neighbouring ranks by default, or every pair).
* host <-> device (GPUs only): pinned host buffers copied with ``non_blocking`` copies, fitted
  the same way, written as two directed ``pcie`` links ``cpu0 -> gpuK`` and ``gpuK -> cpu0``.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from backends.torch.launch import run_ranks
from backends.torch.profile import cpu_model_name, device_model_name, time_call
from backends.torch.worker import RankContext

DEFAULT_SIZES = (2**10, 2**14, 2**18, 2**20, 2**22, 2**24)
"""Message sizes in bytes for the ping-pong fit (1 KiB .. 16 MiB)."""


def fit_latency_bandwidth(sizes: list[float], times_s: list[float]) -> tuple[float, float]:
    """Least-squares fit of ``t = latency + size / bandwidth``.

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
    return max(0.0, my - slope * mx), 1.0 / slope


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
    res: dict[str, list[float]] = {"h2d": [], "d2h": []}
    for size in sizes:
        host = torch.empty(size // 4, dtype=torch.float32).pin_memory()
        gpu = torch.empty(size // 4, dtype=torch.float32, device=dev)
        res["h2d"].append(
            time_call(lambda g=gpu, h=host: g.copy_(h, non_blocking=True), dev, reps=reps)
        )
        res["d2h"].append(
            time_call(lambda g=gpu, h=host: h.copy_(g, non_blocking=True), dev, reps=reps)
        )
    return res


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
    if dev.type == "cuda":
        stats["memory_bytes"] = torch.cuda.get_device_properties(dev).total_memory
        stats["host_copies"] = _host_copies(dev, payload["host_sizes"], payload["reps"])
    return stats


@dataclass
class Calibration:
    """What :func:`calibrate` measured, and the hardware description built from it.

    Attributes:
        hardware: the hardware YAML as a dict (``sim.hardware.spec.HardwareSpec`` fields).
        ranks: raw per-rank measurements (FLOP/s, copy bandwidth, ping-pong times).
    """

    hardware: dict[str, Any]
    ranks: list[dict[str, Any]] = field(default_factory=list)

    def write_yaml(self, path: str | Path) -> Path:
        """Write :attr:`hardware` as YAML to ``path`` atomically (parent folders created)."""
        import yaml

        from sim.atomic import atomic_write_text

        return atomic_write_text(path, yaml.safe_dump(self.hardware, sort_keys=False))


def _host_ram_bytes() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _links(ranks: list[dict[str, Any]], device: str, host_sizes: list[int]) -> list[dict[str, Any]]:
    links = []
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
) -> Calibration:
    """Measure ``nproc`` ranks on ``device`` and build a hardware description.

    Args:
        nproc: ranks (= pipeline stages of the replays this describes), >= 2.
        device: ``cpu`` (gloo) or ``cuda`` (NCCL; needs ``nproc`` GPUs).
        sizes: ping-pong message sizes in bytes.
        reps: repetitions per measurement (median kept).
        all_pairs: measure every pair of ranks, not only neighbours ``(r, r+1)``.
        matmul_n: matmul size (default 1024 on CPU, 8192 on GPUs).
        name: hardware name (default ``calibrated-<host>-<device>``).
        path: write the YAML there.
        timeout_s: hard limit on the run.
        threads: CPU threads per rank (default cores // nproc).

    Returns:
        The :class:`Calibration`; ``hardware`` loads with ``sim.hardware.spec.HardwareSpec``.

    Raises:
        backends.torch.launch.ReplayError: a rank failed or the run timed out.
    """
    if nproc < 2:
        raise ValueError("calibration needs nproc >= 2 (point-to-point pairs)")
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
    }
    ranks = run_ranks(
        "backends.torch.calibrate:run_rank",
        payload,
        nproc=nproc,
        device=kind,
        timeout_s=timeout_s,
        threads=threads,
    )
    flops = min(r["matmul_flops"] for r in ranks)
    hbm = min(r["copy_bandwidth_Bps"] for r in ranks)
    memory = ranks[0].get("memory_bytes", _host_ram_bytes() / nproc)
    detail = ranks[0]["device_name"] if kind == "cuda" else cpu_model_name()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    hardware = {
        "name": name or f"calibrated-{platform.node()}-{kind}",
        "description": (
            f"Measured by backends.torch.calibrate on {date}: {nproc} ranks on {detail}, "
            f"{'NCCL' if kind == 'cuda' else 'gloo'}, torch {torch.__version__}. Effective numbers: "
            f"peak_flops = slowest rank's {payload['matmul_n']}^3 "
            f"{'bf16' if kind == 'cuda' else 'fp32'} matmul; hbm_bandwidth = 2*bytes/t of a copy; "
            "links = least-squares latency + bytes/bandwidth of ping-pong one-way times."
        ),
        "gpu": {
            "model": ranks[0]["device_name"],
            "memory": f"{memory / 2**30:.3f} GiB",
            "peak_flops": f"{flops / 1e12:.6f} TFLOPS",
            "hbm_bandwidth": f"{hbm / 1e9:.4f} GB/s",
        },
        "num_gpus": nproc,
        "hosts": [{"name": "cpu0", "dram": f"{_host_ram_bytes() / 2**30:.3f} GiB"}],
        "gpu_hosts": ["cpu0"] * nproc,
        "links": _links(ranks, kind, host_sizes),
    }
    result = Calibration(hardware, ranks)
    if path is not None:
        result.write_yaml(path)
    return result

"""Measure this machine as the replay uses it and write a hardware YAML (``sim/hardware/spec.py``).

:func:`calibrate` starts ``nproc`` ranks exactly as a replay does
(:func:`backends.torch.replay.launch.run_ranks`: one process per rank, gloo on CPU, NCCL on GPUs)
and measures on every rank at once:

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
* runtime memory (:mod:`backends.torch.calibrate.runtime_reserve`, a fresh process): the CUDA
  context and cuBLAS workspace (written as ``cuda_context`` / ``cublas_workspace`` on GPUs) and the
  caching allocator's overhead on a fixed pattern; on CPU the process's resident memory.

* GEMM efficiency by shape: achieved FLOP/s of the GEMMs in :data:`GEMM_SHAPES` (the
  transformer shapes the compute model times, :mod:`sim.compute.kernels`); the best is written
  as ``peak_flops`` with ``matmul_efficiency: 1`` (an effective peak), the table goes into
  ``Calibration.ranks`` and the description (GPUs: bf16, and fp16 in ``ranks``). GPUs also get
  ``fp32_flops`` (fp32 matmul, TF32 off), ``sm_count`` (``multi_processor_count``),
  ``hbm_efficiency: 1`` (the copy bandwidth is already effective) and ``kernel_overhead`` (median
  time per launch of a 1-element add in a loop of back-to-back launches).
* CPU Adam (:func:`cpu_adam_rate`): parameters per second of one ``torch.optim.Adam`` step on
  the host (``fused=True`` where torch supports it on CPU, else ``foreach``), written as the
  host's ``adam_params_per_s``.
* collectives (``nproc >= 2``; :mod:`backends.torch.calibrate.comm`): all-reduce, all-gather
  and reduce-scatter over all ranks from 1 KiB to 16 MiB through torch's functional collectives
  (gloo on CPU, NCCL on GPUs), written as the hardware's ``collectives:`` tables, which a
  communicator of ``nproc`` ranks then uses; and the tensor-parallel dispatch overhead per
  module (a tiny Colwise/Rowwise-parallel linear against a plain one), written as
  ``gpu.tp_module_overhead``.
* our pipeline runtime's per-action overhead and the replay's optimizer step per tensor and
  per byte (:mod:`backends.torch.calibrate.runtime_costs`), written on CPU ranks as
  ``gpu.action_overhead`` and ``gpu.optimizer_step``.
* host time per op (:mod:`backends.torch.profile.host_overhead`, in this process, one thread): a
  tiny transformer block's forward with and without autograd, its backward, and the checkpoint
  wrapper, per op as traces count ops. On GPUs it is written as ``host_overhead`` (the host
  issues, the device runs: :mod:`sim.hardware.host_ops`); on CPU it goes into the description and
  ``Calibration.host`` only, since a CPU rank's profiled times already contain its ops' host
  time (host and device are one thread).

What each rank measures is :mod:`backends.torch.calibrate.rank`; this module starts the ranks and
turns their results into the hardware description.

On CPU each rank is a "device" named like a GPU (``gpu0`` ...) of model ``cpu-rank`` with a
``1/nproc`` share of host RAM; the host link of a CPU rank is its memory copy bandwidth
(``loopback``). Ranks share the cores, so each uses ``cores // nproc`` threads, as in a replay.
"""

from __future__ import annotations

import datetime
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from backends.torch.calibrate.comm import DEFAULT_COLLECTIVE_SIZES, tables
from backends.torch.calibrate.rank import (
    DEFAULT_SIZES,
    GEMM_SHAPES,
    cpu_adam_rate,
    fit_latency_bandwidth,
)
from backends.torch.calibrate.runtime_costs import runtime_fields
from backends.torch.calibrate.runtime_reserve import measure_fresh
from backends.torch.profile.host_overhead import describe_host_overhead
from backends.torch.profile.layers import cpu_model_name
from backends.torch.replay.launch import run_ranks
from sim.atomic import atomic_write_text


@dataclass
class Calibration:
    """What :func:`calibrate` measured, and the hardware description built from it.

    Attributes:
        hardware: the hardware YAML as a dict (``sim.hardware.spec.HardwareSpec`` fields).
        ranks: raw per-rank measurements (FLOP/s, GEMM by shape, copy bandwidth, ping-pong
            times, kernel overhead).
        host: host measurements (``cpu_adam``: :func:`cpu_adam_rate`'s result;
            ``runtime_memory``: :func:`backends.torch.calibrate.runtime_reserve.measure` in a fresh
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
    """Measure the runtime reserve in a fresh process
    (:mod:`backends.torch.calibrate.runtime_reserve`);
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
    slowest rank's) into ``hardware`` (:mod:`backends.torch.calibrate.comm`)."""
    lib = "NCCL" if kind == "cuda" else "gloo"
    source = (
        f"backends.torch.calibrate.comm.collective_sweep on {date}: {len(ranks)} ranks, {lib} "
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
        backends.torch.replay.launch.ReplayError: a rank failed or the run timed out.
    """
    if nproc < 1:
        raise ValueError(f"calibration needs nproc >= 1, got {nproc}")
    kind = device.split(":")[0]
    payload = _payload(nproc, kind, sizes, reps, all_pairs, matmul_n, collectives)
    host_sizes = payload["host_sizes"]
    ranks = run_ranks(
        "backends.torch.calibrate.rank:run_rank",
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
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    hardware: dict[str, Any] = {
        "name": name or f"calibrated-{platform.node()}-{kind}",
        "description": _description(ranks, kind, nproc, payload, date, adam),
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


def _payload(
    nproc: int,
    kind: str,
    sizes: tuple[int, ...],
    reps: int,
    all_pairs: bool,
    matmul_n: int | None,
    collectives: bool,
) -> dict[str, Any]:
    """What :func:`calibrate` asks each rank to measure
    (:func:`backends.torch.calibrate.rank.run_rank`): ping-pong ``sizes`` (bytes) between
    neighbours (every pair with ``all_pairs``), host copies, an ``n^3`` matmul, a device copy,
    the collectives (with ``collectives``) and GEMMs by shape (smaller ones on a CPU)."""
    pairs = [[a, b] for a in range(nproc) for b in range(a + 1, nproc) if all_pairs or b == a + 1]
    cpu_gemms = [(64, 64, 64), (256, 256, 256), (512, 512, 512)]
    return {
        "sizes": list(sizes),
        "reps": reps,
        "pairs": pairs,
        "host_sizes": [2**12, 2**20, 2**24, 2**26],
        "matmul_n": matmul_n or (8192 if kind == "cuda" else 1024),
        "copy_bytes": 2**30 if kind == "cuda" else 2**26,
        "collective_sizes": list(DEFAULT_COLLECTIVE_SIZES) if collectives else [],
        "gemm_shapes": [list(x) for x in (GEMM_SHAPES if kind == "cuda" else cpu_gemms)],
    }


def _description(
    ranks: list[dict[str, Any]],
    kind: str,
    nproc: int,
    payload: dict[str, Any],
    date: str,
    adam: dict[str, Any],
) -> str:
    """The calibrated hardware's ``description``: when, where and how each effective number
    was measured, rank 0's GEMMs by shape, the CPU Adam rate, and on GPUs the pinned host
    copies and fp16 GEMMs."""
    detail = ranks[0]["device_name"] if kind == "cuda" else cpu_model_name()
    text = (
        f"Measured by backends.torch.calibrate.hardware on {date}: {nproc} ranks on {detail}, "
        f"{'NCCL' if kind == 'cuda' else 'gloo'}, torch {torch.__version__}. Effective numbers: "
        f"peak_flops = slowest rank's {payload['matmul_n']}^3 "
        f"{'bf16' if kind == 'cuda' else 'fp32'} matmul; hbm_bandwidth = 2*bytes/t of a copy; "
        "links = latency + bytes/bandwidth of ping-pong one-way times (bandwidth: "
        "least-squares slope; latency: the smallest message). "
        f"GEMM by shape (rank 0, m x n x k: TFLOP/s): {_gemm_summary(ranks[0])}. "
        f"CPU Adam: {adam['implementation']} torch.optim.Adam step over "
        f"{adam['params']} fp32 params with {adam['threads']} threads: "
        f"{adam['params_per_s']:.3g} params/s."
    )
    if kind != "cuda":
        return text
    copies, big = ranks[0]["host_copies"], payload["host_sizes"][-1]
    return text + (
        f" Pinned copies of {big / 2**20:.0f} MiB (rank 0): H2D {big / copies['h2d'][-1] / 1e9:.2f}, "
        f"D2H {big / copies['d2h'][-1] / 1e9:.2f}, both at once "
        f"{big / copies['both'][-1] / 1e9:.2f} GB/s each way. GEMM fp16 by shape: "
        + ", ".join(
            f"{g['m']}x{g['n']}x{g['k']}: {g['flops_per_s'] / 1e12:.3g}"
            for g in ranks[0]["gemm_by_shape_fp16"]
        )
        + " TFLOP/s."
    )

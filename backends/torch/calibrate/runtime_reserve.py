"""What a process holds besides its tensors: the runtime reserve and the allocator's overhead.

``python -m backends.torch.calibrate.runtime_reserve DEVICE`` prints :func:`measure`'s JSON; it runs
in a fresh process (:func:`measure_fresh`) so that "before any tensor" means it.

On CUDA (the numbers ``sim.hardware.capacity.RuntimeReserve`` assumes, memory.md §1):

* ``context_bytes``: device memory in use once the CUDA context exists and before any tensor
  (``total - free`` of ``torch.cuda.mem_get_info``, which creates the context). It includes
  other processes' memory on the device: run it on an otherwise idle GPU.
* ``first_segment_bytes``: what the first 4-byte tensor makes the caching allocator reserve.
* ``cublas_workspace_bytes``: device memory the first bf16 GEMM takes beyond the allocator's
  own reservation (cuBLAS handle and workspace, lazily loaded kernels).
* ``allocator``: a fixed pattern of activation-like tensors (:func:`allocator_overhead`).

On CPU, where there is no CUDA context and no caching allocator, the analogue is the process's
resident memory: ``context_bytes`` is the RSS after importing torch and running a first matmul,
``cublas_workspace_bytes`` is 0, and the allocator ratios are 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

_REPO_ROOT = Path(__file__).resolve().parents[3]


def _rss_bytes() -> float:
    """Resident set size of this process in bytes (Linux ``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return float(pages * os.sysconf("SC_PAGE_SIZE"))


def allocator_overhead(dev: torch.device, seed: int = 0) -> dict[str, float]:
    """Bytes the caching allocator holds beyond what tensors asked for, on a fixed pattern.

    The pattern: 64 tensors of 4 KiB .. 64 MiB (1 MiB on CPU; log-uniform, seeded) are allocated,
    every other one is freed, and 32 tensors 1.3x as large are allocated (activations of a new
    micro-batch arriving in the holes of freed ones).

    Returns:
        ``requested_bytes`` (sum of ``nbytes`` at the end), ``allocated_bytes``
        (``memory_allocated`` above the start: 512 B rounding), ``reserved_bytes``
        (``memory_reserved`` above the start), and the ratios ``rounding_ratio`` =
        allocated / requested and ``reserved_ratio`` = peak reserved / peak allocated. On CPU
        allocated = reserved = requested (ratios 1).
    """
    gen = torch.Generator().manual_seed(seed)
    cuda = dev.type == "cuda"
    span = 14 if cuda else 8  # up to 64 MiB on a GPU, 1 MiB on a CPU
    sizes = (4096 * 2 ** (span * torch.rand(64, generator=gen))).long().tolist()
    if cuda:
        torch.cuda.synchronize(dev)
        base_alloc, base_res = torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    live = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
    live = live[1::2]
    live += [torch.empty(int(n * 1.3), dtype=torch.uint8, device=dev) for n in sizes[::2]]
    requested = float(sum(t.nbytes for t in live))
    if not cuda:
        return dict(requested_bytes=requested, allocated_bytes=requested,
                    reserved_bytes=requested, rounding_ratio=1.0, reserved_ratio=1.0)  # fmt: skip
    allocated = float(torch.cuda.memory_allocated(dev) - base_alloc)
    reserved = float(torch.cuda.memory_reserved(dev) - base_res)
    peak_alloc = float(torch.cuda.max_memory_allocated(dev) - base_alloc)
    peak_res = float(torch.cuda.max_memory_reserved(dev) - base_res)
    del live
    torch.cuda.empty_cache()
    return dict(
        requested_bytes=requested,
        allocated_bytes=allocated,
        reserved_bytes=reserved,
        rounding_ratio=allocated / requested,
        reserved_ratio=peak_res / peak_alloc if peak_alloc else 1.0,
    )


def measure(device: str = "cpu") -> dict[str, Any]:
    """The runtime reserve and allocator overhead of this (fresh) process; see the module doc.

    Raises:
        RuntimeError: (from torch) CUDA asked for but not available.
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        a = torch.randn(256, 256)
        (a @ a).sum().item()
        return dict(device=device, context_bytes=_rss_bytes(), first_segment_bytes=0.0,
                    cublas_workspace_bytes=0.0, allocator=allocator_overhead(dev))  # fmt: skip
    torch.cuda.set_device(dev)
    free0, total = torch.cuda.mem_get_info(dev)
    x = torch.empty(1, device=dev)
    free1, _ = torch.cuda.mem_get_info(dev)
    res1 = torch.cuda.memory_reserved(dev)
    a = torch.randn(1024, 1024, dtype=torch.bfloat16, device=dev)
    (a @ a).sum().item()
    free2, _ = torch.cuda.mem_get_info(dev)
    res2 = torch.cuda.memory_reserved(dev)
    del x, a
    return dict(
        device=device,
        total_bytes=float(total),
        context_bytes=float(total - free0),
        first_segment_bytes=float(free0 - free1),
        cublas_workspace_bytes=float(max(0, (free1 - free2) - (res2 - res1))),
        allocator=allocator_overhead(dev),
    )


def measure_fresh(device: str = "cpu", timeout_s: float = 120.0) -> dict[str, Any]:
    """:func:`measure` in a new Python process (nothing allocated before it).

    Raises:
        RuntimeError: the process failed or timed out (its output in the message).
    """
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(_REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "backends.torch.calibrate.runtime_reserve", device],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"runtime memory measurement timed out after {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise RuntimeError(f"runtime memory measurement failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1] if len(sys.argv) > 1 else "cpu")))

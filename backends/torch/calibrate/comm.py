"""Measure the replay's collectives and its tensor-parallel dispatch on this machine.

Two measurements for ``sim calibrate`` (:mod:`backends.torch.calibrate.hardware`), run on every rank
at once:

* :func:`collective_sweep`: the times of all-reduce, all-gather and reduce-scatter over all
  ranks for a sweep of sizes, through torch's functional collectives
  (``torch.distributed._functional_collectives``: what DTensor's redistributions call, so gloo
  on CPU and NCCL on GPUs run the very code the tensor-parallel replay runs). Sizes are
  nccl-tests' ``B``: the all-reduce buffer, the all-gather output, the reduce-scatter input.
  Each size is timed ``reps`` times after a barrier, the median kept; the table written is the
  slowest rank's median per size (a collective ends on every rank together). These become the
  hardware's ``collectives:`` tables (:mod:`sim.hardware.comm_tables`).
* :func:`dtensor_overhead`: what one tensor-parallel module costs beyond its local compute and
  its collective: a tiny ``nn.Linear`` (8 x 8, so the arithmetic is negligible) under
  ``ColwiseParallel`` and under ``RowwiseParallel`` over all ranks, forward and backward, minus
  the same plain linear, minus the one tiny all-reduce each carries (Colwise: the input
  gradient's in the backward; Rowwise: the output's in the forward), measured alone. The mean of
  the two styles is the per-module forward and backward overhead the simulator adds per
  tensor-parallel module (:func:`sim.parallel.megatron.parallel_modules`): DTensor's dispatch
  (sharding propagation, ``from_local`` / ``to_local``, redistribution checks), a host cost per
  op. Megatron's own tensor parallelism runs plain tensors and has none of it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

KINDS = ("allreduce", "all_gather", "reduce_scatter")
DEFAULT_COLLECTIVE_SIZES = tuple(2**k for k in range(10, 25, 2))
"""1 KiB .. 16 MiB in factors of 4."""


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def median_s(fn: Callable[[], Any], dev: torch.device, reps: int, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` after ``warmup`` calls, every call started after a barrier."""
    times = []
    for i in range(warmup + reps):
        dist.barrier()
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def collective_call(kind: str, nbytes: int, world: int, dev: torch.device) -> Callable[[], Any]:
    """A call running one ``kind`` collective of ``nbytes`` (nccl-tests' ``B``) over the world."""
    group = dist.group.WORLD
    assert group is not None  # the ranks joined a process group
    n = max(world, nbytes // 4 // world * world)  # fp32 elements, divisible by the world
    if kind == "allreduce":
        buf = torch.ones(n, device=dev)
        return lambda: funcol.wait_tensor(funcol.all_reduce(buf, "sum", group))
    if kind == "all_gather":
        part = torch.ones(n // world, device=dev)
        return lambda: funcol.wait_tensor(funcol.all_gather_tensor(part, 0, group))
    whole = torch.ones(n, device=dev)
    return lambda: funcol.wait_tensor(funcol.reduce_scatter_tensor(whole, "sum", 0, group))


def collective_sweep(
    world: int, dev: torch.device, sizes: list[int], reps: int
) -> dict[str, list[float]]:
    """Median seconds of each collective kind at each size on this rank (module doc)."""
    return {
        kind: [median_s(collective_call(kind, b, world, dev), dev, reps) for b in sizes]
        for kind in KINDS
    }


def _linear_times(layer: nn.Module, x: torch.Tensor, dev: torch.device, reps: int):
    """``(forward_s, backward_s)`` medians of ``layer`` on ``x`` (a new graph each time)."""

    def fwd() -> torch.Tensor:
        return layer(x)

    fwd_s = median_s(fwd, dev, reps)
    bwd = []
    for _ in range(reps + 2):
        out = fwd().sum()
        dist.barrier()
        _sync(dev)
        t0 = time.perf_counter()
        out.backward()
        _sync(dev)
        bwd.append(time.perf_counter() - t0)
    return fwd_s, statistics.median(bwd[2:])


def dtensor_overhead(world: int, dev: torch.device, reps: int = 20) -> dict[str, float]:
    """Seconds per tensor-parallel module beyond its compute and collective (module doc).

    Returns:
        ``forward_s``, ``backward_s`` (never below 0), and the raw medians: ``plain``,
        ``colwise``, ``rowwise`` (each ``[forward_s, backward_s]``) and ``tiny_allreduce_s``.
    """
    torch.manual_seed(0)
    mesh = init_device_mesh(dev.type, (world,))
    x = torch.randn(4, 8 * world, device=dev, requires_grad=True)
    x_local = torch.randn(4, 8, device=dev, requires_grad=True)  # a row-parallel input shard
    plain = _linear_times(nn.Linear(8 * world, 8 * world).to(dev), x, dev, reps)
    styles = {}
    for name, style, inp in (
        ("colwise", ColwiseParallel(), x),
        ("rowwise", RowwiseParallel(), x_local),
    ):
        layer = parallelize_module(nn.Linear(8 * world, 8 * world).to(dev), mesh, style)
        styles[name] = _linear_times(layer, inp, dev, reps)
    ar_s = median_s(collective_call("allreduce", 4 * 8 * world * 4, world, dev), dev, reps)
    col_f, col_b = styles["colwise"]
    row_f, row_b = styles["rowwise"]
    fwd = ((col_f - plain[0]) + (row_f - plain[0] - ar_s)) / 2
    bwd = ((col_b - plain[1] - ar_s) + (row_b - plain[1])) / 2
    return {
        "forward_s": max(0.0, fwd),
        "backward_s": max(0.0, bwd),
        "plain": list(plain),
        "colwise": list(styles["colwise"]),
        "rowwise": list(styles["rowwise"]),
        "tiny_allreduce_s": ar_s,
    }


def tables(ranks: list[dict[str, Any]], sizes: list[int], source: str) -> list[dict[str, Any]]:
    """The hardware YAML's ``collectives:`` entries from every rank's :func:`collective_sweep`
    (the slowest rank's median per size)."""
    world = len(ranks)
    out = []
    for kind in KINDS:
        times = [max(r["collectives"][kind][i] for r in ranks) for i in range(len(sizes))]
        out.append(
            {
                "kind": kind,
                "ranks": world,
                "sizes": [int(b) for b in sizes],
                "times": [f"{t * 1e6:.2f} us" for t in times],
                "source": source,
            }
        )
    return out

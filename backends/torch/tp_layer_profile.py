"""Measure what a tensor-parallel block costs beyond its share of the compute, in the replay's layout.

The simulator times a tensor-parallel block as its unsplit profile scaled by the compute model
(:mod:`sim.tensor.shard`: about ``1/t`` of the GEMMs), plus the block's collectives from the
calibrated tables, plus a per-module overhead. On CPU that leaves out most of what the replay
(:mod:`backends.torch.tp_runtime`: ``torch.distributed.tensor.parallel`` on gloo) pays: each
DTensor op's Python dispatch (sharding propagation, ``from_local``/``to_local``), the linears'
bias added as a separate op on the sharded output, the redistributions' copies, and each
collective waiting for its peer inside a running block. The tiny 8 x 8 linear that
``sim calibrate`` times (:func:`backends.torch.calibrate_comm.dtensor_overhead`) sees only the
first of these: on the 2-core VM a block of hidden 256 at micro-batch 4 cost 13-15 ms forward
and 22-23 ms backward sharded over 2 gloo ranks, against 5.7 / 11.5 ms for the same rank's
share as plain tensors and 2 x 1.1 ms of all-reduce measured alone: 6 and 9 ms per block that no
trace held (2026-11-25, 2 ranks x 1 thread, torch 2.13.0+cpu).

So this module measures it on the model itself, on ``t`` ranks of ``threads`` threads each (the
replay's layout), for every micro-batch size and with and without sequence parallelism:

* ``sharded``: the forward and backward of one block split by
  :func:`backends.torch.tensor_parallel._block_plan` (what the replay runs), collectives included;
* ``local``: the same rank's share as plain tensors (its ``3h/t``, ``h/t``, ``f/t`` slices of the
  linears, no collective, no DTensor): what the simulator's scaled profile stands for;
* ``comm``: the block's collectives of one phase (:func:`sim.tensor.megatron.block_comm`: 2
  all-reduces of ``b s h`` elements, or 2 all-gathers and 2 reduce-scatters with sequence
  parallelism) timed alone through torch's functional collectives, as ``sim calibrate`` times
  the tables the simulator charges.

The block's overhead is ``sharded - local - comm`` per phase (never below 0), each the median of
``reps`` forward-backward iterations after a barrier. :func:`measure` returns one entry per
``(sequence_parallel, microbatch_size)``: the trace's ``provenance.tensor_parallel_overhead``,
which :func:`sim.tensor.shard.shard_trace` charges per block in place of the per-module
overhead.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

from backends.torch.calibrate_comm import _collective, _median_s
from backends.torch.launch import default_threads, run_ranks
from backends.torch.models import ModelSpec, as_spec, build_layers
from backends.torch.tensor_parallel import TPBlock, _block_plan, _linear
from backends.torch.tp_runtime import local
from sim.trace.native import write_trace
from sim.trace.schema import Trace


def _fwd_bwd_s(
    block: nn.Module, x: torch.Tensor, reps: int, warmup: int = 3
) -> tuple[float, float]:
    """Median ``(forward_s, backward_s)`` of ``block`` on ``x``, each iteration after a barrier."""
    fwd, bwd = [], []
    for i in range(warmup + reps):
        dist.barrier()
        t0 = time.perf_counter()
        y = block(x)
        t1 = time.perf_counter()
        local(y).sum().backward()
        t2 = time.perf_counter()
        if i >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def _rank_share(block: TPBlock, rank: int, t: int) -> TPBlock:
    """``block`` with its linears cut to rank ``rank``'s slices as plain tensors (module doc)."""
    h3, h, f = block.qkv.weight.shape[0], block.out.weight.shape[0], block.fc1.weight.shape[0]

    def rows(lin: nn.Linear, n: int) -> nn.Linear:
        part = slice(rank * n // t, (rank + 1) * n // t)
        return _linear(lin.weight[part].detach(), lin.bias[part].detach())

    def cols(lin: nn.Linear, n: int) -> nn.Linear:
        part = slice(rank * n // t, (rank + 1) * n // t)
        return _linear(lin.weight[:, part].detach(), lin.bias.detach())

    block.qkv, block.fc1 = rows(block.qkv, h3), rows(block.fc1, f)
    block.out, block.fc2 = cols(block.out, h), cols(block.fc2, f)
    return block


def _comm_s(b: int, s: int, h: int, t: int, sp: bool, reps: int) -> float:
    """Seconds of one phase's collectives of a block, each timed alone (module doc)."""
    dev, nbytes = torch.device("cpu"), b * s * h * 4
    kinds = ("all_gather", "reduce_scatter") if sp else ("allreduce",)
    calls: list[Callable[[], Any]] = [_collective(k, nbytes, t, dev) for k in kinds]
    return 2 * sum(_median_s(call, dev, reps) for call in calls)


def overhead(sharded_s: float, local_s: float, comm_s: float) -> float:
    """The block's overhead of one phase: ``max(0, sharded - local - comm)`` seconds."""
    return max(0.0, sharded_s - local_s - comm_s)


def run_rank(payload: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
    """Rank function: every ``(sequence_parallel, microbatch_size)`` entry (module doc)."""
    spec = as_spec(payload["spec"])
    t, reps, s, h = ctx.world_size, payload["reps"], spec.seq_len, spec.hidden
    torch.manual_seed(payload.get("seed", 0))
    mesh = init_device_mesh("cpu", (t,))
    entries = []
    for sp in payload["sequence_parallel"]:
        layers = build_layers(as_spec({**payload["spec"], "layers": 2}), payload.get("seed", 0))
        sharded = TPBlock(layers[1], h // spec.heads, t)  # type: ignore[arg-type]
        parallelize_module(sharded, mesh, _block_plan(sp))
        plain = _rank_share(TPBlock(layers[2], h // spec.heads, t), ctx.rank, t)  # type: ignore[arg-type]
        for b in payload["microbatch_sizes"]:
            x = torch.randn(b, s, h, requires_grad=True)
            xs = torch.randn(b, s // t, h, requires_grad=True) if sp else x
            sh_f, sh_b = _fwd_bwd_s(sharded, xs, reps)
            lo_f, lo_b = _fwd_bwd_s(plain, x, reps)
            comm = _comm_s(b, s, h, t, sp, reps)
            entries.append(
                {
                    "tensor_parallel": t,
                    "sequence_parallel": sp,
                    "microbatch_size": b,
                    "block_fwd_s": overhead(sh_f, lo_f, comm),
                    "block_bwd_s": overhead(sh_b, lo_b, comm),
                    "sharded_s": [sh_f, sh_b],
                    "local_s": [lo_f, lo_b],
                    "comm_s": comm,
                }
            )
    return entries


def measure(
    spec: ModelSpec | dict[str, Any],
    t: int,
    microbatch_sizes: list[int],
    *,
    threads: int,
    reps: int = 9,
    timeout_s: float = 600.0,
) -> list[dict[str, Any]]:
    """A GPT block's tensor-parallel overhead on ``t`` gloo ranks of ``threads`` threads.

    Args:
        spec: the model (a GPT shape; only one block is built).
        t: tensor-parallel ranks (processes).
        microbatch_sizes: samples per micro-batch to measure.
        threads: CPU threads per rank (the replay's: cores / ranks).
        reps: measured forward-backward iterations (median kept).
        timeout_s: limit on the whole multi-process run.

    Returns:
        One entry per ``(sequence_parallel, microbatch_size)`` (sequence parallelism only where
        ``t`` divides ``seq_len``): ``tensor_parallel``, ``sequence_parallel``,
        ``microbatch_size``, ``block_fwd_s``, ``block_bwd_s`` (the overheads, module doc), the
        raw medians ``sharded_s``, ``local_s`` (each ``[forward, backward]``) and ``comm_s``;
        the slowest rank's (a collective ends on all ranks together).

    Raises:
        backends.torch.launch.ReplayError: a rank failed or the run timed out.
    """
    spec = as_spec(spec)
    sps = [False, True] if spec.seq_len % t == 0 else [False]
    payload = {
        "spec": {
            k: getattr(spec, k)
            for k in ("name", "kind", "layers", "hidden", "heads", "seq_len", "vocab", "ffn_mult")
        },
        "microbatch_sizes": list(microbatch_sizes),
        "sequence_parallel": sps,
        "reps": reps,
    }
    ranks = run_ranks(
        f"{__name__}:run_rank", payload, nproc=t, threads=threads, timeout_s=timeout_s
    )
    return [
        max(row, key=lambda e: e["sharded_s"][0] + e["sharded_s"][1])
        for row in zip(*ranks, strict=True)
    ]


def with_tp_overhead(trace: Trace, spec: ModelSpec | dict[str, Any], t: int, *, reps: int,
                     path: str | Path | None = None, timeout_s: float = 600.0) -> Trace:  # fmt: skip
    """``trace`` with :func:`measure`'s entries for every micro-batch size it holds as
    ``provenance.tensor_parallel_overhead`` (replacing earlier entries at ``t``), on ``t`` ranks
    of :func:`backends.torch.launch.default_threads` threads each (what ``sim validate --nproc t``
    runs); written to ``path`` (:func:`sim.trace.native.write_trace`) when given.

    Raises:
        backends.torch.launch.ReplayError: a rank failed or the run timed out.
    """
    threads = default_threads(t)
    entries = measure(
        spec, t, trace.measured_sizes, threads=threads, reps=reps, timeout_s=timeout_s
    )
    source = (
        f"backends.torch.tp_layer_profile.measure on {datetime.now(UTC).isoformat(timespec='seconds')}: "
        f"{t} gloo ranks x {threads} thread(s), torch {torch.__version__}, median of {reps}"
    )
    old = [
        e
        for e in trace.provenance.get("tensor_parallel_overhead", [])
        if e.get("tensor_parallel") != t
    ]
    prov = {
        **trace.provenance,
        "tensor_parallel_overhead": old + [{**e, "source": source} for e in entries],
    }
    out = replace(trace, provenance=prov)
    if path is not None:
        write_trace(out, path)
    return out

"""A training framework's host work around the optimizer step: what its loop issues once per
iteration besides the model's layers, with the device idle.

Between the last backward of an iteration and the first forward of the next, a framework's
host walks the parameter tensors one by one (copies of each gradient to its fp32 master,
the gradient norm's filter, counting zeros, copying the updated master weights back),
reduces scalars over the ranks and reads them back (``.item()``: the gradient norm, the
found-inf flag, the statistics it logs), and writes its logs. Each read blocks the host until
the device has run everything issued, and each op it issues is small (a view, a cast of one
tensor, a one-element all-reduce), so the device waits for the host through all of it: the
time is the host's, exposed, not hidden under device work (Paszke et al., NeurIPS 2019, §5.3:
the host runs ahead only while it issues work faster than the device runs it).

:class:`StepHost` counts that work for one rank (a framework profile fills it from its code:
:mod:`sim.framework.megatron_host`); :func:`step_host_s` prices it with the rank's host
overhead (:class:`~sim.hardware.host_ops.HostOverhead`) and the time of a tiny all-reduce:

    seconds = h x (ops + per_tensor x T + per_optimizer_tensor x S + per_sharded_tensor x S'
                   + per_dense_tensor x T' + reductions)
              + reductions x all_reduce_s + reads x read_s

with ``h`` the host's per-op seconds without autograd recording (``nograd_op_s``: the step runs
under ``torch.no_grad()``), ``T`` the parameter tensors of the rank (every stage chunk it
holds, as one tensor rank holds them), ``S`` those its optimizer steps (``T``, or the tensors
of its shard when the optimizer state is sharded, :func:`shard_tensors`), ``S'`` = ``S`` with
a sharded optimizer and 0 without, ``T'`` = ``T`` without and 0 with. A reduction is one
collective call (one op on the host) whose result the host then reads: it waits for the
collective's device time (``all_reduce_s``: a few bytes over the job's GPUs) before the read.
The engine charges it as one block at each rank's step (:mod:`sim.engine.step`), logged as
``host_wait``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from sim.hardware.host_ops import HostOverhead


@dataclass(frozen=True)
class StepHost:
    """Host work of one rank once per iteration, around its optimizer step (module doc).

    Attributes:
        ops: ops issued once per iteration (not per tensor), without autograd recording.
        per_tensor: ops per parameter tensor of the rank (``T``).
        per_optimizer_tensor: ops per parameter tensor its optimizer steps (``S``).
        per_sharded_tensor: more ops per optimizer tensor when its state is sharded (``S'``).
        per_dense_tensor: more ops per parameter tensor when it is not (``T'``).
        reads: blocking device-to-host reads of a scalar (``.item()``, ``float(t)``), per
            iteration (a mean where the framework reads every few iterations).
        reductions: collectives of a few bytes over the job's GPUs that a read then waits
            for, per iteration (likewise).
        source: where the counts come from (the framework's files and functions).
    """

    ops: float = 0.0
    per_tensor: float = 0.0
    per_optimizer_tensor: float = 0.0
    per_sharded_tensor: float = 0.0
    per_dense_tensor: float = 0.0
    reads: float = 0.0
    reductions: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "source" and not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"StepHost.{f.name} must be a finite number >= 0, got {v!r}")

    def __add__(self, other: StepHost) -> StepHost:
        """Both works, one after the other (counts add; sources join)."""
        counts = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name != "source"
        }
        joined = "; ".join(s for s in (self.source, other.source) if s)
        return StepHost(**counts, source=joined)

    @property
    def empty(self) -> bool:
        """Whether it issues nothing."""
        return all(getattr(self, f.name) == 0 for f in fields(self) if f.name != "source")


def shard_tensors(tensors: float, width: int) -> float:
    """Parameter tensors one of ``width`` ranks steps when the optimizer state is sharded in
    contiguous ranges of the flat buffer that holds ``tensors`` tensors (Megatron-Core's
    ``DistributedOptimizer._build_model_gbuf_range``: each rank takes ``1/width`` of the
    bucket; a tensor that straddles a boundary has a piece on both ranks): ``tensors /
    width + 1``, at most ``tensors`` (an assumption: tensors of alike sizes).

    Example:
        >>> shard_tensors(148, 8), shard_tensors(3, 8), shard_tensors(10, 1)
        (19.5, 1.375, 10.0)
    """
    if width <= 1:
        return float(tensors)
    return min(float(tensors), tensors / width + 1)


def step_host_s(
    host: HostOverhead,
    work: StepHost,
    tensors: float,
    optimizer_tensors: float,
    sharded: bool,
    all_reduce_s: float,
) -> float:
    """Seconds the device waits for the host's step work (module doc's formula); 0 when the
    host is not modelled (``host.eager`` False, or no per-op or read cost: the presets without
    a host model) or nothing is issued.

    Args:
        host: the rank's host overhead.
        work: what the framework issues.
        tensors: ``T``, parameter tensors of the rank.
        optimizer_tensors: ``S``, those its optimizer steps.
        sharded: whether its optimizer state is sharded.
        all_reduce_s: seconds of one tiny all-reduce over the job's GPUs.

    Example:
        >>> h = HostOverhead(op_s=10e-6, nograd_op_s=8e-6, read_s=10e-6)
        >>> w = StepHost(ops=5, per_optimizer_tensor=2, per_sharded_tensor=3, reads=2, reductions=1)
        >>> round(step_host_s(h, w, 10, 4.0, True, 20e-6) * 1e6)  # 8*(5+8+12+1) + 20 + 2*10
        248
    """
    h = host.op_s if host.nograd_op_s is None else host.nograd_op_s
    if not host.eager or work.empty or (h <= 0 and host.read_s <= 0):
        return 0.0
    ops = (
        work.ops
        + work.per_tensor * tensors
        + work.per_optimizer_tensor * optimizer_tensors
        + (work.per_sharded_tensor * optimizer_tensors if sharded else 0.0)
        + (0.0 if sharded else work.per_dense_tensor * tensors)
        + work.reductions
    )
    return h * ops + work.reductions * all_reduce_s + work.reads * host.read_s


__all__ = ["StepHost", "shard_tensors", "step_host_s"]

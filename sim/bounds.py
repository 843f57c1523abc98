"""Bounds of a grid point computed without simulating it: a memory lower bound, a throughput
upper bound.

The planner (:mod:`sim.planner`) prunes with them, so they must hold for every point, whatever
partition the partitioner picks and whatever the engine's queues do. Both use only sums over
stages, which do not depend on the partition, and the averaging argument (the largest of
``p`` numbers is at least their mean).

**Memory.** The engine charges each stage replica's model states on the GPU (weights of every
version, gradients, optimizer state) and its runtime reserve (CUDA context, cuBLAS workspace,
NCCL buffers of each peer) at t = 0 and keeps them (:meth:`sim.engine.pipeline.Pipeline.run`),
so a GPU's peak is at least its stage's static bytes plus that reserve. Per parameter, a policy
keeps at least :func:`min_state_bytes_per_param` on the GPU (``none``, ``recompute``,
``cpu_swap``: every state; ``d2d_swap``: one weight version and the rest; ``zero_offload``: the
16-bit weights; ``zero3``: a ``1/w`` shard, 0 with ``:offload``; ``chunked``, ``auto`` and
anything else: 0). Under ``none`` every stash stays on the GPU too, so when a stage has its
``n_s`` in-flight micro-batches (the schedule's own :func:`~sim.schedules.analysis.peak_in_flight`)
it holds ``n_s x act_s``, and DistributedDataParallel's buckets hold one more copy of the
gradients (:func:`sim.memory.reserve.ddp_bucket_bytes`). Summed over the ``p`` stages of a
replica, the parameters and stashes add up to the (tensor-rank) trace's totals ``P`` and ``A``,
whatever the boundaries, so some GPU peaks at least at

``(P x bytes_per_param + min_s(n_s) x A) / p + reserve``

**Throughput.** Each rank's compute stream runs its stage's forwards and backwards one at a
time: ``m x (F_s + B_s)`` seconds per optimizer step (recompute, stalls, collectives and the
step only add to it). The busiest of ``p`` stages has at least the mean of the tensor-rank
trace's ``T = sum(fwd_s + bwd_s)``, and at least the largest layer (layers are not split), so
an iteration takes at least ``m x max(T / p, max layer)`` and the throughput is at most
``m x b x w`` samples over that. Flushed schedules (GPipe, 1F1B) have a tighter bound,
``(m - 1) x max(T / p, max layer) + T`` (one micro-batch crosses every stage's F and B in
order, the bottleneck runs the other ``m - 1``); the engine measures a flushed schedule between
the step ends of its last two iterations, and each rank starts an iteration when its own step
ends, so that bound holds when the rank stepping last is not one that starts the next
iteration earlier: :data:`FLUSH_BOUND` switches it on (the property tests compare both bounds
with full simulation).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from sim.compute.adapt import adapt_trace
from sim.config import PointConfig
from sim.memory.registry import parse_policy
from sim.memory.reserve import nccl_peers
from sim.memory.spec import PolicySpec
from sim.memory.states import (
    StateBytes,
    stage_state_bytes_per_param,
    state_bytes,
    version_bytes_per_param,
)
from sim.metrics import iterations_needed
from sim.schedules.analysis import peak_in_flight
from sim.schedules.registry import get_schedule
from sim.tensor.shard import shard_trace
from sim.trace.schema import Trace, dtype_bytes

FLUSH_BOUND = False
"""Use the flushed-pipeline bound ``(m - 1) x bottleneck + T`` for synchronous schedules
(module doc). Off: every schedule gets the no-bubble bound ``m x bottleneck``, which holds
without any assumption on the order in which ranks finish their optimizer steps."""

RESIDENT_KINDS = ("none", "recompute", "cpu_swap")
"""Policies that keep every model state (all weight versions) on the GPU."""


@dataclass(frozen=True)
class RankTotals:
    """One tensor rank's trace summed over its layers (a stage holds a contiguous part).

    Attributes:
        params: parameters (count).
        act_bytes: activation bytes stashed per micro-batch.
        compute_s: forward + backward seconds per micro-batch.
        max_layer_s: the largest layer's forward + backward seconds.
        layers: the number of layers.
        state: model-state bytes per parameter.
    """

    params: float
    act_bytes: float
    compute_s: float
    max_layer_s: float
    layers: int
    state: StateBytes


@dataclass(frozen=True)
class PointBounds:
    """A point's bounds: ``memory_bytes`` (some GPU peaks at least this high, bytes) and
    ``throughput_samples_per_s`` (the simulated throughput is at most this)."""

    memory_bytes: float
    throughput_samples_per_s: float


def min_state_bytes_per_param(
    spec: PolicySpec, sb: StateBytes, w: int, versions: int, vb: float
) -> float:
    """Model-state bytes per parameter a policy keeps on the GPU at least (module doc).

    Args:
        spec: the parsed ``memory_policy``.
        sb: bytes per parameter of each state class.
        w: data-parallel width (``zero3`` shards over it).
        versions: the fewest weight versions any stage keeps.
        vb: bytes per parameter of each extra version.
    """
    if spec.stages:
        return min(min_state_bytes_per_param(s, sb, w, versions, vb) for s in spec.stages)
    if spec.kind in RESIDENT_KINDS:
        return stage_state_bytes_per_param(sb, versions, vb)
    if spec.kind == "d2d_swap":
        return float(sb.total)
    if spec.kind == "zero_offload":
        return float(sb.weight)
    if spec.kind == "zero3" and "offload" not in spec.args:
        return sb.total / w
    return 0.0


class BoundModel:
    """Bounds of the points of one prepared experiment, with the per-(model, b, t, sp) trace
    totals and per-(schedule, p, m) in-flight counts cached (each is shared by many points).

    Args:
        prep: the loaded experiment (:class:`sim.sweep.Prepared`).
    """

    def __init__(self, prep) -> None:
        self.prep = prep
        self._totals: dict[tuple, RankTotals] = {}
        self._flight: dict[tuple, tuple[int, int]] = {}

    @cached_property
    def capacity_bytes(self) -> float:
        """The largest GPU capacity of the hardware, in bytes."""
        return max(g.memory_bytes for g in self.prep.topology.gpus)

    def totals(self, point: PointConfig) -> RankTotals:
        """The tensor-rank trace of ``point`` summed (cached).

        Raises:
            ValueError: the trace cannot be brought to the point's micro-batch size or split
                ``tensor_parallel`` ways (the point is then left to the simulator to report).
        """
        key = (point.model, point.microbatch_size, point.tensor_parallel, point.sequence_parallel)
        if key not in self._totals:
            self._totals[key] = self._rank_totals(point)
        return self._totals[key]

    def _rank_totals(self, point: PointConfig) -> RankTotals:
        gpu = self.prep.topology.gpus[0].compute
        trace: Trace = self.prep.traces[point.model]
        trace = adapt_trace(trace, point.microbatch_size, gpu)[0]
        trace = shard_trace(trace, point.tensor_parallel, point.sequence_parallel, gpu).trace
        layers = trace.layers
        return RankTotals(
            params=sum(x.param_bytes for x in layers) / dtype_bytes(trace.dtype),
            act_bytes=sum(x.act_bytes for x in layers),
            compute_s=sum(x.fwd_s + x.bwd_s for x in layers),
            max_layer_s=max(x.fwd_s + x.bwd_s for x in layers),
            layers=len(layers),
            state=state_bytes(trace.dtype, self.prep.exp.training.optimizer),
        )

    def flight(self, point: PointConfig) -> tuple[int, int]:
        """``(fewest in-flight micro-batches, fewest weight versions)`` over the stages."""
        key = (point.schedule, point.stages, point.microbatches)
        if key not in self._flight:
            sched = get_schedule(point.schedule)(point.stages, point.microbatches)
            its = self.prep.exp.training.iterations or iterations_needed(
                point.stages, point.microbatches, sched.synchronous
            )
            n = min(peak_in_flight(sched.program(its)))
            v = min(sched.weight_versions(s) for s in range(point.stages))
            self._flight[key] = (n, v)
        return self._flight[key]

    def memory_bytes(self, point: PointConfig) -> float:
        """A lower bound of the largest GPU peak of ``point``, in bytes (module doc)."""
        tot = self.totals(point)
        n, versions = self.flight(point)
        spec = parse_policy(point.memory_policy)
        p, w = point.stages, point.dp_width
        vb = version_bytes_per_param(point.schedule, tot.state)
        per_param = min_state_bytes_per_param(spec, tot.state, w, versions, vb)
        all_none = all(s.kind == "none" for s in (spec.stages or (spec,)))
        gpus = self.prep.topology.gpus
        if all_none and w > 1 and all(g.reserve.working for g in gpus):
            per_param += tot.state.grad  # DDP buckets (module doc)
        stash = n * tot.act_bytes if all_none else 0.0
        reserve = min(g.reserve.runtime_bytes(nccl_peers(p - 1, p, w)) for g in gpus)
        return (tot.params * per_param + stash) / p + reserve

    def iteration_s(self, point: PointConfig) -> float:
        """A lower bound of the simulated iteration time of ``point``, in seconds."""
        tot = self.totals(point)
        m, p = point.microbatches, point.stages
        bottleneck = max(tot.compute_s / p, tot.max_layer_s)
        if FLUSH_BOUND and get_schedule(point.schedule).synchronous:
            return (m - 1) * bottleneck + tot.compute_s
        return m * bottleneck

    def bounds(self, point: PointConfig) -> PointBounds:
        """Both bounds of ``point``.

        Raises:
            ValueError: see :meth:`totals`.
        """
        samples = point.microbatches * point.microbatch_size * point.dp_width
        return PointBounds(self.memory_bytes(point), samples / self.iteration_s(point))


__all__ = ["BoundModel", "PointBounds", "RankTotals", "min_state_bytes_per_param"]

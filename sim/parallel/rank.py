"""A point's trace as one of its ranks runs it, whatever splits it: :func:`rank_trace`.

Decoder traces (:mod:`sim.trace.decoder`) go through :func:`~sim.parallel.decoder_shard.
shard_decoder` (tensor, sequence, expert and context parallelism); T5 traces
(:mod:`sim.trace.t5`) through :func:`~sim.parallel.t5_shard.shard_t5` (tensor and sequence
parallelism); every other transformer trace through :func:`~sim.parallel.shard.shard_trace` (tensor and sequence parallelism only).
"""

from __future__ import annotations

from typing import Protocol

from sim.compute.routing import parse_routing
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.host_ops import HostOverhead
from sim.parallel.decoder_shard import DecoderShard, shard_decoder
from sim.parallel.layout import ParallelLayout
from sim.parallel.shard import ShardedTrace, shard_trace
from sim.parallel.t5_shard import shard_t5
from sim.trace.decoder import is_decoder
from sim.trace.schema import Trace
from sim.trace.t5 import is_t5


class PointConfig(Protocol):
    """What these functions read of a grid point (:class:`sim.point.config.PointConfig`, which
    sits above this module)."""

    @property
    def layout(self) -> ParallelLayout: ...
    @property
    def routing(self) -> str: ...
    @property
    def sp_regather(self) -> bool: ...


def needs_decoder(layout: ParallelLayout) -> str:
    """What of ``layout`` only decoder traces support (``""`` when nothing)."""
    if layout.ep > 1:
        return "expert_parallel > 1"
    if layout.cp > 1:
        return "context_parallel > 1"
    return ""


def rank_trace(
    trace: Trace,
    point: PointConfig,
    spec: ComputeSpec | None,
    overhead_s: tuple[float, float] = (0.0, 0.0),
    host: HostOverhead | None = None,
) -> ShardedTrace | DecoderShard:
    """``trace`` (at the point's micro-batch size, on the target GPU ``spec``) on one rank;
    ``overhead_s``: the GPU's tensor-parallel module overhead (:func:`~sim.parallel.shard.
    shard_trace`; not applied to decoder traces, whose replays do not use DTensor modules);
    ``host``: the rank's host, pricing a decoder's grouped experts' host work per kind
    (:func:`~sim.parallel.decoder_shard.shard_decoder`; None: the reference host's).

    Raises:
        ValueError: the trace cannot be split as the point says (why in the message), or a
            bad ``routing`` spec.
    """
    if is_decoder(trace):
        if spec is None:
            raise ValueError(f"trace {trace.name} is a decoder trace: it needs a GPU model")
        routing = parse_routing(point.routing)
        return shard_decoder(trace, point.layout, spec, routing, point.sp_regather, host)
    what = needs_decoder(point.layout)
    if what:
        raise ValueError(
            f"{what} needs a decoder trace (sim.trace.decoder, e.g. traces/mixtral-8x7b); "
            f"{trace.name} is not one"
        )
    lay = point.layout
    if is_t5(trace):
        return shard_t5(trace, lay.tp, lay.sp, spec, point.sp_regather)
    return shard_trace(trace, lay.tp, lay.sp, spec, overhead_s, point.sp_regather)

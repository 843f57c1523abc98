"""A point's trace as one of its ranks runs it, whatever splits it: :func:`rank_trace`.

Decoder traces (:mod:`sim.trace.decoder`) go through :func:`~sim.parallel.decoder_shard.
shard_decoder` (tensor, sequence, expert and context parallelism); every other transformer
trace through :func:`~sim.parallel.shard.shard_trace` (tensor and sequence parallelism only).
"""

from __future__ import annotations

from typing import Protocol

from sim.compute.routing import parse_routing
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.decoder_shard import DecoderShard, Parallel, shard_decoder
from sim.parallel.shard import ShardedTrace, shard_trace
from sim.trace.decoder import is_decoder
from sim.trace.schema import Trace


class PointConfig(Protocol):
    """What these functions read of a grid point (:class:`sim.point.config.PointConfig`, which
    sits above this module)."""

    @property
    def tensor_parallel(self) -> int: ...
    @property
    def sequence_parallel(self) -> bool: ...
    @property
    def context_parallel(self) -> int: ...
    @property
    def expert_parallel(self) -> int: ...
    @property
    def context_parallel_comm(self) -> str: ...
    @property
    def routing(self) -> str: ...


def parallel_of(point: PointConfig) -> Parallel:
    """The :class:`Parallel` of ``point``.

    Raises:
        ValueError: a bad ``routing`` spec.
    """
    return Parallel(
        point.tensor_parallel,
        point.sequence_parallel,
        point.context_parallel,
        point.expert_parallel,
        point.context_parallel_comm,
        parse_routing(point.routing),
    )


def needs_decoder(point: PointConfig) -> str:
    """What of ``point`` only decoder traces support (``""`` when nothing)."""
    if point.expert_parallel > 1:
        return "expert_parallel > 1"
    if point.context_parallel > 1:
        return "context_parallel > 1"
    return ""


def rank_trace(
    trace: Trace,
    point: PointConfig,
    spec: ComputeSpec | None,
    overhead_s: tuple[float, float] = (0.0, 0.0),
) -> ShardedTrace | DecoderShard:
    """``trace`` (at the point's micro-batch size, on the target GPU ``spec``) on one rank;
    ``overhead_s``: the GPU's tensor-parallel module overhead (:func:`~sim.parallel.shard.
    shard_trace`; not applied to decoder traces, whose replays do not use DTensor modules).

    Raises:
        ValueError: the trace cannot be split as the point says (why in the message).
    """
    if is_decoder(trace):
        if spec is None:
            raise ValueError(f"trace {trace.name} is a decoder trace: it needs a GPU model")
        return shard_decoder(trace, parallel_of(point), spec)
    what = needs_decoder(point)
    if what:
        raise ValueError(
            f"{what} needs a decoder trace (sim.trace.decoder, e.g. traces/mixtral-8x7b); "
            f"{trace.name} is not one"
        )
    return shard_trace(trace, point.tensor_parallel, point.sequence_parallel, spec, overhead_s)
